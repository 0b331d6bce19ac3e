/*
 * matmul_avxvnni.c: the avxvnni matmul path, for CPUs with AVX-VNNI (256-bit vpdpbusd and
 * vpdpwssd) but no AVX-512: the avx2 path's source (matmul_avx2.c) compiled a second time
 * with GRAFT_AVX_VNNI and -mavx2 -mfma -mf16c -mavxvnni. It gives the same bits as the avx2
 * path; how, is said at the top of matmul_avx2.c. The packed Q4_K tile is the avx2 one
 * (matmul_q4k_r8_avx2.c). The caller selects it only after CPUID reports AVX-VNNI.
 */
#define GRAFT_AVX_VNNI 1
#include "matmul_avx2.c"
