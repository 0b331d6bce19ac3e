/*
 * persist.c: the prefix cache written to a folder and read back (graft_prefix_cache_save,
 * graft_prefix_cache_load, include/graft.h), so that prompts computed before a restart are
 * not computed again after it.
 *
 * One file per snapshot, written by graft_session_save: prefix-<F>-<K>.kv, F the engine's
 * kv_fingerprint (its model, kernel set and KV type) and K a hash of the snapshot's key, in
 * 16 hex digits each. Only the snapshots whose key no other snapshot's key extends are
 * written: a lookup that would have matched the shorter one matches the longer one at
 * least as far (on a sliding-window model it may have to back off to a boundary the longer
 * one retains). Files with this engine's F that the save did not write are removed, so the
 * folder holds the cache as it was; files of other models, kernel sets or KV types, and any
 * other file, are left alone: one folder may serve several. A load reads every file with
 * this engine's F into a new session and inserts it; files the engine or the cache refuses
 * (damaged, no room, the cache's bounds) are skipped and counted.
 *
 * Locking: the snapshots are pinned under cache->mu and saved with it released (each save
 * is an engine round trip), as lookups do (lookup.c).
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "prefix/prefix.h"

#define FILE_PREFIX "prefix-"
#define FILE_SUFFIX ".kv"

typedef struct held {
    graft__prefix_entry *entry; /* pinned */
    int32_t *tokens;            /* its key (graft_free) */
    size_t n;
} held;

/* "prefix-<F>-": the start of the names of this cache's engine's files. */
static void name_start(const graft_prefix_cache *cache, char start[32])
{
    graft_engine_config config;
    graft_engine_get_config(cache->engine, &config);
    snprintf(start, 32, FILE_PREFIX "%016llx-", (unsigned long long)config.kv_fingerprint);
}

/* Whether name is a file this cache writes (its engine's fingerprint, a key's hash). */
static bool ours(const char *name, const char *start)
{
    size_t len = strlen(name), pre = strlen(start), suf = strlen(FILE_SUFFIX);
    return len == pre + 16 + suf && strncmp(name, start, pre) == 0 &&
           strcmp(name + len - suf, FILE_SUFFIX) == 0 &&
           strspn(name + pre, "0123456789abcdef") == 16;
}

static void file_of(char *path, size_t cap, const char *dir, const char *start,
                    const int32_t *tokens, size_t n)
{
    uint64_t h = graft__fnv1a(GRAFT_FNV1A_BASIS, tokens, n * sizeof *tokens);
    snprintf(path, cap, "%s/%s%016llx" FILE_SUFFIX, dir, start, (unsigned long long)h);
}

/* Whether a's key is a strict prefix of another key in v. */
static bool extended(const held *v, size_t count, const held *a)
{
    for (size_t i = 0; i < count; i++)
        if (v[i].n > a->n && memcmp(v[i].tokens, a->tokens, a->n * sizeof *a->tokens) == 0)
            return true;
    return false;
}

/* Removes the files of ours in dir that none of the written paths names. */
static void remove_stale(const char *dir, const char *start, char (*written)[4096],
                         size_t n_written)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (!ours(de->d_name, start))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        bool keep = false;
        for (size_t i = 0; i < n_written && !keep; i++)
            keep = strcmp(written[i], path) == 0;
        if (!keep)
            remove(path);
    }
    closedir(d);
}

int graft_prefix_cache_save(graft_prefix_cache *cache, const char *dir, int32_t *saved,
                            char **errmsg)
{
    if (errmsg != NULL)
        *errmsg = NULL;
    if (saved != NULL)
        *saved = 0;
    if (cache == NULL || dir == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "prefix cache save: NULL argument");
    pthread_mutex_lock(&cache->mu);
    size_t count = (size_t)cache->n_entries;
    held *v = graft__calloc(count + 1, sizeof *v);
    char(*written)[4096] = graft__malloc((count + 1) * sizeof *written);
    if (v == NULL || written == NULL) {
        pthread_mutex_unlock(&cache->mu);
        graft__free(v);
        graft__free(written);
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "prefix cache save: out of memory");
    }
    size_t k = 0;
    for (graft__prefix_entry *e = cache->oldest; e != NULL; e = e->newer) {
        graft__prefix_pin(e);
        v[k++].entry = e;
    }
    pthread_mutex_unlock(&cache->mu);
    int rc = GRAFT_OK;
    for (size_t i = 0; i < count && rc == GRAFT_OK; i++)
        rc = graft_session_tokens(v[i].entry->snapshot, &v[i].tokens, &v[i].n);
    size_t n_written = 0;
    char start[32];
    name_start(cache, start);
    for (size_t i = 0; i < count && rc == GRAFT_OK; i++) {
        if (v[i].n == 0 || extended(v, count, &v[i]))
            continue;
        file_of(written[n_written], sizeof written[0], dir, start, v[i].tokens, v[i].n);
        rc = graft_session_save(v[i].entry->snapshot, written[n_written], errmsg);
        n_written += rc == GRAFT_OK;
    }
    if (rc == GRAFT_OK)
        remove_stale(dir, start, written, n_written);
    pthread_mutex_lock(&cache->mu);
    for (size_t i = 0; i < count; i++)
        graft__prefix_unpin(v[i].entry);
    pthread_mutex_unlock(&cache->mu);
    for (size_t i = 0; i < count; i++)
        graft_free(v[i].tokens);
    graft__free(v);
    graft__free(written);
    if (saved != NULL)
        *saved = (int32_t)n_written;
    if (rc != GRAFT_OK && errmsg != NULL && *errmsg == NULL)
        graft__errmsg(errmsg, rc, "prefix cache save: %s", graft_status_str(rc));
    return rc;
}

/* One file: a new session filled from it and inserted. */
static int load_one(graft_prefix_cache *cache, const char *path, char **errmsg)
{
    graft_session *s = NULL;
    int rc = graft_session_open(cache->engine, &s, errmsg);
    if (rc == GRAFT_OK)
        rc = graft_session_load(s, path, errmsg);
    int32_t *tokens = NULL;
    size_t n = 0;
    if (rc == GRAFT_OK)
        rc = graft_session_tokens(s, &tokens, &n);
    if (rc != GRAFT_OK || n == 0) {
        graft_session_close(s);
        graft_free(tokens);
        return rc != GRAFT_OK ? rc : GRAFT_EFORMAT;
    }
    rc = graft_prefix_cache_insert(cache, tokens, n, s);
    graft_free(tokens);
    if (rc != GRAFT_OK)
        graft__errmsg(errmsg, rc, "prefix cache load: %s: not kept (%s)", path,
                      graft_status_str(rc));
    return rc;
}

int graft_prefix_cache_load(graft_prefix_cache *cache, const char *dir, int32_t *loaded,
                            int32_t *refused, char **errmsg)
{
    if (errmsg != NULL)
        *errmsg = NULL;
    *loaded = *refused = 0;
    if (cache == NULL || dir == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "prefix cache load: NULL argument");
    DIR *d = opendir(dir);
    if (d == NULL)
        return graft__errmsg(errmsg, GRAFT_EIO, "prefix cache load: cannot open %s", dir);
    char start[32];
    name_start(cache, start);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (!ours(de->d_name, start))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        char *why = NULL;
        if (load_one(cache, path, &why) == GRAFT_OK) {
            (*loaded)++;
        } else {
            (*refused)++;
            if (errmsg != NULL && *errmsg == NULL) /* the first reason */
                *errmsg = why;
            else
                graft_free(why);
        }
    }
    closedir(d);
    return GRAFT_OK;
}
