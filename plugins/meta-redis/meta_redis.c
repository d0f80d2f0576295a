/* plugins/meta-redis: the Redis metadata store (hiredis).
 *
 * URI redis://host:port[/db].  One connection per store handle, guarded by
 * a mutex (calls may come from several threads).  Every command has the
 * store's timeout, so a dead or black-holed server fails with
 * TERN_ERR_TIMEOUT / TERN_ERR_CONNECT instead of hanging; after an I/O error
 * the connection is dropped and re-made by the next call. */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "tern/plugin_kit.h"
#include "tern/metastore.h"

typedef struct rstore {
    pthread_mutex_t mu;
    redisContext *c;
    char uri[512];
    char host[256];
    int port, db, timeout_ms;
} rstore;

/* redis://host:port[/db], host may be [v6]. */
static int parse_uri(rstore *s, const char *uri, char *err, size_t errlen)
{
    const char *p = strncmp(uri, "redis://", 8) == 0 ? uri + 8 : NULL;
    if (!p || !*p)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                          "expected redis://host:port[/db], got \"%s\"", uri);
    const char *hend, *rest;
    if (*p == '[') {
        hend = strchr(p, ']');
        if (!hend)
            return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: unterminated [IPv6] host", uri);
        p++;
        rest = hend + 1;
    } else {
        hend = p + strcspn(p, ":/");
        rest = hend;
    }
    size_t hl = (size_t)(hend - p);
    if (hl == 0 || hl >= sizeof s->host)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: missing or too long host", uri);
    memcpy(s->host, p, hl);
    s->host[hl] = '\0';
    s->port = 6379;
    s->db = 0;
    char *end;
    if (*rest == ':') {
        long v = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || v <= 0 || v > 65535)
            return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: bad port", uri);
        s->port = (int)v;
        rest = end;
    }
    if (*rest == '/' && rest[1]) {
        long v = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || *end || v < 0 || v > 1000000)
            return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: bad database number", uri);
        s->db = (int)v;
        rest = end;
    } else if (*rest == '/') {
        rest++;
    }
    if (*rest)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: unexpected \"%s\"", uri, rest);
    return 0;
}

