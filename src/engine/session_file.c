/*
 * session_file.c: a session's tokens and KV written to a file and read back
 * (graft_session_save, graft_session_load), so that computed prompts outlive the process.
 *
 * The file, in the machine's byte order:
 *   header: "GRAFTKV1", the model's fingerprint (below), the kernel set's name (16 bytes),
 *           the KV type, n_layer, n_head_kv, head_dim, head_dim_v, the sliding window, the
 *           number of positions n, and window_from: the first position the sliding-window
 *           layers hold (the session's retention, kv.h);
 *   the n tokens;
 *   for each position, for each layer that holds it (every layer from window_from on, the
 *           global ones before): its K row, then its V row, as the pool stores them;
 *   an FNV-1a checksum of everything before it.
 * Reading it back is a forward pass whose rows come from the file: positions are reserved
 * in chunks, written, and committed as a step commits them, so the pool drops the windows
 * it would have dropped and the session ends holding exactly what the saved one held. The
 * sliding-window rows before window_from are not in the file; they are zeros that the last
 * commits drop. Any check that fails leaves the session empty.
 *
 * Bit-identity across processes: the same tokens on the same weights and kernels give the
 * same KV bits (DESIGN.md invariant 1), so the file is bound to all three. The fingerprint
 * hashes the model's shapes and tensor layout and the first 4 KiB of every tensor's data
 * (a fine-tune with the same layout differs there); the kernel set and KV type are compared
 * by name and id.
 *
 * Runs on the engine thread (the pool is its own), between steps: file I/O stalls other
 * generations for its length, so it is meant for start-up and shutdown, and for idle
 * sessions.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/matmul_path.h"

#define MAGIC "GRAFTKV1"
enum { KERNELS_LEN = 16, SAMPLE_BYTES = 4096, LOAD_CHUNK = 256 };

typedef struct header {
    char magic[8];
    uint64_t fingerprint;
    char kernels[KERNELS_LEN];
    uint32_t kv_type;
    int32_t n_layer, n_head_kv, head_dim, head_dim_v, sliding_window;
    int32_t n, window_from;
} header;

/* ---- the model's fingerprint -------------------------------------------------------------- */


/* The hyperparameters the KV depends on, field by field (the struct's padding is not
 * data). */
static uint64_t hparams_hash(uint64_t h, const graft__hparams *hp)
{
    const int32_t ints[] = {(int32_t)hp->arch, hp->n_vocab,    hp->n_embd,     hp->n_layer,
                            hp->n_head,        hp->n_head_kv,  hp->head_dim,   hp->head_dim_v,
                            hp->n_ff,          hp->rope_dims,  (int32_t)hp->rope_layout,
                            hp->sliding_window};
    const float floats[] = {hp->rope_base, hp->rope_base_swa, hp->rope_freq_scale,
                            hp->rms_eps,   hp->attn_scale,    hp->embd_scale};
    h = graft__fnv1a(h, ints, sizeof ints);
    h = graft__fnv1a(h, floats, sizeof floats);
    return graft__fnv1a(h, hp->layer_is_swa, (size_t)hp->n_layer * sizeof hp->layer_is_swa[0]);
}

static uint64_t model_fingerprint(const struct graft_model *m)
{
    uint64_t h = hparams_hash(GRAFT_FNV1A_BASIS, &m->hp);
    const graft__gguf *g = m->file;
    for (uint64_t i = 0; i < graft__gguf_n_tensors(g); i++) {
        const graft__gguf_tensor *t = graft__gguf_tensor_at(g, i);
        h = graft__fnv1a(h, t->name.ptr, t->name.len);
        h = graft__fnv1a(h, &t->type, sizeof t->type);
        h = graft__fnv1a(h, t->ne, sizeof t->ne);
        h = graft__fnv1a(h, t->data, t->n_bytes < SAMPLE_BYTES ? t->n_bytes : SAMPLE_BYTES);
    }
    return h;
}

void graft__session_file_bind(graft_engine *e, uint32_t kv_type)
{
    e->model_fingerprint = model_fingerprint(e->model);
    uint64_t h = graft__fnv1a(GRAFT_FNV1A_BASIS, &e->model_fingerprint,
                              sizeof e->model_fingerprint);
    h = graft__fnv1a(h, e->ex.path->name, strlen(e->ex.path->name));
    e->kv_fingerprint = graft__fnv1a(h, &kv_type, sizeof kv_type);
}

