/*
 * cors.c: which web pages may call the API from a browser (CORS, `--allow-origin`).
 *
 * A browser lets a page read a response from another origin only when the response names
 * the page's origin (Access-Control-Allow-Origin), and before a request with a JSON body or
 * an Authorization header it asks first (a preflight: OPTIONS with the method and headers
 * it means to send). Without --allow-origin the server names no origin, so a page on any
 * site cannot read what a server bound to 127.0.0.1 answers; with it, the listed origins
 * (or any, for "*") can. The preflight carries no API key (browsers never send one on it),
 * so it is answered before the key is checked; the request that follows still needs one.
 *
 * Non-browser clients send no Origin header and get none of these headers.
 */
#include <microhttpd.h>
#include <string.h>

#include "server/server.h"

/* How long a browser may keep a preflight's answer. */
#define PREFLIGHT_MAX_AGE_S "600"

bool graft__cors_allowed(const char *allowed, const char *origin)
{
    if (allowed == NULL || origin == NULL)
        return false;
    size_t n = strlen(origin);
    for (const char *at = allowed;;) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if ((len == 1 && at[0] == '*') || (len == n && strncmp(at, origin, n) == 0))
            return true;
        if (end == NULL)
            return false;
        at = end + 1;
    }
}

/* One entry of --allow-origin: "*", or a scheme, "://" and a host with an optional port,
 * nothing after it (a browser's Origin header never has a path). */
static bool valid_origin(const char *at, size_t len)
{
    if (len == 1 && at[0] == '*')
        return true;
    size_t scheme = strncmp(at, "http://", 7) == 0 ? 7 : strncmp(at, "https://", 8) == 0 ? 8 : 0;
    if (scheme == 0 || len <= scheme)
        return false;
    for (size_t i = scheme; i < len; i++)
        if (at[i] == '/' || at[i] == ' ' || at[i] == '*' || (unsigned char)at[i] < 0x21)
            return false;
    return true;
}

bool graft__cors_valid_list(const char *list)
{
    for (const char *at = list;;) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (!valid_origin(at, len))
            return false;
        if (end == NULL)
            return true;
        at = end + 1;
    }
}

void graft__cors_add_headers(struct MHD_Response *r, const char *allowed, const char *origin)
{
    if (!graft__cors_allowed(allowed, origin))
        return;
    bool any = strchr(allowed, '*') != NULL; /* only the entry "*" holds one */
    MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any)
        MHD_add_response_header(r, "Vary", "Origin");
}

void graft__cors_add_preflight(struct MHD_Response *r, const char *allowed, const char *origin,
                               const char *method, const char *request_headers)
{
    if (!graft__cors_allowed(allowed, origin))
        return;
    graft__cors_add_headers(r, allowed, origin);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", method);
    if (request_headers != NULL)
        MHD_add_response_header(r, "Access-Control-Allow-Headers", request_headers);
    MHD_add_response_header(r, "Access-Control-Max-Age", PREFLIGHT_MAX_AGE_S);
}
