/*
 * matmul_q32_r8_avxvnni.c: the avxvnni path's tiles of packed Q8_0 and Q4_0: the avx2
 * source (matmul_q32_r8_avx2.c) compiled a second time with GRAFT_AVX_VNNI and -mavxvnni,
 * so that each block vector costs one vpdpbusd. It gives the avx2 tiles' bits.
 */
#define GRAFT_AVX_VNNI 1
#include "matmul_q32_r8_avx2.c"