static header header_of(const graft_engine *e, int32_t n, int32_t window_from)
{
    const graft__hparams *hp = &e->model->hp;
    header h = {.fingerprint = e->model_fingerprint,
                .kv_type = e->kv_iface.type,
                .n_layer = hp->n_layer,
                .n_head_kv = hp->n_head_kv,
                .head_dim = hp->head_dim,
                .head_dim_v = hp->head_dim_v,
                .sliding_window = hp->sliding_window,
                .n = n,
                .window_from = window_from};
    memcpy(h.magic, MAGIC, sizeof h.magic);
    snprintf(h.kernels, sizeof h.kernels, "%s", e->ex.path->name);
    return h;
}

/* Whether layer holds position pos in a session whose sliding-window layers hold
 * [window_from, n). */
static bool layer_holds(const graft__hparams *hp, int32_t layer, int32_t pos,
                        int32_t window_from)
{
    return !hp->layer_is_swa[layer] || pos >= window_from;
}

static size_t row_bytes(const graft_engine *e, int32_t width)
{
    return graft__type_row_bytes(e->kv_iface.type,
                                 (uint64_t)e->model->hp.n_head_kv * (uint64_t)width);
}

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct sink {
    FILE *f;
    uint64_t sum;
    bool failed;
} sink;

static void put(sink *k, const void *data, size_t n)
{
    if (k->failed)
        return;
    k->sum = graft__fnv1a(k->sum, data, n);
    k->failed = fwrite(data, 1, n, k->f) != n;
}

static void write_session(const graft_engine *e, const graft_session *s, sink *k)
{
    const graft__hparams *hp = &e->model->hp;
    int32_t n = atomic_load(&s->position), from = 0;
    while (from < n && !graft__kv_seq_holds(e->kv, s->seq, from))
        from++;
    header h = header_of(e, n, from);
    put(k, &h, sizeof h);
    put(k, s->tokens, (size_t)n * sizeof *s->tokens);
    size_t kb = row_bytes(e, hp->head_dim), vb = row_bytes(e, hp->head_dim_v);
    graft__kv kv = e->kv_iface;
    for (int32_t pos = 0; pos < n; pos++)
        for (int32_t l = 0; l < hp->n_layer; l++)
            if (layer_holds(hp, l, pos, from)) {
                put(k, kv.k_row(kv.self, l, s->seq, pos), kb);
                put(k, kv.v_row(kv.self, l, s->seq, pos), vb);
            }
    uint64_t sum = k->sum;
    put(k, &sum, sizeof sum);
}

static int save(graft_engine *e, graft_session *s, const char *path, char **errmsg)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "session save: the path is too long");
    sink k = {.f = fopen(tmp, "wb"), .sum = GRAFT_FNV1A_BASIS};
    if (k.f == NULL)
        return graft__errmsg(errmsg, GRAFT_EIO, "session save: cannot create %s: %s", tmp,
                             strerror(errno));
    write_session(e, s, &k);
    int err = k.failed ? (errno != 0 ? errno : EIO) : 0;
    if (fclose(k.f) != 0 && err == 0)
        err = errno ? errno : EIO;
    if (err == 0 && rename(tmp, path) != 0)
        err = errno;
    if (err != 0) {
        remove(tmp);
        return graft__errmsg(errmsg, GRAFT_EIO, "session save: cannot write %s: %s", path,
                             strerror(err));
    }
    return GRAFT_OK;
}

/* The session a file command is about, idle (and with `empty`, at position 0); NULL with
 * *rc the refusal otherwise. */
static graft_session *idle_session(graft_engine *e, graft__cmd *cmd, bool empty, int *rc)
{
    graft_session *s = graft__sessions_find(e, cmd->session_id);
    *rc = e->draining ? GRAFT_ESHUTDOWN
          : s == NULL ? GRAFT_ECLOSED
          : s->gen != NULL || (empty && atomic_load(&s->position) != 0)
              ? graft__errmsg(cmd->u.file.errmsg, GRAFT_EINVAL, "session %s: the session is %s",
                              empty ? "load" : "save", empty ? "not empty" : "generating")
              : GRAFT_OK;
    return *rc == GRAFT_OK ? s : NULL;
}

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct source {
    FILE *f;
    uint64_t sum;
} source;

