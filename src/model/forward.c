/*
 * forward.c: the batched forward pass of every supported architecture.
 *
 * A batch is a list of (sequence, position, token) entries, possibly from many sequences.
 * Each layer runs over all entries at once: projections are one matmul per weight for the
 * whole batch (so each weight is read once per batch), then every entry's K and V rows are
 * written through the KV interface, then each entry attends over its own sequence's keys.
 * Every step computes an entry's values independently of the other entries (the kernels
 * are batch invariant), so a token's logits do not depend on what it was batched with.
 *
 * Per token, top to bottom (docs/architectures.md):
 *   x = embd[token] * embd_scale
 *   for each layer:  h = norm(x); q,k,v = proj(h) (+bias); q,k = qk_norm; rope(q,k)
 *                    o = Wo attend(q, K, V); o = post_norm(o); x += o
 *                    h = norm(x); f = Wdown(act(Wgate h) * Wup h); f = post_norm(f); x += f
 *   logits = Wout norm(x)  (softcapped when the model says so)
 */
#include <stdbool.h>
#include <string.h>

#include "kernels/matmul_path.h"
#include "model/model.h"

/* Scratch for batches of up to max_tokens entries at positions up to max_pos; all
 * (n, width) row-major. */
typedef struct graft__scratch scratch;
struct graft__scratch {
    float *x;     /* (n, n_embd) residual stream */
    float *h;     /* (n, n_embd) normed input of a block */
    float *q;     /* (n, n_head * head_dim) */
    float *k;     /* (n, n_head_kv * head_dim) */
    float *v;     /* (n, n_head_kv * head_dim_v) */
    float *att;   /* (n, n_head * head_dim_v) attention output */
    float *o;     /* (n, n_embd) block output */
    float *gate;  /* (n, n_ff) */
    float *up;    /* (n, n_ff) */
    const void **keys;    /* (threads, max_pos + 1) key pointers of one head (or whole rows) */
    const void **values;  /* (threads, max_pos + 1) value pointers of one head (or whole rows) */
    int32_t *tiles;       /* (n + 1) starts of the attention tiles (attend_all) */
    float *rope;          /* (2, n, rope_dims) each entry's rotation (graft__rope_angles) for
                             the full-attention layers, then for the sliding-window ones */
    graft__attend_split split; /* the chunk form of attention for a lone entry, where the
                                  path has one for the model's heads (else all NULL) */
    float *chunk_out;     /* (max_chunks, n_head, head_dim_v) its chunks' weighted values */
    float *chunk_max;     /* (max_chunks, n_head) their maxima */
    float *chunk_sum;     /* (max_chunks, n_head) their weight sums */
    int64_t ptr_stride;   /* max_pos + 1 */
    graft__exec ex;       /* threads, path and aligned activation buffer */
    bool packed;          /* ex.path is the model's packed_path: use the packed weights */
    int32_t max_tokens, max_pos;
};

static void scratch_free(scratch *s)
{
    graft__free(s->x);
    graft__free(s->h);
    graft__free(s->q);
    graft__free(s->k);
    graft__free(s->v);
    graft__free(s->att);
    graft__free(s->o);
    graft__free(s->gate);
    graft__free(s->up);
    graft__free(s->keys);
    graft__free(s->values);
    graft__free(s->tiles);
    graft__free(s->rope);
    graft__free(s->chunk_out);
    graft__free(s->chunk_max);
    graft__free(s->chunk_sum);
    graft__free(s->ex.work);
}

/* bytes of memory, cache-line aligned, written once when `touch` (so that it is resident
 * from now on). */
static void *alloc_bytes(size_t bytes, bool touch)
{
    void *p = graft__malloc_aligned(bytes, GRAFT_CACHE_LINE);
    if (p != NULL && touch)
        memset(p, 0, bytes);
    return p;
}

