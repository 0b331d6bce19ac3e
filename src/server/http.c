/*
 * http.c: the HTTP side of `graft serve` (server.h): a libmicrohttpd daemon with a thread per
 * connection, so a handler may wait for its generation; routing, the API key, body and queue
 * limits, JSON errors, one log line per request, and the shutdown drain.
 *
 * Routes: GET /health (503 until the model is loaded and the engine runs), GET /v1/models,
 * GET /metrics, POST /v1/completions, POST /v1/chat/completions, POST /tokenize,
 * POST /detokenize, GET /v1/sessions, DELETE /v1/sessions/{id}, POST /v1/responses, GET and
 * DELETE /v1/responses/{id}, POST /v1/messages and /v1/messages/count_tokens, and
 * llama-server's POST /completion, POST /infill, POST /apply-template and GET /props; and
 * llama-server's other names of OpenAI's paths, for clients whose base URL lacks /v1:
 * /completions, /chat/completions, /models and /v1/health. Any other path is a JSON 404, a
 * known path with another method a 405.
 *
 * Admission: at most `slots` completions generate at once; up to max_queue more wait for a
 * slot; beyond that a request is answered 429 with Retry-After at once (the connection is
 * never dropped). A streamed completion holds its slot until its stream ends.
 *
 * Slow clients: libmicrohttpd closes a connection idle for timeout_s; deadlines.c cuts one
 * that drips a request (request_timeout_s for a new connection's first request, timeout_s
 * after a response for the next).
 *
 * Shutdown: stop accepting (quiesce), let running requests finish for grace_ms, then set
 * cancel_all (every completion cancels its generation at its next slice), wait for them to
 * end, stop the daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/server.h"

struct graft__server {
    struct MHD_Daemon *daemon;
    graft__server_config config;
    graft__server_ctx ctx;
    graft__server_metrics metrics;
    graft__session_store sessions;
    graft__donors donors;
    graft__response_store responses;
    graft__deadlines *deadlines;
    bool reclaim_added; /* the named sessions' reclaim hook is registered */
    atomic_bool ready;
    time_t loaded; /* when the model was ready: its "created" time in /v1/models */
    pthread_mutex_t mu; /* guards running, queued, replying and the waits on cv */
    pthread_cond_t cv;
    int32_t running, queued;
    int32_t replying; /* generations answered whose reply MHD has not finished sending */
    bool stopping;
};

/* One request's state across the calls libmicrohttpd makes for it. */
typedef struct request {
    graft__server *server;
    char *body;
    size_t len, cap;
    bool too_large;
    uint64_t t_start;
    graft__endpoint endpoint; /* metrics row */
    bool replying; /* counted in the server's replying until MHD completes the request */
} request;


/* ---- replies ---------------------------------------------------------------------------------- */

void graft__reply_json(graft__reply *reply, int status, json_t *j)
{
    reply->status = status;
    reply->body = json_dumps(j, GRAFT__JSON_OUT);
    reply->len = reply->body ? strlen(reply->body) : 0;
    reply->content_type = "application/json";
    json_decref(j);
}

void graft__reply_error(graft__reply *reply, int status, const char *type, const char *param,
                        const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    json_t *err = json_pack("{s:s, s:s}", "message", message, "type", type);
    json_object_set_new(err, "param", param ? json_string(param) : json_null());
    json_object_set_new(err, "code", json_integer(status));
    graft__reply_json(reply, status, json_pack("{s:o}", "error", err));
}

static int status_class(int status)
{
    return status == 429 ? 4 : status == 401 ? 5 : status >= 500 ? 3 : status >= 400 ? 2
                                                   : status >= 300 ? 1 : 0;
}

static void log_request(graft__server *s, graft__endpoint endpoint, uint64_t t_start,
                        const char *method, const char *url, int status,
                        const graft__request_log *log)
{
    atomic_fetch_add(&s->metrics.requests[endpoint][status_class(status)], 1);
    double total_ms = (graft__server_now_ns() - t_start) / 1e6;
    if (log != NULL && log->generated)
        fprintf(stderr, "graft: %s %s %d reused %d computed %d ttft %.1f ms total %.1f ms\n",
                method, url, status, (int)log->reused, (int)log->computed, log->ttft_ms,
                total_ms);
    else
        fprintf(stderr, "graft: %s %s %d total %.1f ms\n", method, url, status, total_ms);
}

