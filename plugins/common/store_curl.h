/* plugins/common/store_curl.h: one HTTP exchange for the metadata plugins
 * that speak HTTP (meta-http, meta-etcd), and the message helper they
 * share.  Each call uses a fresh curl handle, so calls are thread-safe;
 * proxies are never used and only http:// is allowed. */
#ifndef TERN_STORE_CURL_H
#define TERN_STORE_CURL_H

#include <stddef.h>

#include "tern/plugin_kit.h"

typedef struct store_http_req {
    const char *method;       /* "GET", "PUT", "POST", "DELETE" */
    const char *url;
    const char *body;         /* NULL: none */
    size_t body_len;
    const char *content_type; /* with a body; NULL: application/json */
    int timeout_ms;           /* connect and total */
    size_t max_response;      /* a longer answer fails (TERN_ERR_PROTOCOL) */
} store_http_req;

typedef struct store_http_reply {
    long status;              /* HTTP status */
    char *body;               /* malloc()ed, NUL-terminated; NULL when empty */
    size_t len;
} store_http_reply;

/* 0 when the server answered at all (*out filled; free out->body), else
 * TERN_ERR_TIMEOUT, TERN_ERR_CONNECT, TERN_ERR_PROTOCOL (answer too
 * large) or TERN_ERR_NOMEM, with "METHOD URL: why" in err. */
int store_http(const store_http_req *rq, store_http_reply *out, char *err, size_t errlen);

/* s %-escaped for a query string (malloc()ed), NULL when out of memory. */
char *store_http_escape(const char *s);


#endif