static float *alloc_rows(int32_t n, int64_t width, bool touch)
{
    size_t bytes;
    if (!graft__mul_size((size_t)n, (size_t)width, &bytes) ||
        !graft__mul_size(bytes, sizeof(float), &bytes))
        return NULL;
    return alloc_bytes(bytes, touch);
}

/* Weight w as a matrix of a graft__matmul_many call writing y: its packed copy where the
 * forward pass uses packed weights and w has one. */
static graft__matmul_one matrix_of(const graft__weight *w, bool packed, float *y)
{
    if (packed && w->packed != NULL)
        return (graft__matmul_one){y, w->packed, w->packed_type, w->rows};
    return (graft__matmul_one){y, w->data, w->type, w->rows};
}

/* The weights of a layer multiplied in one job (matmul_layer): those reading one input. */
enum { GROUP_QKV, GROUP_OUT, GROUP_GATE_UP, GROUP_DOWN, GROUPS_PER_LAYER };
static int layer_group(const graft__layer *L, int g, const graft__weight **w)
{
    switch (g) {
    case GROUP_QKV:
        w[0] = &L->wq, w[1] = &L->wk, w[2] = &L->wv;
        return 3;
    case GROUP_OUT:
        w[0] = &L->wo;
        return 1;
    case GROUP_GATE_UP:
        w[0] = &L->w_gate, w[1] = &L->w_up;
        return 2;
    default:
        w[0] = &L->w_down;
        return 1;
    }
}

static size_t group_work_size(const graft__matmul_path *path, const graft__weight *const *w,
                              int count, bool packed, int32_t n)
{
    graft__matmul_one m[GRAFT_MATMUL_MAX_MATRICES];
    for (int i = 0; i < count; i++)
        m[i] = matrix_of(w[i], packed, NULL);
    return graft__matmul_work_size(path, m, count, w[0]->cols, n);
}

/* The largest prepared-activation buffer any matmul job of this batch needs. */
static size_t work_size(const struct graft_model *m, const graft__matmul_path *path,
                        bool packed, int32_t n)
{
    const graft__weight *out[1] = {&m->output};
    size_t most = group_work_size(path, out, 1, packed, n);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        for (int g = 0; g < GROUPS_PER_LAYER; g++) {
            const graft__weight *w[GRAFT_MATMUL_MAX_MATRICES];
            int count = layer_group(&m->layers[il], g, w);
            size_t bytes = group_work_size(path, w, count, packed, n);
            most = bytes > most ? bytes : most;
        }
    }
    return most;
}

/* Whether a batch of one entry (a decode step) takes the chunk form of attention
 * (attend_chunk_task), its chunks shared between the threads, into *split. The chunks are
 * fixed by position and merged in order afterwards, so who computes which changes no bit.
 * Chunks rather than a share of the heads per thread: with heads, the thread that fetched
 * a row from memory was often twice as busy as the one that found it in cache (figures:
 * bench/results/2026-12-01-kernel-decisions.md). */
static bool split_for(const graft__hparams *hp, const graft__exec *ex, graft__attend_split *split)
{
    if (hp->n_head > GRAFT_ATTN_MAX_HEADS || hp->head_dim_v != hp->head_dim)
        return false;
    return graft__attend_split_for(ex->path, hp->head_dim, split);
}