static struct timeval tv_of(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

/* The context's error as a tern code and message; drops the connection. */
static int ctx_fail(rstore *s, const char *what, int saved_errno, char *err, size_t errlen)
{
    const char *why = s->c && s->c->errstr[0] ? s->c->errstr : strerror(saved_errno);
    int timeout = saved_errno == EAGAIN || saved_errno == ETIMEDOUT ||
                  strstr(why, "timed out") || strstr(why, "temporarily unavailable");
    int rc = tern_kit_errf(err, errlen, timeout ? TERN_ERR_TIMEOUT : TERN_ERR_CONNECT,
                        "%s %s: %s%s; check that redis-server is running and answering at %s:%d",
                        what, s->uri, why, timeout ? " (timed out)" : "", s->host, s->port);
    if (s->c)
        redisFree(s->c);
    s->c = NULL;
    return rc;
}

static int ensure(rstore *s, char *err, size_t errlen)
{
    if (s->c)
        return 0;
    errno = 0;
    s->c = redisConnectWithTimeout(s->host, s->port, tv_of(s->timeout_ms));
    if (!s->c || s->c->err)
        return ctx_fail(s, "cannot connect to", errno, err, errlen);
    if (redisSetTimeout(s->c, tv_of(s->timeout_ms)) != REDIS_OK)
        return ctx_fail(s, "cannot set timeouts on", errno, err, errlen);
    if (s->db) {
        redisReply *r = redisCommand(s->c, "SELECT %d", s->db);
        if (!r)
            return ctx_fail(s, "SELECT failed on", errno, err, errlen);
        int bad = r->type == REDIS_REPLY_ERROR;
        if (bad)
            tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: SELECT %d: %s", s->uri, s->db, r->str);
        freeReplyObject(r);
        if (bad) {
            redisFree(s->c);
            s->c = NULL;
            return TERN_ERR_CONFIG;
        }
    }
    return 0;
}

/* Run one command (printf-style hiredis format) with the lock held. */
static redisReply *cmd(rstore *s, int *rc, char *err, size_t errlen, const char *fmt, ...)
{
    *rc = ensure(s, err, errlen);
    if (*rc)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    redisReply *r = redisvCommand(s->c, fmt, ap);
    int e = errno;
    va_end(ap);
    if (!r) {
        *rc = ctx_fail(s, "command failed on", e, err, errlen);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        *rc = tern_kit_errf(err, errlen, TERN_ERR_IO, "%s: redis error: %s", s->uri, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int r_open(const char *uri, int timeout_ms, void **store, char *err, size_t errlen)
{
    rstore *s = calloc(1, sizeof *s);
    if (!s)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    snprintf(s->uri, sizeof s->uri, "%s", uri);
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    int rc = parse_uri(s, uri, err, errlen);
    if (!rc) {
        /* Connect and PING now so a down store is reported at open. */
        redisReply *r = cmd(s, &rc, err, errlen, "PING");
        if (r)
            freeReplyObject(r);
    }
    if (rc) {
        if (s->c)
            redisFree(s->c);
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->mu, NULL);
    *store = s;
    return 0;
}

static void r_close(void *store)
{
    rstore *s = store;
    if (!s)
        return;
    if (s->c)
        redisFree(s->c);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int r_get(void *store, const char *key, char **value, size_t *len, char *err,
                 size_t errlen)
{
    rstore *s = store;
    int rc;
    pthread_mutex_lock(&s->mu);
    redisReply *r = cmd(s, &rc, err, errlen, "GET %s", key);
    pthread_mutex_unlock(&s->mu);
    if (!r)
        return rc;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND, "%s: no key %s", s->uri, key);
    }
    if (r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: GET %s: not a string", s->uri, key);
    }
    char *v = malloc(r->len + 1);
    if (v) {
        memcpy(v, r->str, r->len);
        v[r->len] = '\0';
        *value = v;
        *len = r->len;
    }
    freeReplyObject(r);
    return v ? 0 : tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
}

static int r_put(void *store, const char *key, const char *value, size_t len, char *err,
                 size_t errlen)
{
    rstore *s = store;
    int rc;
    pthread_mutex_lock(&s->mu);
    redisReply *r = cmd(s, &rc, err, errlen, "SET %s %b", key, value, len);
    pthread_mutex_unlock(&s->mu);
    if (r)
        freeReplyObject(r);
    return r ? 0 : rc;
}

/* SET .. EX: every call rewrites the value and restarts its lifetime. */
static int r_put_ttl(void *store, const char *key, const char *value, size_t len, int ttl_s,
                     char *err, size_t errlen)
{
    rstore *s = store;
    int rc;
    if (ttl_s <= 0)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "redis put_ttl: ttl %d s is not positive",
                          ttl_s);
    pthread_mutex_lock(&s->mu);
    redisReply *r = cmd(s, &rc, err, errlen, "SET %s %b EX %d", key, value, len, ttl_s);
    pthread_mutex_unlock(&s->mu);
    if (r)
        freeReplyObject(r);
    return r ? 0 : rc;
}

static int r_del(void *store, const char *key, char *err, size_t errlen)
{
    rstore *s = store;
    int rc;
    pthread_mutex_lock(&s->mu);
    redisReply *r = cmd(s, &rc, err, errlen, "DEL %s", key);
    pthread_mutex_unlock(&s->mu);
    if (r)
        freeReplyObject(r);
    return r ? 0 : rc;
}

/* A SCAN pattern matching prefix literally, then anything. */
static char *glob_prefix(const char *prefix)
{
    size_t n = strlen(prefix);
    char *g = malloc(2 * n + 2), *q = g;
    if (!g)
        return NULL;
    for (const char *p = prefix; *p; p++) {
        if (strchr("*?[]\\", *p))
            *q++ = '\\';
        *q++ = *p;
    }
    *q++ = '*';
    *q = '\0';
    return g;
}

static int r_list(void *store, const char *prefix, tern_metastore_list_cb cb, void *arg,
                  char *err, size_t errlen)
{
    rstore *s = store;
    char *pat = glob_prefix(prefix);
    if (!pat)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    char cursor[32] = "0";
    int rc = 0, stop = 0;
    do {
        pthread_mutex_lock(&s->mu);
        redisReply *r = cmd(s, &rc, err, errlen, "SCAN %s MATCH %s COUNT 256", cursor, pat);
        pthread_mutex_unlock(&s->mu);
        if (!r)
            break;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: unexpected SCAN reply", s->uri);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements && !stop && !rc; i++) {
            const char *key = r->element[1]->element[i]->str;
            char *v = NULL;
            size_t len = 0;
            if (!key)
                continue;
            rc = r_get(s, key, &v, &len, err, errlen);
            if (rc == TERN_ERR_NOT_FOUND) { /* deleted since the SCAN */
                rc = 0;
                continue;
            }
            if (!rc)
                stop = cb(arg, key, v, len);
            free(v);
        }
        freeReplyObject(r);
    } while (!rc && !stop && strcmp(cursor, "0") != 0);
    free(pat);
    return rc;
}

TERN_METASTORE_EXPORT const tern_metastore tern_metastore_v1 = {
    TERN_METASTORE_HEAD("redis", "1.1"),
    .open = r_open,
    .close = r_close,
    .get = r_get,
    .put = r_put,
    .del = r_del,
    .list = r_list,
    .put_ttl = r_put_ttl,
};