static bool take(source *r, void *data, size_t n)
{
    if (fread(data, 1, n, r->f) != n)
        return false;
    r->sum = graft__fnv1a(r->sum, data, n);
    return true;
}

/* The file's size as its header describes it. */
static uint64_t described_size(const graft_engine *e, const header *h)
{
    const graft__hparams *hp = &e->model->hp;
    uint64_t rows = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        rows += (uint64_t)(hp->layer_is_swa[l] ? h->n - h->window_from : h->n);
    return sizeof *h + (uint64_t)h->n * sizeof(int32_t) +
           rows * (row_bytes(e, hp->head_dim) + row_bytes(e, hp->head_dim_v)) +
           sizeof(uint64_t);
}

static int check_header(const graft_engine *e, const header *h, uint64_t size,
                        const char *path, char **errmsg)
{
    header own = header_of(e, 0, 0);
    if (memcmp(h->magic, MAGIC, sizeof h->magic) != 0)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "session load: %s is not a graft "
                             "session file", path);
    if (strncmp(h->kernels, own.kernels, KERNELS_LEN) != 0 || h->kv_type != own.kv_type)
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED, "session load: %s was written by "
                             "the %.16s kernels with KV type %u; this engine runs %s with %u",
                             path, h->kernels, h->kv_type, own.kernels, own.kv_type);
    if (h->fingerprint != own.fingerprint || h->n_layer != own.n_layer ||
        h->n_head_kv != own.n_head_kv || h->head_dim != own.head_dim ||
        h->head_dim_v != own.head_dim_v || h->sliding_window != own.sliding_window)
        return graft__errmsg(errmsg, GRAFT_EUNSUPPORTED, "session load: %s was written for "
                             "another model", path);
    if (h->n < 0 || h->n > e->opts.max_context)
        return graft__errmsg(errmsg, GRAFT_ERANGE, "session load: %s holds %d positions; "
                             "the engine's sessions hold %d", path, (int)h->n,
                             (int)e->opts.max_context);
    if (h->window_from < 0 || h->window_from > h->n)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "session load: %s: window start %d "
                             "outside [0, %d]", path, (int)h->window_from, (int)h->n);
    uint64_t described = described_size(e, h);
    if (described != size)
        return graft__errmsg(errmsg, GRAFT_EFORMAT, "session load: %s is %llu bytes; its "
                             "header describes %llu", path, (unsigned long long)size,
                             (unsigned long long)described);
    return GRAFT_OK;
}

/* Positions [from, from + count) of s: reserved, their rows read (zeros for the sliding-window
 * rows the file leaves out), committed. */
static int load_chunk(graft_engine *e, graft_session *s, source *r, const header *h,
                      const int32_t *tokens, int32_t from, int32_t count)
{
    const graft__hparams *hp = &e->model->hp;
    graft__batch_entry *entries = e->entries;
    for (int32_t i = 0; i < count; i++)
        entries[i] = (graft__batch_entry){s->seq, from + i, tokens[from + i], false};
    graft__kv kv = e->kv_iface;
    int rc = kv.reserve(kv.self, entries, count);
    if (rc != GRAFT_OK)
        return rc;
    size_t kb = row_bytes(e, hp->head_dim), vb = row_bytes(e, hp->head_dim_v);
    for (int32_t pos = from; pos < from + count; pos++)
        for (int32_t l = 0; l < hp->n_layer; l++) {
            void *k = kv.k_row(kv.self, l, s->seq, pos), *v = kv.v_row(kv.self, l, s->seq, pos);
            if (!layer_holds(hp, l, pos, h->window_from)) {
                memset(k, 0, kb);
                memset(v, 0, vb);
            } else if (!take(r, k, kb) || !take(r, v, vb)) {
                return GRAFT_EIO;
            }
        }
    return graft__session_commit(e, s, entries, count);
}