static int scratch_alloc(scratch *s, const struct graft_model *m, const graft__exec *ex,
                         int32_t n, int32_t max_pos, bool touch)
{
    const graft__hparams *hp = &m->hp;
    memset(s, 0, sizeof *s);
    s->max_tokens = n;
    s->max_pos = max_pos;
    s->x = alloc_rows(n, hp->n_embd, touch);
    s->h = alloc_rows(n, hp->n_embd, touch);
    s->q = alloc_rows(n, (int64_t)hp->n_head * hp->head_dim, touch);
    s->k = alloc_rows(n, (int64_t)hp->n_head_kv * hp->head_dim, touch);
    s->v = alloc_rows(n, (int64_t)hp->n_head_kv * hp->head_dim_v, touch);
    s->att = alloc_rows(n, (int64_t)hp->n_head * hp->head_dim_v, touch);
    s->o = alloc_rows(n, hp->n_embd, touch);
    s->gate = alloc_rows(n, hp->n_ff, touch);
    s->up = alloc_rows(n, hp->n_ff, touch);
    s->ptr_stride = (int64_t)max_pos + 1;
    size_t n_ptr = (size_t)s->ptr_stride * (size_t)graft__pool_size(ex->pool);
    s->keys = alloc_bytes(n_ptr * sizeof *s->keys, touch);
    s->values = alloc_bytes(n_ptr * sizeof *s->values, touch);
    s->tiles = alloc_bytes(((size_t)n + 1) * sizeof *s->tiles, touch);
    s->rope = alloc_rows(2 * n, hp->rope_dims, touch);
    if (split_for(hp, ex, &s->split)) {
        int32_t max_chunks = (int32_t)((s->ptr_stride + GRAFT_ATTN_CHUNK - 1) / GRAFT_ATTN_CHUNK);
        s->chunk_out = alloc_rows(max_chunks, (int64_t)hp->n_head * hp->head_dim_v, touch);
        s->chunk_max = alloc_rows(max_chunks, hp->n_head, touch);
        s->chunk_sum = alloc_rows(max_chunks, hp->n_head, touch);
    }
    s->ex = *ex;
    s->ex.attend = graft__attend_for(ex->path);
    s->ex.store_row = graft__store_row_for(ex->path);
    s->ex.rmsnorm = graft__rmsnorm_for(ex->path);
    s->ex.swiglu = graft__swiglu_for(ex->path);
    s->packed = graft__model_packed_for(m, ex->path);
    s->ex.work_size = work_size(m, ex->path, s->packed, n);
    s->ex.work = alloc_bytes(s->ex.work_size, touch);
    if (!s->x || !s->h || !s->q || !s->k || !s->v || !s->att || !s->o || !s->gate || !s->up ||
        !s->keys || !s->values || !s->tiles || !s->rope || !s->ex.work ||
        (s->split.chunk && (!s->chunk_out || !s->chunk_max || !s->chunk_sum))) {
        scratch_free(s);
        return GRAFT_ENOMEM;
    }
    return GRAFT_OK;
}

int graft__scratch_create(const struct graft_model *m, const graft__exec *ex,
                          int32_t max_tokens, int32_t max_pos, graft__scratch **out)
{
    *out = NULL;
    if (max_tokens < 1 || max_pos < 0)
        return GRAFT_EINVAL;
    scratch *s = graft__malloc(sizeof *s);
    if (s == NULL)
        return GRAFT_ENOMEM;
    if (scratch_alloc(s, m, ex, max_tokens, max_pos, true) != GRAFT_OK) {
        graft__free(s);
        return GRAFT_ENOMEM;
    }
    *out = s;
    return GRAFT_OK;
}

void graft__scratch_free(graft__scratch *s)
{
    if (s == NULL)
        return;
    scratch_free(s);
    graft__free(s);
}

static void norm_rows(const scratch *s, float *out, const float *x, const graft__weight *w,
                      int32_t n, int64_t width, float eps)
{
    for (int32_t t = 0; t < n; t++)
        s->ex.rmsnorm(out + t * width, x + t * width, w->data, width, eps);
}

/* y[i] (n, rows of w[i]) = x (n, cols) w[i]^T for count weights reading the same x, in
 * one job of the thread pool. */
static void matmul_group(const scratch *s, const graft__weight *const *w, float *const *y,
                         int count, const float *x, int32_t n)
{
    graft__matmul_one m[GRAFT_MATMUL_MAX_MATRICES];
    for (int i = 0; i < count; i++) {
        GRAFT_ASSERT(w[i]->cols == w[0]->cols);
        m[i] = matrix_of(w[i], s->packed, y[i]);
    }
    graft__matmul_many(&s->ex, m, count, w[0]->cols, x, n);
}