/* The request's Origin header (a browser's page), or NULL. */
static const char *origin_of(struct MHD_Connection *conn)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
}

static enum MHD_Result send_reply(graft__server *s, struct MHD_Connection *conn,
                                  graft__reply *reply)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        reply->len, reply->body ? reply->body : (char *)"", reply->body ? MHD_RESPMEM_MUST_FREE
                                                                        : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        free(reply->body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", reply->content_type ? reply->content_type
                                                                   : "application/json");
    if (reply->status == 429)
        MHD_add_response_header(r, "Retry-After", "1");
    if (reply->status == 405)
        MHD_add_response_header(r, "Allow", reply->allow);
    graft__cors_add_headers(r, s->config.allow_origins, origin_of(conn));
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)reply->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- admission -------------------------------------------------------------------------------- */

/* Takes a slot (waiting in the queue if need be): 0, or 429 / 503 to answer. */
static int admit(graft__server *s)
{
    pthread_mutex_lock(&s->mu);
    int status = 0;
    if (s->stopping) {
        status = 503;
    } else if (s->running >= s->config.slots && s->queued >= s->config.max_queue) {
        status = 429;
    } else {
        s->queued++;
        while (s->running >= s->config.slots && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        s->queued--;
        if (s->stopping)
            status = 503;
        else
            s->running++;
    }
    atomic_store(&s->metrics.running, s->running);
    atomic_store(&s->metrics.queued, s->queued);
    pthread_mutex_unlock(&s->mu);
    return status;
}

/* The caller holds s->mu. */
static void release_slot_locked(graft__server *s)
{
    s->running--;
    atomic_store(&s->metrics.running, s->running);
    pthread_cond_broadcast(&s->cv);
}

static void release_slot(graft__server *s)
{
    pthread_mutex_lock(&s->mu);
    release_slot_locked(s);
    pthread_mutex_unlock(&s->mu);
}

/* Releases the slot of a generation whose whole reply is about to be queued: until MHD
 * completes the request (on_completed), the reply counts in `replying`, so a drain does not
 * stop the daemon, dropping the connection, before the reply is sent. */
static void release_slot_replying(graft__server *s, request *rq)
{
    pthread_mutex_lock(&s->mu);
    s->replying++;
    rq->replying = true;
    release_slot_locked(s);
    pthread_mutex_unlock(&s->mu);
}

/* ---- streams ---------------------------------------------------------------------------------- */

/* A streamed response outlives its request's state (freed when the request completes), so
 * it keeps what its log line needs. */
typedef struct stream_state {
    graft__server *server;
    graft__endpoint endpoint;
    uint64_t t_start;
    void *stream;
    const graft__stream_ops *ops;
    bool ended; /* read to its end: a stream freed before is a client that went away */
    char method[8];
    char url[64];
} stream_state;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_state *st = cls;
    long n = st->ops->read(st->stream, buf, max);
    st->ended = n < 0;
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream_state *st = cls;
    graft__request_log log = {0};
    if (!st->ended)
        atomic_fetch_add(&st->server->metrics.disconnects, 1);
    st->ops->free(st->stream, &log);
    log_request(st->server, st->endpoint, st->t_start, st->method, st->url, 200, &log);
    release_slot(st->server);
    free(st);
}