static int load(graft_engine *e, graft_session *s, const char *path, char **errmsg)
{
    source r = {.f = fopen(path, "rb"), .sum = GRAFT_FNV1A_BASIS};
    struct stat st;
    if (r.f == NULL || fstat(fileno(r.f), &st) != 0) {
        int err = errno;
        if (r.f != NULL)
            fclose(r.f);
        return graft__errmsg(errmsg, GRAFT_EIO, "session load: cannot read %s: %s", path,
                             strerror(err));
    }
    header h;
    int rc = take(&r, &h, sizeof h) ? check_header(e, &h, (uint64_t)st.st_size, path, errmsg)
                                    : graft__errmsg(errmsg, GRAFT_EFORMAT, "session load: %s "
                                                    "is not a graft session file", path);
    int32_t *tokens = NULL;
    if (rc == GRAFT_OK && (tokens = graft__malloc((size_t)h.n * sizeof *tokens + 1)) == NULL)
        rc = graft__errmsg(errmsg, GRAFT_ENOMEM, "session load: out of memory");
    if (rc == GRAFT_OK && !take(&r, tokens, (size_t)h.n * sizeof *tokens))
        rc = graft__errmsg(errmsg, GRAFT_EIO, "session load: cannot read %s", path);
    for (int32_t i = 0; rc == GRAFT_OK && i < h.n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->model->hp.n_vocab)
            rc = graft__errmsg(errmsg, GRAFT_ERANGE, "session load: %s: token %d is %d, "
                               "outside the vocabulary", path, (int)i, (int)tokens[i]);
    int32_t chunk = e->opts.max_batch_tokens < LOAD_CHUNK ? e->opts.max_batch_tokens : LOAD_CHUNK;
    for (int32_t at = 0; rc == GRAFT_OK && at < h.n; at += chunk) {
        rc = load_chunk(e, s, &r, &h, tokens, at, h.n - at < chunk ? h.n - at : chunk);
        if (rc == GRAFT_ECAPACITY || rc == GRAFT_ENOMEM)
            rc = graft__errmsg(errmsg, rc, "session load: %s: no room for its %d positions "
                               "in the KV pool", path, (int)h.n);
        else if (rc != GRAFT_OK)
            rc = graft__errmsg(errmsg, rc, "session load: cannot read %s", path);
    }
    uint64_t sum = r.sum, stored;
    if (rc == GRAFT_OK && (fread(&stored, 1, sizeof stored, r.f) != sizeof stored || stored != sum))
        rc = graft__errmsg(errmsg, GRAFT_EFORMAT, "session load: %s is corrupt (its checksum "
                           "differs)", path);
    fclose(r.f);
    graft__free(tokens);
    if (rc != GRAFT_OK) {
        graft__kv_seq_truncate(e->kv, s->seq, 0);
        atomic_store(&s->position, 0);
    }
    return rc;
}

void graft__session_run_file(graft_engine *e, graft__cmd *cmd)
{
    bool loading = cmd->kind == GRAFT__CMD_LOAD;
    int rc;
    graft_session *s = idle_session(e, cmd, loading, &rc);
    if (s != NULL)
        rc = loading ? load(e, s, cmd->u.file.path, cmd->u.file.errmsg)
                     : save(e, s, cmd->u.file.path, cmd->u.file.errmsg);
    graft__engine_reply(e, cmd, rc);
}

/* ---- the public functions ------------------------------------------------------------------ */

static int file_call(graft_session *s, graft__cmd_kind kind, const char *path, char **errmsg,
                     const char *what)
{
    if (errmsg != NULL)
        *errmsg = NULL;
    if (s == NULL || path == NULL)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "%s: NULL argument", what);
    if (graft__engine_on_thread(s->engine))
        return graft__errmsg(errmsg, GRAFT_EINVAL, "%s: called from a callback", what);
    char *message = NULL;
    graft__cmd cmd = {.kind = kind, .session_id = s->id, .u.file = {path, &message}};
    int rc = graft__engine_call(s->engine, &cmd);
    if (rc != GRAFT_OK && message == NULL)
        return graft__errmsg(errmsg, rc, "%s: %s", what, graft_status_str(rc));
    if (errmsg != NULL)
        *errmsg = message;
    else
        graft__free(message);
    return rc;
}

int graft_session_save(graft_session *session, const char *path, char **errmsg)
{
    return file_call(session, GRAFT__CMD_SAVE, path, errmsg, "session save");
}

int graft_session_load(graft_session *session, const char *path, char **errmsg)
{
    return file_call(session, GRAFT__CMD_LOAD, path, errmsg, "session load");
}