/* The outputs y of layer L's weight group g (layer_group) from x. */
static void matmul_layer(const scratch *s, const graft__layer *L, int g, float *const *y,
                         const float *x, int32_t n)
{
    const graft__weight *w[GRAFT_MATMUL_MAX_MATRICES];
    int count = layer_group(L, g, w);
    matmul_group(s, w, y, count, x, n);
}

static void add_bias(float *y, const graft__weight *b, int32_t n)
{
    if (b->data == NULL)
        return;
    const float *bias = b->data;
    for (int32_t t = 0; t < n; t++)
        for (int64_t i = 0; i < b->cols; i++)
            y[t * b->cols + i] += bias[i];
}

static void embed(const struct graft_model *m, const graft__batch_entry *e, int32_t n, float *x)
{
    const graft__hparams *hp = &m->hp;
    size_t row_bytes = graft__type_row_bytes(m->tok_embd.type, (uint64_t)hp->n_embd);
    for (int32_t t = 0; t < n; t++) {
        float *row = x + (int64_t)t * hp->n_embd;
        const char *src = (const char *)m->tok_embd.data + (size_t)e[t].token * row_bytes;
        graft__dequantize_row(m->tok_embd.type, src, row, hp->n_embd);
        if (hp->embd_scale != 1.0f)
            for (int32_t i = 0; i < hp->n_embd; i++)
                row[i] *= hp->embd_scale;
    }
}

/* s->rope: each entry's rotation for both kinds of layer (the sliding-window one only if
 * the model has a window: layer_is_swa is never set without one), computed once for all
 * the layers of the pass. */
static void rope_angles_all(const struct graft_model *m, const graft__batch_entry *e,
                            int32_t n, scratch *s)
{
    const graft__hparams *hp = &m->hp;
    for (int32_t t = 0; t < n; t++) {
        graft__rope_angles(s->rope + (int64_t)t * hp->rope_dims, hp->rope_dims, e[t].pos,
                           hp->rope_base, hp->rope_freq_scale, m->rope_freqs.data);
        if (hp->sliding_window > 0)
            graft__rope_angles(s->rope + (int64_t)(n + t) * hp->rope_dims, hp->rope_dims,
                               e[t].pos, hp->rope_base_swa, 1.0f, m->rope_freqs.data);
    }
}

/* q, k of each entry: per-head norm (qwen3, gemma3), then rotary position embedding by the
 * entry's rotation in s->rope. */
static void position_qk(const struct graft_model *m, const graft__layer *L, int32_t il,
                        int32_t n, float *q, float *k, const scratch *s)
{
    const graft__hparams *hp = &m->hp;
    const int64_t qw = (int64_t)hp->n_head * hp->head_dim, kw = (int64_t)hp->n_head_kv * hp->head_dim;
    const float *rope = s->rope + (hp->layer_is_swa[il] ? (int64_t)n * hp->rope_dims : 0);
    for (int32_t t = 0; t < n; t++) {
        float *qt = q + t * qw, *kt = k + t * kw;
        if (L->q_norm.data != NULL) {
            for (int32_t hd = 0; hd < hp->n_head; hd++)
                s->ex.rmsnorm(qt + hd * hp->head_dim, qt + hd * hp->head_dim, L->q_norm.data,
                              hp->head_dim, hp->rms_eps);
            for (int32_t hd = 0; hd < hp->n_head_kv; hd++)
                s->ex.rmsnorm(kt + hd * hp->head_dim, kt + hd * hp->head_dim, L->k_norm.data,
                              hp->head_dim, hp->rms_eps);
        }
        const float *angle = rope + (int64_t)t * hp->rope_dims;
        graft__rope(qt, hp->n_head, hp->head_dim, hp->rope_dims, angle, hp->rope_layout);
        graft__rope(kt, hp->n_head_kv, hp->head_dim, hp->rope_dims, angle, hp->rope_layout);
    }
}