static enum MHD_Result send_stream(struct MHD_Connection *conn, request *rq, const char *method,
                                   const char *url, graft__reply *reply)
{
    stream_state *st = calloc(1, sizeof *st);
    if (st == NULL) {
        reply->stream_ops->free(reply->stream, NULL);
        release_slot(rq->server);
        return MHD_NO;
    }
    st->server = rq->server;
    st->endpoint = rq->endpoint;
    st->t_start = rq->t_start;
    st->stream = reply->stream;
    st->ops = reply->stream_ops;
    snprintf(st->method, sizeof st->method, "%s", method);
    snprintf(st->url, sizeof st->url, "%s", url);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (r == NULL) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    graft__cors_add_headers(r, rq->server->config.allow_origins, origin_of(conn));
    enum MHD_Result rc = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- routes ----------------------------------------------------------------------------------- */

/* The served model in OpenAI's shape and Anthropic's (type, display_name, created_at)
 * at once: each API's clients read their own fields and ignore the others. */
static json_t *model_object(const graft__server *s)
{
    char created_at[32];
    struct tm utc;
    gmtime_r(&s->loaded, &utc);
    strftime(created_at, sizeof created_at, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "id", s->config.alias, "object",
                     "model", "created", (json_int_t)s->loaded, "owned_by", "graft", "type",
                     "model", "display_name", s->config.alias, "created_at", created_at);
}

/* GET /v1/models: OpenAI's list, with Anthropic's page fields. */
static void route_models(graft__server *s, graft__reply *reply)
{
    graft__reply_json(reply, 200,
                      json_pack("{s:s, s:[o], s:b, s:s, s:s}", "object", "list", "data",
                                model_object(s), "has_more", 0, "first_id", s->config.alias,
                                "last_id", s->config.alias));
}

/* GET /v1/models/{id}: the served model by its id (--alias). */
static void route_model(graft__server *s, const char *id, graft__reply *reply)
{
    if (strcmp(id, s->config.alias) == 0)
        graft__reply_json(reply, 200, model_object(s));
    else
        graft__reply_error(reply, 404, "not_found_error", "model",
                           "the model '%s' does not exist; this server serves '%s'", id,
                           s->config.alias);
}

static void route_metrics(graft__server *s, graft__reply *reply)
{
    reply->status = 200;
    reply->body = graft__metrics_text(&s->metrics, s->ctx.engine, s->ctx.cache, &s->donors,
                                      &s->sessions, &reply->len);
    reply->content_type = "text/plain; version=0.0.4";
}

/* POST /tokenize: {"tokens": [ids]}, or with with_pieces [{id, piece}]. */
static void route_tokenize(graft__server *s, const json_t *body, graft__reply *reply)
{
    const json_t *content = json_object_get(body, "content");
    if (!json_is_string(content)) {
        graft__reply_error(reply, 400, "invalid_request_error", "content",
                           "'content' must be a string");
        return;
    }
    const json_t *special = json_object_get(body, "add_special");
    int32_t *tokens = NULL;
    size_t n = 0;
    if (graft_tokenize(s->ctx.model, json_string_value(content), json_string_length(content),
                       json_is_true(special), 1, &tokens, &n) != GRAFT_OK) {
        graft__reply_error(reply, 500, "server_error", NULL, "cannot tokenize");
        return;
    }
    bool with_pieces = json_is_true(json_object_get(body, "with_pieces"));
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, with_pieces ? json_pack("{s:i, s:o}", "id", tokens[i],
                                                            "piece",
                                                            graft__token_piece_json(
                                                                s->ctx.model, tokens[i]))
                                                : json_integer(tokens[i]));
    graft_free(tokens);
    graft__reply_json(reply, 200, json_pack("{s:o}", "tokens", list));
}

static void route_detokenize(graft__server *s, const json_t *body, graft__reply *reply)
{
    const json_t *tokens = json_object_get(body, "tokens");
    graft_model_info info;
    graft_model_get_info(s->ctx.model, &info);
    if (!json_is_array(tokens)) {
        graft__reply_error(reply, 400, "invalid_request_error", "tokens",
                           "'tokens' must be an array of token ids");
        return;
    }
    size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (ids == NULL) {
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= info.n_vocab) {
            char path[40];
            snprintf(path, sizeof path, "tokens[%zu]", i);
            graft__reply_error(reply, 400, "invalid_request_error", path,
                               "'%s' must be a token id below %d", path, (int)info.n_vocab);
            free(ids);
            return;
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    char *text = NULL;
    size_t len = 0;
    if (graft__detokenize(s->ctx.model, ids, n, &text, &len, NULL) != GRAFT_OK)
        graft__reply_error(reply, 503, "server_error", NULL, "out of memory");
    else
        graft__reply_json(reply, 200, json_pack("{s:s%}", "content", text ? text : "", len));
    free(text);
    free(ids);
}

typedef enum route {
    R_HEALTH, R_MODELS, R_METRICS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_SESSIONS,
    R_SESSION, R_APPLY_TEMPLATE, R_PROPS, R_LLAMA_COMPLETION, R_MODEL, R_RESPONSES,
    R_RESPONSE, R_RESPONSE_DELETE, R_MESSAGES, R_COUNT_TOKENS, R_INFILL, R_NONE
} route;

static const struct {
    const char *path; /* a trailing '/' matches any one path segment after it */
    const char *method;
} routes[R_NONE] = {{"/health", "GET"},           {"/v1/models", "GET"},
                    {"/metrics", "GET"},          {"/v1/completions", "POST"},
                    {"/v1/chat/completions", "POST"}, {"/tokenize", "POST"},
                    {"/detokenize", "POST"},      {"/v1/sessions", "GET"},
                    {"/v1/sessions/", "DELETE"},  {"/apply-template", "POST"},
                    {"/props", "GET"},            {"/completion", "POST"},
                    {"/v1/models/", "GET"},       {"/v1/responses", "POST"},
                    {"/v1/responses/", "GET"},    {"/v1/responses/", "DELETE"},
                    {"/v1/messages", "POST"},     {"/v1/messages/count_tokens", "POST"},
                    {"/infill", "POST"}};

/* Other paths of routes, as llama-server names them. */
static const struct {
    const char *alias, *path;
} aliases[] = {{"/completions", "/v1/completions"},
               {"/chat/completions", "/v1/chat/completions"},
               {"/models", "/v1/models"},
               {"/v1/health", "/health"}};

/* The route of url that takes method, else the first route of url (for a 405), or R_NONE. */
static route find_route(const char *url, const char *method)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(url, aliases[i].alias) == 0)
            url = aliases[i].path;
    route found = R_NONE;
    for (int i = 0; i < R_NONE; i++) {
        size_t n = strlen(routes[i].path);
        if (routes[i].path[n - 1] == '/' ? strncmp(url, routes[i].path, n) == 0 &&
                                               url[n] != '\0' && strchr(url + n, '/') == NULL
                                         : strcmp(url, routes[i].path) == 0) {
            if (strcmp(routes[i].method, method) == 0)
                return (route)i;
            if (found == R_NONE)
                found = (route)i;
        }
    }
    return found;
}

