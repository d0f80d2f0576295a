/* plugins/common/store_curl.c: see store_curl.h. */
#include "store_curl.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern/errors.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct body {
    char *p;
    size_t n, max;
    int overflow;
} body;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
    body *b = arg;
    size_t add = size * nmemb;
    if (b->n + add > b->max) {
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

char *store_http_escape(const char *s)
{
    pthread_once(&curl_once, curl_init);
    char *e = curl_easy_escape(NULL, s, 0);
    char *copy = e ? strdup(e) : NULL;
    curl_free(e);
    return copy;
}

static void set_request(CURL *c, const store_http_req *rq, struct curl_slist **hdr, body *b)
{
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    if (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
    if (rq->body) {
        char ct[128];
        snprintf(ct, sizeof ct, "Content-Type: %s",
                 rq->content_type ? rq->content_type : "application/json");
        *hdr = curl_slist_append(NULL, ct);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
    }
}

int store_http(const store_http_req *rq, store_http_reply *out, char *err, size_t errlen)
{
    pthread_once(&curl_once, curl_init);
    memset(out, 0, sizeof *out);
    CURL *c = curl_easy_init();
    if (!c)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "curl_easy_init failed");
    body b = {.max = rq->max_response};
    struct curl_slist *hdr = NULL;
    set_request(c, rq, &hdr, &b);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    if (cc != CURLE_OK) {
        free(b.p);
        if (b.overflow && rq->max_response % (1u << 20) == 0)
            return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s %s: response larger than "
                              "%zu MiB", rq->method, rq->url, rq->max_response >> 20);
        if (b.overflow)
            return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s %s: response larger than "
                              "%zu bytes", rq->method, rq->url, rq->max_response);
        return tern_kit_errf(err, errlen,
                          cc == CURLE_OPERATION_TIMEDOUT ? TERN_ERR_TIMEOUT : TERN_ERR_CONNECT,
                          "%s %s: %s%s", rq->method, rq->url, curl_easy_strerror(cc),
                          cc == CURLE_OPERATION_TIMEDOUT ? " (timed out)" : "");
    }
    out->body = b.p;
    out->len = b.n;
    return 0;
}