/* Writes each entry's K and V rows into the store, converted to its element type. */
static void store_kv(const graft__hparams *hp, graft__kv *kv, int32_t il,
                     const graft__batch_entry *e, int32_t n, const float *k, const float *v,
                     const scratch *s)
{
    const int64_t kw = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t vw = (int64_t)hp->n_head_kv * hp->head_dim_v;
    for (int32_t t = 0; t < n; t++) {
        s->ex.store_row(kv->type, kv->k_row(kv->self, il, e[t].seq, e[t].pos), k + t * kw, kw);
        s->ex.store_row(kv->type, kv->v_row(kv->self, il, e[t].seq, e[t].pos), v + t * vw, vw);
    }
}

typedef struct attend_job {
    const graft__hparams *hp;
    graft__kv *kv;
    int32_t il;
    const graft__batch_entry *e;
    const float *q;
    float *att;
    scratch *s;
    int32_t parts; /* the chunk form: tasks per chunk, each a share of the KV heads */
} attend_job;

int32_t graft__model_first_key(const graft__hparams *hp, int32_t layer, int32_t pos)
{
    if (hp->layer_is_swa[layer] && pos >= hp->sliding_window)
        return pos - hp->sliding_window + 1;
    return 0;
}

/* The first key position entry t attends to. */
static int32_t first_key(const attend_job *j, int32_t t)
{
    return graft__model_first_key(j->hp, j->il, j->e[t].pos);
}

/* Task (tile, kv head kvh): the query heads of that group, for every entry of the tile,
 * attend over [lo, pos] of their sequence. A tile is a run of entries of one sequence
 * that all start at key 0 (or a single entry), so their keys are listed and read once for
 * all of them. */
static void attend_task(void *ctx, int64_t task, int thread)
{
    const attend_job *j = ctx;
    const graft__hparams *hp = j->hp;
    const int32_t tile = (int32_t)(task / hp->n_head_kv), kvh = (int32_t)(task % hp->n_head_kv);
    const int32_t t0 = j->s->tiles[tile], t1 = j->s->tiles[tile + 1];
    const int32_t group = hp->n_head / hp->n_head_kv, seq = j->e[t0].seq;
    const int32_t lo = first_key(j, t0);
    int32_t last = lo;
    for (int32_t t = t0; t < t1; t++)
        last = j->e[t].pos > last ? j->e[t].pos : last;
    const void **keys = j->s->keys + thread * j->s->ptr_stride;
    const void **values = j->s->values + thread * j->s->ptr_stride;
    const size_t k_off = graft__type_row_bytes(j->kv->type, (uint64_t)kvh * hp->head_dim);
    const size_t v_off = graft__type_row_bytes(j->kv->type, (uint64_t)kvh * hp->head_dim_v);
    for (int32_t i = 0; i <= last - lo; i++) {
        keys[i] = (const uint8_t *)j->kv->k_row(j->kv->self, j->il, seq, lo + i) + k_off;
        values[i] = (const uint8_t *)j->kv->v_row(j->kv->self, j->il, seq, lo + i) + v_off;
    }
    float *outs[GRAFT_ATTN_MAX_HEADS];
    const float *qs[GRAFT_ATTN_MAX_HEADS];
    int64_t n_keys[GRAFT_ATTN_MAX_HEADS];
    int32_t n_heads = 0;
    for (int32_t t = t0; t < t1; t++) {
        for (int32_t g = 0; g < group; g++) {
            const int32_t hq = kvh * group + g;
            outs[n_heads] = j->att + ((int64_t)t * hp->n_head + hq) * hp->head_dim_v;
            qs[n_heads] = j->q + ((int64_t)t * hp->n_head + hq) * hp->head_dim;
            n_keys[n_heads] = j->e[t].pos - lo + 1;
            if (++n_heads == GRAFT_ATTN_MAX_HEADS || (t == t1 - 1 && g == group - 1)) {
                j->s->ex.attend(outs, qs, n_keys, n_heads, keys, values, j->kv->type,
                                hp->head_dim, hp->attn_scale);
                n_heads = 0;
            }
        }
    }
}