/* The API key the client presented (the owner of its named sessions), or NULL: as OpenAI's
 * clients send it (Authorization: Bearer), or as Anthropic's (x-api-key). */
static const char *client_key(graft__server *s, struct MHD_Connection *conn)
{
    if (s->config.api_key == NULL)
        return NULL;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth != NULL && strncmp(auth, "Bearer ", 7) == 0)
        return auth + 7;
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
}

static void route_sessions(graft__server *s, struct MHD_Connection *conn, graft__reply *reply)
{
    graft__reply_json(reply, 200, json_pack("{s:s, s:o}", "object", "list", "data",
                                            graft__sessions_list(&s->sessions,
                                                                 client_key(s, conn))));
}

static void route_delete_session(graft__server *s, struct MHD_Connection *conn, const char *id,
                                 graft__reply *reply)
{
    if (graft__sessions_delete(&s->sessions, id, client_key(s, conn)) != GRAFT_OK)
        graft__reply_error(reply, 404, "not_found_error", NULL, "no session '%s'", id);
    else
        graft__reply_json(reply, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object",
                                                "session", "deleted", 1));
}

/* GET /v1/responses/{id}: a stored response; DELETE: forgets it. */
static void route_response(graft__server *s, struct MHD_Connection *conn, const char *id,
                           bool delete, graft__reply *reply)
{
    const char *owner = client_key(s, conn);
    json_t *response = delete ? NULL : graft__response_store_get(&s->responses, id, owner);
    if (delete ? graft__response_store_delete(&s->responses, id, owner) != GRAFT_OK
               : response == NULL)
        graft__reply_error(reply, 404, "not_found_error", NULL, "no stored response '%.100s'",
                           id);
    else if (delete)
        graft__reply_json(reply, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object",
                                                "response", "deleted", 1));
    else
        graft__reply_json(reply, 200, response);
}

/* llama-server's POST /apply-template: {"prompt": the messages rendered}. */
static void route_apply_template(graft__server *s, const json_t *body, graft__reply *reply)
{
    char *text = NULL, *prefill = NULL, *param = NULL, *message = NULL;
    json_t *as_tools = NULL;
    bool legacy_answer;
    if (graft__functions_as_tools(body, true, &as_tools, &legacy_answer, &param, &message) !=
            GRAFT_OK ||
        graft__chat_render(s->ctx.chat, as_tools ? as_tools : body, &text, &prefill, &param,
                           &message) != GRAFT_OK)
        graft__reply_error(reply, 400, "invalid_request_error", param ? param : "messages",
                           "%s", message ? message : "cannot render the messages");
    else
        graft__reply_json(reply, 200, json_pack("{s:s+}", "prompt", text,
                                                prefill ? prefill : ""));
    json_decref(as_tools);
    free(text);
    free(prefill);
    free(param);
    free(message);
}

