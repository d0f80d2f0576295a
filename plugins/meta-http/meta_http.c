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
 * answers TERN_ERR_NOT_SUPPORTED.  A fresh curl handle per call keeps calls
 * thread-safe; every call is bounded by the store's timeout. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern/metastore.h"

#define HTTP_MAX_RESPONSE TERN_METASTORE_MAX_VALUE /* the handshake's bound on a descriptor */
#define HTTP_DEFAULT_PATH "/metadata"

typedef struct hstore {
    char base[512]; /* http://host:port/path, without a query */
    int timeout_ms;
} hstore;

static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

typedef struct body {
    char *p;
    size_t n;
    int overflow;
} body;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    body *b = arg;
    size_t add = size * nmemb;
    if (b->n + add > HTTP_MAX_RESPONSE) {
        b->overflow = 1;
        return 0;
    }
    char *np = realloc(b->p, b->n + add + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, ptr, add);
    b->p = np;
    b->n += add;
    b->p[b->n] = '\0';
    return add;
}

/* One request.  *status gets the HTTP status; *out (may be NULL) the body,
 * malloc()ed.  Returns 0 when the server answered at all. */
static int request(hstore *s, const char *method, const char *key, const char *value,
                   size_t len, long *status, body *out, char *err, size_t errlen)
{
    CURL *c = curl_easy_init();
    if (!c)
        return errf(err, errlen, TERN_ERR_NOMEM, "curl_easy_init failed");
    char *esc = curl_easy_escape(c, key, 0);
    char url[1024];
    int n = snprintf(url, sizeof url, "%s?key=%s", s->base, esc ? esc : "");
    curl_free(esc);
    if (!esc || n < 0 || (size_t)n >= sizeof url) {
        curl_easy_cleanup(c);
        return errf(err, errlen, TERN_ERR_INVAL, "%s: key too long for a URL: %.80s", s->base,
                    key);
    }
    body b = {0};
    struct curl_slist *hdr = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)s->timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (value) {
        hdr = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, value);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    if (cc != CURLE_OK) {
        free(b.p);
        if (b.overflow)
            return errf(err, errlen, TERN_ERR_PROTOCOL, "%s %s: response larger than %u MiB",
                        method, url, HTTP_MAX_RESPONSE >> 20);
        return errf(err, errlen, cc == CURLE_OPERATION_TIMEDOUT ? TERN_ERR_TIMEOUT
                                                                : TERN_ERR_CONNECT,
                    "%s %s: %s; check that the metadata server is running and serves %s",
                    method, url, curl_easy_strerror(cc), s->base);
    }
    if (out)
        *out = b;
    else
        free(b.p);
    return 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int h_open(const char *uri, int timeout_ms, void **store, char *err, size_t errlen)
{
    const char *host = strncmp(uri, "http://", 7) == 0 ? uri + 7 : NULL;
    if (!host || !*host || *host == '/' || strchr(uri, '?') || strchr(uri, '#'))
        return errf(err, errlen, TERN_ERR_CONFIG,
                    "expected http://host[:port][/path] (no query), got \"%s\"", uri);
    pthread_once(&curl_once, curl_init);
    hstore *s = calloc(1, sizeof *s);
    if (!s)
        return errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    int n = snprintf(s->base, sizeof s->base, "%s%s", uri,
                     strchr(host, '/') ? "" : HTTP_DEFAULT_PATH);
    if (n < 0 || (size_t)n >= sizeof s->base) {
        free(s);
        return errf(err, errlen, TERN_ERR_CONFIG, "metadata URI too long: %.80s...", uri);
    }
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    /* One GET now, so a server that is down is reported at open. */
    long status = 0;
    int rc = request(s, "GET", "tern/probe", NULL, 0, &status, NULL, err, errlen);
    if (!rc && status != 200 && status != 404)
        rc = errf(err, errlen, TERN_ERR_PROTOCOL,
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
    body b = {0};
    int rc = request(s, "GET", key, NULL, 0, &status, &b, err, errlen);
    if (rc)
        return rc;
    if (status == 200) {
        *value = b.p ? b.p : calloc(1, 1);
        *len = b.n;
        return *value ? 0 : errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    }
    rc = status == 404
             ? errf(err, errlen, TERN_ERR_NOT_FOUND, "%s: no key %s", s->base, key)
             : errf(err, errlen, TERN_ERR_PROTOCOL, "GET %s key %s: HTTP %ld: %.120s",
                    s->base, key, status, b.p ? b.p : "");
    free(b.p);
    return rc;
}

static int h_put(void *store, const char *key, const char *value, size_t len, char *err,
                 size_t errlen)
{
    hstore *s = store;
    long status = 0;
    body b = {0};
    int rc = request(s, "PUT", key, value, len, &status, &b, err, errlen);
    if (!rc && status != 200)
        rc = errf(err, errlen, TERN_ERR_PROTOCOL, "PUT %s key %s: HTTP %ld: %.120s", s->base,
                  key, status, b.p ? b.p : "");
    free(b.p);
    return rc;
}

static int h_del(void *store, const char *key, char *err, size_t errlen)
{
    hstore *s = store;
    long status = 0;
    body b = {0};
    int rc = request(s, "DELETE", key, NULL, 0, &status, &b, err, errlen);
    if (!rc && status != 200 && status != 404)
        rc = errf(err, errlen, TERN_ERR_PROTOCOL, "DELETE %s key %s: HTTP %ld: %.120s",
                  s->base, key, status, b.p ? b.p : "");
    free(b.p);
    return rc;
}

static int h_list(void *store, const char *prefix, tern_metastore_list_cb cb, void *arg,
                  char *err, size_t errlen)
{
    hstore *s = store;
    (void)cb;
    (void)arg;
    return errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                "%s: the HTTP metadata protocol cannot list keys (prefix %s); use redis:// "
                "or etcd:// to list segments", s->base, prefix);
}

__attribute__((visibility("default"))) const tern_metastore tern_metastore_v1 = {
    .magic = TERN_METASTORE_MAGIC,
    .struct_size = sizeof(tern_metastore),
    .abi_major = TERN_METASTORE_ABI_MAJOR,
    .abi_minor = TERN_METASTORE_ABI_MINOR,
    .scheme = "http",
    .version = "1.0",
    .open = h_open,
    .close = h_close,
    .get = h_get,
    .put = h_put,
    .del = h_del,
    .list = h_list,
};