/* s->tiles = the starts of the tiles of entries [0, n) for layer il, then n; returns how
 * many tiles. At most GRAFT_ATTN_MAX_HEADS query heads per tile (or one entry). */
static int32_t plan_tiles(const attend_job *j, int32_t n)
{
    const int32_t group = j->hp->n_head / j->hp->n_head_kv;
    const int32_t most = group < GRAFT_ATTN_MAX_HEADS ? GRAFT_ATTN_MAX_HEADS / group : 1;
    int32_t n_tiles = 0;
    for (int32_t t = 0; t < n;) {
        int32_t end = t + 1;
        if (first_key(j, t) == 0)
            while (end < n && end - t < most && j->e[end].seq == j->e[t].seq &&
                   first_key(j, end) == 0)
                end++;
        j->s->tiles[n_tiles++] = t;
        t = end;
    }
    j->s->tiles[n_tiles] = n;
    return n_tiles;
}

/* Task (chunk c, part) (attend_all) of the chunk form for entry 0, alone in its batch: the
 * query heads of part's share of the KV heads over chunk c of their keys [lo, pos], head
 * hq reading its KV head's columns of each whole row, into the chunk's slots of
 * s->chunk_out, chunk_max and chunk_sum. */
static void attend_chunk_task(void *ctx, int64_t task, int thread)
{
    const attend_job *j = ctx;
    const graft__hparams *hp = j->hp;
    const scratch *s = j->s;
    const int32_t group = hp->n_head / hp->n_head_kv, seq = j->e[0].seq;
    const int64_t chunk = task / j->parts, part = task % j->parts;
    const int32_t lo = first_key(j, 0), c0 = (int32_t)chunk * GRAFT_ATTN_CHUNK;
    const int32_t left = j->e[0].pos - lo + 1 - c0;
    const int32_t n_keys = left < GRAFT_ATTN_CHUNK ? left : GRAFT_ATTN_CHUNK;
    const void **keys = s->keys + thread * s->ptr_stride;
    const void **values = s->values + thread * s->ptr_stride;
    for (int32_t i = 0; i < n_keys; i++) {
        keys[i] = j->kv->k_row(j->kv->self, j->il, seq, lo + c0 + i);
        values[i] = j->kv->v_row(j->kv->self, j->il, seq, lo + c0 + i);
    }
    const int32_t h0 = (int32_t)(hp->n_head_kv * part / j->parts) * group;
    const int32_t h1 = (int32_t)(hp->n_head_kv * (part + 1) / j->parts) * group;
    float *outs[GRAFT_ATTN_MAX_HEADS];
    const float *qs[GRAFT_ATTN_MAX_HEADS];
    int32_t col[GRAFT_ATTN_MAX_HEADS];
    for (int32_t hq = h0; hq < h1; hq++) {
        outs[hq - h0] = s->chunk_out + (chunk * hp->n_head + hq) * hp->head_dim_v;
        qs[hq - h0] = j->q + (int64_t)hq * hp->head_dim;
        col[hq - h0] = hq / group * hp->head_dim;
    }
    s->split.chunk(outs, s->chunk_max + chunk * hp->n_head + h0,
                   s->chunk_sum + chunk * hp->n_head + h0, qs, col, h1 - h0, n_keys, keys,
                   values, j->kv->type, hp->head_dim, hp->attn_scale);
}

/* Tasks per chunk of the chunk form: 1, or, where the chunks do not share out evenly
 * between the threads, threads / gcd(n_chunks, threads) parts of the KV heads if they
 * divide evenly into so many (so that the tasks do). Each head's chunk is the same bits
 * whichever heads share its call. Halves only where the chunks do not share out evenly:
 * always splitting further costs more than the balance gains (figures:
 * bench/results/2026-12-01-kernel-decisions.md). */
static int32_t chunk_parts(int32_t n_chunks, int threads, int32_t n_head_kv)
{
    int32_t a = n_chunks, b = threads;
    while (b != 0) {
        int32_t r = a % b;
        a = b;
        b = r;
    }
    int32_t parts = threads / a;
    return n_head_kv % parts == 0 ? parts : 1;
}