/* The sampling a request gets for the fields it leaves out, under llama-server's names (a
 * window of -1: the whole context). */
static json_t *default_params_json(void)
{
    graft_sampling d = graft_sampling_default();
    const struct {
        const char *name;
        double value;
    } numbers[] = {{"temperature", d.temperature},
                   {"dynatemp_range", d.dynatemp_range},
                   {"dynatemp_exponent", d.dynatemp_exponent},
                   {"top_k", d.top_k},
                   {"top_p", d.top_p},
                   {"min_p", d.min_p},
                   {"top_n_sigma", d.top_n_sigma},
                   {"xtc_probability", d.xtc_probability},
                   {"xtc_threshold", d.xtc_threshold},
                   {"typical_p", d.typical_p},
                   {"repeat_last_n", -1},
                   {"repeat_penalty", d.repetition_penalty},
                   {"presence_penalty", d.presence_penalty},
                   {"frequency_penalty", d.frequency_penalty},
                   {"dry_multiplier", d.dry_multiplier},
                   {"dry_base", d.dry_base},
                   {"dry_allowed_length", d.dry_allowed_length},
                   {"dry_penalty_last_n", -1},
                   {"mirostat", d.mirostat},
                   {"mirostat_tau", d.mirostat_tau},
                   {"mirostat_eta", d.mirostat_eta},
                   {"n_probs", 0},
                   {"max_tokens", -1}};
    json_t *params = json_object();
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        json_object_set_new(params, numbers[i].name,
                            numbers[i].value == (json_int_t)numbers[i].value
                                ? json_integer((json_int_t)numbers[i].value)
                                : json_real(numbers[i].value));
    size_t n;
    const char *const *breakers = graft_dry_default_breakers(&n);
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, json_string(breakers[i]));
    json_object_set_new(params, "dry_sequence_breakers", list);
    return params;
}

/* llama-server's GET /props: the server's settings as its clients read them. */
static void route_props(graft__server *s, graft__reply *reply)
{
    graft_sampling d = graft_sampling_default();
    json_t *settings = json_pack("{s:i, s:f, s:i, s:f, s:f, s:f, s:o}", "n_ctx",
                                 (int)s->ctx.max_context, "temperature", d.temperature, "top_k",
                                 (int)d.top_k, "top_p", d.top_p, "min_p", d.min_p,
                                 "repeat_penalty", d.repetition_penalty, "params",
                                 default_params_json());
    graft__reply_json(reply, 200,
                      json_pack("{s:o, s:i, s:s, s:s, s:s, s:s, s:s}", "default_generation_settings",
                                settings, "total_slots", (int)s->config.slots, "model_alias",
                                s->config.alias, "chat_template", s->ctx.chat->text,
                                "bos_token", s->ctx.chat->bos_text, "eos_token",
                                s->ctx.chat->eos_text, "build_info", "graft-" GRAFT_VERSION));
}

