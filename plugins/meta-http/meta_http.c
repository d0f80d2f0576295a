/* plugins/meta-http: a metadata store over plain HTTP key-value requests.
 *
 * URI http://host[:port][/path]; the path defaults to /metadata.  Each call
 * is one request on <uri>?key=<url-escaped key>:
 *   GET     200 and the value as the body; 404 when absent
 *   PUT     the value as the body (Content-Type: application/json); 200
 *   DELETE  200; 404 when absent (an unpublish of nothing: success)
 * This is the protocol of the HTTP metadata servers that Mooncake-style
 * engines use (docs/protocol.md, "HTTP metadata store"), so one server can
 * hold both kinds of descriptors.  The protocol has no listing: list()
 * answers TERN_ERR_NOT_SUPPORTED.  Every call is one exchange of
 * plugins/common/store_curl.c, bounded by the store's timeout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_curl.h"
#include "tern/metastore.h"

#define HTTP_MAX_RESPONSE TERN_METASTORE_MAX_VALUE /* the handshake's bound on a descriptor */
#define HTTP_DEFAULT_PATH "/metadata"

typedef struct hstore {
    char base[512]; /* http://host:port/path, without a query */
    int timeout_ms;
} hstore;

/* One request on <base>?key=<escaped key>.  *status gets the HTTP status,
 * *out (may be NULL) the body.  Returns 0 when the server answered at all. */
static int request(hstore *s, const char *method, const char *key, const char *value,
                   size_t len, long *status, store_http_reply *out, char *err, size_t errlen)
{
    char *esc = store_http_escape(key);
    char url[1024];
    int n = esc ? snprintf(url, sizeof url, "%s?key=%s", s->base, esc) : -1;
    free(esc);
    if (n < 0 || (size_t)n >= sizeof url)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "%s: key too long for a URL: %.80s", s->base,
                    key);
    store_http_req rq = {.method = method, .url = url, .body = value, .body_len = len,
                         .timeout_ms = s->timeout_ms, .max_response = HTTP_MAX_RESPONSE};
    store_http_reply r;
    char why[1024];
    int rc = store_http(&rq, &r, why, sizeof why);
    if (rc)
        return tern_kit_errf(err, errlen, rc, "%s%s", why,
                    rc == TERN_ERR_PROTOCOL ? "" : "; check that the metadata server is running");
    *status = r.status;
    if (out)
        *out = r;
    else
        free(r.body);
    return 0;
}

static int h_open(const char *uri, int timeout_ms, void **store, char *err, size_t errlen)
{
    const char *host = strncmp(uri, "http://", 7) == 0 ? uri + 7 : NULL;
    if (!host || !*host || *host == '/' || strchr(uri, '?') || strchr(uri, '#'))
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                    "expected http://host[:port][/path] (no query), got \"%s\"", uri);
    hstore *s = calloc(1, sizeof *s);
    if (!s)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    int n = snprintf(s->base, sizeof s->base, "%s%s", uri,
                     strchr(host, '/') ? "" : HTTP_DEFAULT_PATH);
    if (n < 0 || (size_t)n >= sizeof s->base) {
        free(s);
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "metadata URI too long: %.80s...", uri);
    }
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    /* One GET now, so a server that is down is reported at open. */
    long status = 0;
    int rc = request(s, "GET", "tern/probe", NULL, 0, &status, NULL, err, errlen);
    if (!rc && status != 200 && status != 404)
        rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL,
                  "GET %s?key=...: HTTP %ld; expected 200 or 404 from a metadata server",
                  s->base, status);
    if (rc) {
        free(s);
        return rc;
    }
    *store = s;
    return 0;
}

static void h_close(void *store) { free(store); }

static int h_get(void *store, const char *key, char **value, size_t *len, char *err,
                 size_t errlen)
{
    hstore *s = store;
    long status = 0;
    store_http_reply b = {0};
    int rc = request(s, "GET", key, NULL, 0, &status, &b, err, errlen);
    if (rc)
        return rc;
    if (status == 200) {
        *value = b.body ? b.body : calloc(1, 1);
        *len = b.len;
        return *value ? 0 : tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    }
    rc = status == 404
             ? tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND, "%s: no key %s", s->base, key)
             : tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "GET %s key %s: HTTP %ld: %.120s",
                    s->base, key, status, b.body ? b.body : "");
    free(b.body);
    return rc;
}

static int h_put(void *store, const char *key, const char *value, size_t len, char *err,
                 size_t errlen)
{
    hstore *s = store;
    long status = 0;
    store_http_reply b = {0};
    int rc = request(s, "PUT", key, value, len, &status, &b, err, errlen);
    if (!rc && status != 200)
        rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "PUT %s key %s: HTTP %ld: %.120s", s->base,
                  key, status, b.body ? b.body : "");
    free(b.body);
    return rc;
}

static int h_del(void *store, const char *key, char *err, size_t errlen)
{
    hstore *s = store;
    long status = 0;
    store_http_reply b = {0};
    int rc = request(s, "DELETE", key, NULL, 0, &status, &b, err, errlen);
    if (!rc && status != 200 && status != 404)
        rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "DELETE %s key %s: HTTP %ld: %.120s",
                  s->base, key, status, b.body ? b.body : "");
    free(b.body);
    return rc;
}

static int h_list(void *store, const char *prefix, tern_metastore_list_cb cb, void *arg,
                  char *err, size_t errlen)
{
    hstore *s = store;
    (void)cb;
    (void)arg;
    return tern_kit_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                "%s: the HTTP metadata protocol cannot list keys (prefix %s); use redis:// "
                "or etcd:// to list segments", s->base, prefix);
}

TERN_METASTORE_EXPORT const tern_metastore tern_metastore_v1 = {
    TERN_METASTORE_HEAD("http", "1.0"),
    .open = h_open,
    .close = h_close,
    .get = h_get,
    .put = h_put,
    .del = h_del,
    .list = h_list,
};