/* att (n, n_head * head_dim_v): each entry's heads attend over [lo, pos] of its sequence.
 * A lone entry (a decode step) takes the chunk form where there is one: its chunks (or
 * their parts, chunk_parts) are the pool's tasks, then the heads' chunks are merged in
 * order. */
static void attend_all(const graft__hparams *hp, graft__kv *kv, int32_t il,
                       const graft__batch_entry *e, int32_t n, const float *q, float *att,
                       scratch *s)
{
    attend_job j = {hp, kv, il, e, q, att, s, 1};
    if (n == 1 && s->split.chunk != NULL) {
        const int32_t n_keys = e[0].pos - first_key(&j, 0) + 1;
        const int32_t n_chunks = (n_keys + GRAFT_ATTN_CHUNK - 1) / GRAFT_ATTN_CHUNK;
        j.parts = chunk_parts(n_chunks, graft__pool_size(s->ex.pool), hp->n_head_kv);
        graft__pool_run(s->ex.pool, (int64_t)n_chunks * j.parts, attend_chunk_task, &j);
        s->split.merge(att, s->chunk_out, s->chunk_max, s->chunk_sum, n_chunks, hp->n_head,
                       hp->head_dim_v);
        return;
    }
    int32_t n_tiles = plan_tiles(&j, n);
    graft__pool_run(s->ex.pool, (int64_t)n_tiles * hp->n_head_kv, attend_task, &j);
}

static void add_rows(float *x, const float *y, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] += y[i];
}

static void attention_block(const struct graft_model *m, graft__kv *kv, int32_t il,
                            const graft__batch_entry *e, int32_t n, scratch *s)
{
    const graft__hparams *hp = &m->hp;
    const graft__layer *L = &m->layers[il];
    norm_rows(s, s->h, s->x, &L->attn_norm, n, hp->n_embd, hp->rms_eps);
    matmul_layer(s, L, GROUP_QKV, (float *const[]){s->q, s->k, s->v}, s->h, n);
    add_bias(s->q, &L->bq, n);
    add_bias(s->k, &L->bk, n);
    add_bias(s->v, &L->bv, n);
    position_qk(m, L, il, n, s->q, s->k, s);
    store_kv(hp, kv, il, e, n, s->k, s->v, s);
    attend_all(hp, kv, il, e, n, s->q, s->att, s);
    matmul_layer(s, L, GROUP_OUT, &s->o, s->att, n);
    if (L->post_attn_norm.data != NULL)
        norm_rows(s, s->o, s->o, &L->post_attn_norm, n, hp->n_embd, hp->rms_eps);
    add_rows(s->x, s->o, (int64_t)n * hp->n_embd);
}

static void ffn_block(const struct graft_model *m, int32_t il, int32_t n, scratch *s)
{
    const graft__hparams *hp = &m->hp;
    const graft__layer *L = &m->layers[il];
    norm_rows(s, s->h, s->x, &L->ffn_norm, n, hp->n_embd, hp->rms_eps);
    matmul_layer(s, L, GROUP_GATE_UP, (float *const[]){s->gate, s->up}, s->h, n);
    if (hp->arch == GRAFT_ARCH_GEMMA3)
        graft__geglu(s->gate, s->up, (int64_t)n * hp->n_ff);
    else
        s->ex.swiglu(s->gate, s->up, (int64_t)n * hp->n_ff);
    matmul_layer(s, L, GROUP_DOWN, &s->o, s->gate, n);
    if (L->post_ffn_norm.data != NULL)
        norm_rows(s, s->o, s->o, &L->post_ffn_norm, n, hp->n_embd, hp->rms_eps);
    add_rows(s->x, s->o, (int64_t)n * hp->n_embd);
}