/* Compares a key (n bytes) without stopping at the first difference. */
static bool key_matches(const char *given, const char *key, size_t n)
{
    size_t m = strlen(given);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(key[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

/* Whether the client's bearer key is one of --api-key's (comma-separated), each compared
 * in full whatever the others gave. */
static bool authorized(graft__server *s, struct MHD_Connection *conn)
{
    if (s->config.api_key == NULL)
        return true;
    const char *given = client_key(s, conn);
    if (given == NULL)
        return false;
    bool ok = false;
    for (const char *k = s->config.api_key;;) {
        const char *end = strchr(k, ',');
        size_t n = end ? (size_t)(end - k) : strlen(k);
        ok |= n > 0 && key_matches(given, k, n);
        if (end == NULL)
            break;
        k = end + 1;
    }
    return ok;
}

static int client_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The methods r's path takes (its routes'), as an Allow header says them. */
static void allow_of(route r, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < R_NONE; i++) {
        if (strcmp(routes[i].path, routes[r].path) != 0)
            continue;
        bool get = strcmp(routes[i].method, "GET") == 0;
        len += (size_t)snprintf(out + len, cap - len, "%s%s, ", routes[i].method,
                                get ? ", HEAD" : "");
    }
    snprintf(out + len, cap - len, "OPTIONS");
}

/* The answer to OPTIONS on a route: the methods it takes, and for a browser's preflight from
 * an allowed origin, what it may send (cors.c). */
static enum MHD_Result send_preflight(graft__server *s, struct MHD_Connection *conn, route r)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (char *)"",
                                                                MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    char allow[32];
    allow_of(r, allow, sizeof allow);
    MHD_add_response_header(resp, "Allow", allow);
    graft__cors_add_preflight(resp, s->config.allow_origins, origin_of(conn), allow,
                              MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                          "Access-Control-Request-Headers"));
    enum MHD_Result rc = MHD_queue_response(conn, 204, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* The request with its whole body: routes it and answers. */
static enum MHD_Result dispatch(graft__server *s, request *rq, struct MHD_Connection *conn,
                                const char *url, const char *method)
{
    graft__reply reply = {0};
    route r = find_route(url, method);
    rq->endpoint = r == R_COMPLETIONS || r == R_LLAMA_COMPLETION ? GRAFT__EP_COMPLETIONS
                   : r == R_CHAT                                  ? GRAFT__EP_CHAT
                   : r == R_RESPONSES                             ? GRAFT__EP_RESPONSES
                   : r == R_MESSAGES || r == R_COUNT_TOKENS       ? GRAFT__EP_MESSAGES
                   : r == R_INFILL                                ? GRAFT__EP_INFILL
                   : r == R_NONE                                  ? GRAFT__EP_UNKNOWN
                                                                  : GRAFT__EP_OTHER;
    graft__request_log log = {0};
    bool logged_generation = false;
    if (r != R_NONE && strcmp(method, "OPTIONS") == 0) {
        log_request(s, rq->endpoint, rq->t_start, method, url, 204, NULL);
        return send_preflight(s, conn, r);
    }
    /* HEAD is GET without the body, which libmicrohttpd leaves out. */
    bool head_of_get = r != R_NONE && strcmp(method, "HEAD") == 0 &&
                       strcmp(routes[r].method, "GET") == 0;
    if (r == R_NONE) {
        graft__reply_error(&reply, 404, "not_found_error", NULL, "no route for %s %s", method,
                           url);
    } else if (strcmp(method, routes[r].method) != 0 && !head_of_get) {
        allow_of(r, reply.allow, sizeof reply.allow);
        graft__reply_error(&reply, 405, "invalid_request_error", NULL,
                           "%s takes %s, not %s", url, reply.allow, method);
    } else if (r == R_HEALTH) {
        bool ready = atomic_load(&s->ready);
        graft__reply_json(&reply, ready ? 200 : 503,
                          json_pack("{s:s}", "status", ready ? "ok" : "loading model"));
    } else if (!authorized(s, conn)) {
        graft__reply_error(&reply, 401, "authentication_error", NULL,
                           "a valid key is required ('Authorization: Bearer KEY' or "
                           "'x-api-key: KEY')");
    } else if (!atomic_load(&s->ready)) {
        graft__reply_error(&reply, 503, "server_error", NULL, "the model is still loading");
    } else if (rq->too_large) {
        graft__reply_error(&reply, 413, "invalid_request_error", NULL,
                           "the request body is over %zu bytes (--max-body)", s->config.max_body);
    } else if (r == R_MODELS) {
        route_models(s, &reply);
    } else if (r == R_MODEL) {
        route_model(s, url + strlen(routes[R_MODEL].path), &reply);
    } else if (r == R_METRICS) {
        route_metrics(s, &reply);
    } else if (r == R_SESSIONS) {
        route_sessions(s, conn, &reply);
    } else if (r == R_SESSION) {
        route_delete_session(s, conn, url + strlen(routes[R_SESSION].path), &reply);
    } else if (r == R_PROPS) {
        route_props(s, &reply);
    } else if (r == R_RESPONSE || r == R_RESPONSE_DELETE) {
        route_response(s, conn, url + strlen(routes[r].path), r == R_RESPONSE_DELETE, &reply);
    } else {
        json_error_t jerr;
        json_t *body = json_loadb(rq->body ? rq->body : "", rq->len, 0, &jerr);
        if (body == NULL) {
            graft__reply_error(&reply, 400, "invalid_request_error", NULL,
                               "the body is not JSON: %s at line %d, column %d", jerr.text,
                               jerr.line, jerr.column);
        } else if (!json_is_object(body)) {
            graft__reply_error(&reply, 400, "invalid_request_error", NULL,
                               "the body must be a JSON object");
        } else if (r == R_TOKENIZE) {
            route_tokenize(s, body, &reply);
        } else if (r == R_DETOKENIZE) {
            route_detokenize(s, body, &reply);
        } else if (r == R_APPLY_TEMPLATE) {
            route_apply_template(s, body, &reply);
        } else if (r == R_COUNT_TOKENS) {
            graft__messages_count_tokens(&s->ctx, body, &reply);
        } else {
            int refused = admit(s);
            if (refused == 429)
                graft__reply_error(&reply, 429, "rate_limit_error", NULL,
                                   "%d requests are running and %d waiting (--max-queue): "
                                   "retry later", (int)s->config.slots, (int)s->config.max_queue);
            else if (refused != 0)
                graft__reply_error(&reply, 503, "server_error", NULL, "the server is stopping");
            else {
                const char *sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              "X-Session-ID");
                if (sid == NULL)
                    sid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                      "x-session-affinity");
                graft__api api = r == R_CHAT               ? GRAFT__API_CHAT
                                 : r == R_RESPONSES        ? GRAFT__API_RESPONSES
                                 : r == R_MESSAGES         ? GRAFT__API_MESSAGES
                                 : r == R_LLAMA_COMPLETION ? GRAFT__API_LLAMA
                                 : r == R_INFILL           ? GRAFT__API_INFILL
                                                           : GRAFT__API_TEXT;
                graft__completion_run(&s->ctx, body, api, client_fd(conn), sid,
                                      client_key(s, conn), &reply, &log);
                logged_generation = true;
                if (reply.stream != NULL) {
                    json_decref(body);
                    return send_stream(conn, rq, method, url, &reply);
                }
                release_slot_replying(s, rq);
            }
        }
        json_decref(body);
    }
    log_request(s, rq->endpoint, rq->t_start, method, url, reply.status,
                logged_generation ? &log : NULL);
    if (r == R_MESSAGES || r == R_COUNT_TOKENS)
        graft__messages_error_shape(&reply);
    return send_reply(s, conn, &reply);
}

