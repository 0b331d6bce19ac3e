/*
 * fuzz_gguf.c: libFuzzer target for the GGUF reader (and, through round trips, the writer).
 *
 * Each input is opened with graft__gguf_open_memory. A refused input must come with a
 * "gguf: ... (offset N)" message (or be out of memory); an accepted one is walked
 * completely: every kv (strings, nested arrays, numeric elements through the converting
 * getters), every tensor's first and last data byte, lookups by name. Then it is copied
 * through the writer (kvs via copy_kv, tensors borrowed), the copy must open again with
 * the same counts and tensor bytes, and nothing may leak. ASan and UBSan do the rest.
 * Seeds live in tests/fuzz/seeds/fuzz_gguf/.
 */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

#define MAX_COPY_ALIGNMENT 4096 /* bigger alignments make the copy pad megabytes */

static void require(bool ok)
{
    if (!ok)
        abort();
}

static volatile uint64_t sink; /* keeps the walks from being optimized away */

static void walk_array(const graft__gguf_array *a)
{
    for (uint64_t i = 0; i < a->count; i++) {
        switch (a->elem_type) {
        case GRAFT_GGUF_STRING:
            if (a->strings[i].len > 0)
                sink += (uint8_t)a->strings[i].ptr[a->strings[i].len - 1];
            break;
        case GRAFT_GGUF_ARRAY:
            require(a->items[i].type == GRAFT_GGUF_ARRAY);
            walk_array(&a->items[i].v.arr);
            break;
        default:
            sink += (uint64_t)graft__gguf_arr_i64(a, i);
            sink += (uint64_t)(graft__gguf_arr_f32(a, i) == 0.0f);
            break;
        }
    }
}

static void walk_getters(const graft__gguf *g, const char *key)
{
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    bool b;
    graft__gguf_str s;
    const graft__gguf_array *a;
    sink += (uint64_t)graft__gguf_get_u32(g, key, &u32);
    sink += (uint64_t)graft__gguf_get_i32(g, key, &i32);
    sink += (uint64_t)graft__gguf_get_u64(g, key, &u64);
    sink += (uint64_t)graft__gguf_get_f32(g, key, &f);
    sink += (uint64_t)graft__gguf_get_bool(g, key, &b);
    sink += (uint64_t)graft__gguf_get_str(g, key, &s);
    sink += (uint64_t)graft__gguf_get_arr(g, key, GRAFT_GGUF_VTYPE_COUNT, &a);
}

static void walk_kvs(const graft__gguf *g)
{
    for (uint64_t i = 0; i < graft__gguf_n_kv(g); i++) {
        const graft__gguf_kv *kv = graft__gguf_kv_at(g, i);
        if (kv->value.type == GRAFT_GGUF_ARRAY)
            walk_array(&kv->value.v.arr);
        else if (kv->value.type == GRAFT_GGUF_STRING && kv->value.v.str.len > 0)
            sink += (uint8_t)kv->value.v.str.ptr[0];
        char *key = graft__strndup(kv->key.ptr, (size_t)kv->key.len);
        if (key == NULL)
            continue;
        /* A key holding a NUL byte is found under its prefix, if at all. */
        if (strlen(key) == kv->key.len)
            require(graft__gguf_find(g, key) == &kv->value);
        walk_getters(g, key);
        graft__free(key);
    }
}

static void walk_tensors(const graft__gguf *g)
{
    for (uint64_t i = 0; i < graft__gguf_n_tensors(g); i++) {
        const graft__gguf_tensor *t = graft__gguf_tensor_at(g, i);
        require(t->n_bytes > 0 && t->offset % graft__gguf_alignment(g) == 0);
        require(graft__gguf_data_offset(g) + t->offset + t->n_bytes <= graft__gguf_file_size(g));
        const uint8_t *d = t->data;
        sink += d[0] + d[t->n_bytes - 1];
        char *name = graft__strndup(t->name.ptr, (size_t)t->name.len);
        if (name == NULL)
            continue;
        if (strlen(name) == t->name.len)
            require(graft__gguf_find_tensor(g, name) == t);
        graft__free(name);
    }
}

/* Copies g through the writer; NULL when the writer refuses (names with NUL bytes, ...). */
static graft__gguf_writer *copy_of(const graft__gguf *g)
{
    if (graft__gguf_alignment(g) > MAX_COPY_ALIGNMENT)
        return NULL;
    graft__gguf_writer *w = graft__gguf_writer_create(graft__gguf_version(g),
                                                      graft__gguf_alignment(g));
    if (w == NULL)
        return NULL;
    int rc = GRAFT_OK;
    for (uint64_t i = 0; rc == GRAFT_OK && i < graft__gguf_n_kv(g); i++)
        rc = graft__gguf_writer_copy_kv(w, graft__gguf_kv_at(g, i));
    for (uint64_t i = 0; rc == GRAFT_OK && i < graft__gguf_n_tensors(g); i++) {
        const graft__gguf_tensor *t = graft__gguf_tensor_at(g, i);
        char *name = graft__strndup(t->name.ptr, (size_t)t->name.len);
        rc = name == NULL ? GRAFT_ENOMEM
                          : graft__gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne,
                                                          t->data, NULL, NULL);
        graft__free(name);
    }
    if (rc != GRAFT_OK) {
        graft__gguf_writer_free(w);
        return NULL;
    }
    return w;
}

/* The copy opens again with the same kvs and tensors. */
static void check_round_trip(const graft__gguf *g)
{
    graft__gguf_writer *w = copy_of(g);
    if (w == NULL)
        return;
    void *data;
    size_t size;
    int rc = graft__gguf_writer_write_memory(w, &data, &size);
    graft__gguf_writer_free(w);
    require(rc == GRAFT_OK);
    graft__gguf *h = NULL;
    rc = graft__gguf_open_memory(data, size, &h, NULL);
    require(rc == GRAFT_OK);
    require(graft__gguf_n_kv(h) == graft__gguf_n_kv(g));
    require(graft__gguf_n_tensors(h) == graft__gguf_n_tensors(g));
    for (uint64_t i = 0; i < graft__gguf_n_tensors(g); i++) {
        const graft__gguf_tensor *a = graft__gguf_tensor_at(g, i), *b = graft__gguf_tensor_at(h, i);
        require(a->n_bytes == b->n_bytes && memcmp(a->data, b->data, (size_t)a->n_bytes) == 0);
    }
    graft__gguf_close(h);
    graft__free(data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long live = graft__alloc_live();
    graft__gguf *g = NULL;
    char *err = NULL;
    int rc = graft__gguf_open_memory(data, size, &g, &err);
    if (rc != GRAFT_OK) {
        require(g == NULL && err != NULL && strncmp(err, "gguf: ", 6) == 0);
        require(rc == GRAFT_ENOMEM || strstr(err, "(offset ") != NULL);
        graft__free(err);
    } else {
        require(err == NULL);
        walk_kvs(g);
        walk_tensors(g);
        check_round_trip(g);
        graft__gguf_close(g);
    }
    require(graft__alloc_live() == live);
    return 0;
}