/* Normalises the rows that want logits (gathered to the front of s->h) and projects them. */
static void output_logits(const struct graft_model *m, const graft__batch_entry *e, int32_t n,
                          scratch *s, float *logits)
{
    const graft__hparams *hp = &m->hp;
    int32_t rows = 0;
    for (int32_t t = 0; t < n; t++) {
        if (!e[t].want_logits)
            continue;
        s->ex.rmsnorm(s->h + (int64_t)rows * hp->n_embd, s->x + (int64_t)t * hp->n_embd,
                      m->output_norm.data, hp->n_embd, hp->rms_eps);
        rows++;
    }
    if (rows == 0)
        return;
    const graft__weight *out = &m->output;
    matmul_group(s, &out, &logits, 1, s->h, rows);
    if (hp->final_softcap > 0.0f)
        graft__softcap(logits, (int64_t)rows * hp->n_vocab, hp->final_softcap);
}

static int check_batch(const struct graft_model *m, const graft__batch_entry *e, int32_t n,
                       int32_t *max_pos, char **errmsg)
{
    *max_pos = 0;
    for (int32_t t = 0; t < n; t++) {
        if (e[t].token < 0 || e[t].token >= m->hp.n_vocab)
            return graft__errmsg(errmsg, GRAFT_EINVAL,
                                 "forward: entry %d: token %d is outside the vocabulary [0, %d)", t,
                                 e[t].token, m->hp.n_vocab);
        if (e[t].pos < 0)
            return graft__errmsg(errmsg, GRAFT_EINVAL, "forward: entry %d: negative position %d",
                                 t, e[t].pos);
        if (e[t].pos > *max_pos)
            *max_pos = e[t].pos;
    }
    return GRAFT_OK;
}

/* The pass itself, once the batch is checked and its KV reserved. */
static void run_layers(const struct graft_model *m, graft__kv *kv, const graft__batch_entry *e,
                       int32_t n, scratch *s, float *logits)
{
    embed(m, e, n, s->x);
    rope_angles_all(m, e, n, s);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        attention_block(m, kv, il, e, n, s);
        ffn_block(m, il, n, s);
    }
    output_logits(m, e, n, s, logits);
}

/* Checks the batch (its largest position in *max_pos) and reserves its KV. */
static int prepare(const struct graft_model *m, graft__kv *kv, const graft__batch_entry *e,
                   int32_t n, int32_t *max_pos, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (n <= 0)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "forward: empty batch");
    int rc = check_batch(m, e, n, max_pos, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    rc = kv->reserve(kv->self, e, n);
    if (rc != GRAFT_OK)
        return graft__errmsg(errmsg, rc, "forward: the KV store refused the batch: %s",
                             graft_status_str(rc));
    return GRAFT_OK;
}

int graft__forward(const struct graft_model *m, const graft__exec *ex, graft__kv *kv,
                   const graft__batch_entry *e, int32_t n, float *logits, char **errmsg)
{
    int32_t max_pos;
    int rc = prepare(m, kv, e, n, &max_pos, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    scratch s;
    if (scratch_alloc(&s, m, ex, n, max_pos, false) != GRAFT_OK)
        return graft__errmsg(errmsg, GRAFT_ENOMEM, "forward: out of memory for a batch of %d", n);
    run_layers(m, kv, e, n, &s, logits);
    scratch_free(&s);
    return GRAFT_OK;
}

int graft__forward_in(const struct graft_model *m, graft__scratch *s, graft__kv *kv,
                      const graft__batch_entry *e, int32_t n, float *logits, char **errmsg)
{
    if (n > s->max_tokens)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "forward: a batch of %d entries, above %d",
                             n, s->max_tokens);
    int32_t max_pos;
    int rc = prepare(m, kv, e, n, &max_pos, errmsg);
    if (rc != GRAFT_OK)
        return rc;
    if (max_pos > s->max_pos)
        return graft__errmsg(errmsg, GRAFT_EINVAL, "forward: position %d, above %d", max_pos,
                             s->max_pos);
    run_layers(m, kv, e, n, s, logits);
    return GRAFT_OK;
}