/* The connection's deadline watch (deadlines.c), NULL when it has none. */
static graft__conn_watch *watch_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    graft__server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? graft__deadlines_add(s->deadlines, ci->connect_fd) : NULL;
    } else {
        graft__deadlines_remove(s->deadlines, *socket_context);
        *socket_context = NULL;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    graft__server *s = cls;
    request *rq = *con_cls;
    if (rq == NULL) {
        rq = calloc(1, sizeof *rq);
        if (rq == NULL)
            return MHD_NO;
        rq->server = s;
        rq->t_start = graft__server_now_ns();
        *con_cls = rq;
        const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                          "Content-Length");
        if (length != NULL && strtoull(length, NULL, 10) > s->config.max_body)
            rq->too_large = true;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!rq->too_large && rq->len + *upload_size > s->config.max_body)
            rq->too_large = true;
        if (!rq->too_large) {
            if (rq->len + *upload_size + 1 > rq->cap) {
                size_t want = rq->cap ? rq->cap * 2 : 4096;
                while (want < rq->len + *upload_size + 1)
                    want *= 2;
                char *grown = realloc(rq->body, want);
                if (grown == NULL)
                    return MHD_NO;
                rq->body = grown;
                rq->cap = want;
            }
            memcpy(rq->body + rq->len, upload_data, *upload_size);
            rq->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    graft__deadlines_busy(s->deadlines, watch_of(conn), true);
    return dispatch(s, rq, conn, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    graft__server *s = cls;
    graft__deadlines_busy(s->deadlines, watch_of(conn), false);
    request *rq = *con_cls;
    if (rq == NULL)
        return;
    if (rq->replying) {
        pthread_mutex_lock(&s->mu);
        s->replying--;
        pthread_mutex_unlock(&s->mu);
    }
    free(rq->body);
    free(rq);
    *con_cls = NULL;
}

enum { LISTEN_BACKLOG = 128 };

/* Sets *errmsg (when asked for) to a message made from fmt. */
static void set_errmsg(char **errmsg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_errmsg(char **errmsg, const char *fmt, ...)
{
    if (errmsg == NULL)
        return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    *errmsg = strdup(buf);
}

/* The listening socket on host (an IPv4 address, or a name that resolves to one) and port
 * (0: any free one), opened here rather than by libmicrohttpd so that a failure says why:
 * -1 and *errmsg when it cannot be; *bound is the port it took. */
static int open_listener(const char *host, int port, int *bound, char **errmsg)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *found = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &found);
    if (rc != 0) {
        set_errmsg(errmsg, "option --host: '%s' is not an IPv4 address or a name with one (%s)",
                   host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        int err = errno;
        set_errmsg(errmsg, "cannot listen on %s:%d: %s", host, port, strerror(err));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(found);
    struct sockaddr_in at;
    socklen_t len = sizeof at;
    *bound = fd >= 0 && getsockname(fd, (struct sockaddr *)&at, &len) == 0 ? ntohs(at.sin_port)
                                                                           : port;
    return fd;
}

int graft__server_start(const graft__server_config *config, graft__server **out, int *port_out,
                        char **errmsg)
{
    *out = NULL;
    graft__server *s = calloc(1, sizeof *s);
    if (s == NULL)
        return GRAFT_ENOMEM;
    s->config = *config;
    s->ctx.config = &s->config;
    s->ctx.metrics = &s->metrics;
    s->ctx.sessions = &s->sessions;
    s->ctx.donors = &s->donors;
    s->ctx.responses = &s->responses;
    int rc = GRAFT_ENOMEM;
    if (graft__response_store_init(&s->responses, config->stored_responses,
                                   config->stored_responses_mem) != GRAFT_OK)
        goto no_responses;
    if (graft__sessions_store_init(&s->sessions, config->named_sessions,
                                   config->session_ttl_s) != GRAFT_OK)
        goto no_sessions;
    if (graft__donors_init(&s->donors, config->reuse_min_tokens, config->reuse_wait_ms) !=
        GRAFT_OK)
        goto no_donors;
    if (graft__deadlines_start(config->request_timeout_s, config->timeout_s,
                               &s->metrics.connections_cut, &s->deadlines) != GRAFT_OK)
        goto no_deadlines;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int listener = open_listener(config->host, config->port, port_out, errmsg);
    if (listener < 0) {
        rc = GRAFT_EINVAL;
        goto no_daemon;
    }
    s->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, listener,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)config->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)config->timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
    if (s->daemon == NULL) {
        /* the listener is left open: libmicrohttpd may have closed it already */
        set_errmsg(errmsg, "cannot start libmicrohttpd on %s:%d", config->host, config->port);
        rc = GRAFT_EIO;
        goto no_daemon;
    }
    *out = s;
    return GRAFT_OK;
no_daemon:
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    graft__deadlines_stop(s->deadlines);
no_deadlines:
    graft__donors_free(&s->donors);
no_donors:
    graft__sessions_store_free(&s->sessions);
no_sessions:
    graft__response_store_free(&s->responses);
no_responses:
    free(s);
    return rc;
}

void graft__server_set_ready(graft__server *s, graft_model *model, graft_engine *engine,
                             graft_prefix_cache *cache, const graft__chat *chat)
{
    graft_engine_config cfg;
    graft_engine_get_config(engine, &cfg);
    s->ctx.model = model;
    s->ctx.engine = engine;
    s->ctx.cache = cache;
    s->ctx.max_context = cfg.options.max_context;
    s->ctx.chat = chat;
    s->reclaim_added = graft_engine_reclaim_add(engine, graft__sessions_reclaim, &s->sessions) ==
                       GRAFT_OK;
    s->loaded = time(NULL);
    atomic_store(&s->ready, true);
}

void graft__server_stop(graft__server *s)
{
    if (s == NULL)
        return;
    MHD_socket listen = MHD_quiesce_daemon(s->daemon);
    if (listen != MHD_INVALID_SOCKET)
        close(listen);
    uint64_t until = graft__server_now_ns() + (uint64_t)s->config.grace_ms * 1000000u;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int32_t running = s->running, replying = s->replying;
        pthread_mutex_unlock(&s->mu);
        bool late = graft__server_now_ns() > until;
        /* past the grace period, replies still being sent are not waited for */
        if (running == 0 && (replying == 0 || late))
            break;
        if (late)
            atomic_store(&s->ctx.cancel_all, true);
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(s->daemon);
    graft__deadlines_stop(s->deadlines);
    if (s->reclaim_added)
        graft_engine_reclaim_remove(s->ctx.engine, graft__sessions_reclaim, &s->sessions);
    graft__donors_free(&s->donors);
    graft__sessions_store_free(&s->sessions);
    graft__response_store_free(&s->responses);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
