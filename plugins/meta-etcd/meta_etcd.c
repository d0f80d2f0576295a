/* plugins/meta-etcd: the etcd v3 metadata store over the JSON gateway.
 *
 * URI etcd://host:port[,host:port...].  Each call POSTs to /v3/kv/{put,
 * range,deleterange} with base64 keys and values, bounded by the store's
 * timeout (connect and total), trying each endpoint from the last one that
 * answered; each call one exchange of plugins/common/store_curl.c.
 *
 * put_ttl (ABI 1.1) attaches the key to a lease of its own: granted by
 * /v3/lease/grant, refreshed by /v3/lease/keepalive on each later put_ttl,
 * and granted anew when etcd no longer knows it (restarted empty, or the
 * lease ran out).  The value is written with the lease every time, so a
 * store that lost it has it back (docs/protocol.md, Metadata store
 * entries). */
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_curl.h"
#include "tern/metastore.h"

#define ETCD_MAX_HOSTS 16
#define ETCD_MAX_RESPONSE (256u << 20)
#define ETCD_MAX_LEASES 16 /* keys written with put_ttl: an engine's segments */

typedef struct estore {
    char uri[512];
    char hosts[ETCD_MAX_HOSTS][256];
    int nhosts;
    int timeout_ms;
    pthread_mutex_t mu;
    int good; /* endpoint that answered last */
    struct {
        char key[512];
        char id[32]; /* "" when none is held */
    } leases[ETCD_MAX_LEASES];  /* guarded by mu */
} estore;

/* ---- base64 ---- */

static const char b64c[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *in, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        *o++ = b64c[(v >> 18) & 63];
        *o++ = b64c[(v >> 12) & 63];
        *o++ = i + 1 < n ? b64c[(v >> 6) & 63] : '=';
        *o++ = i + 2 < n ? b64c[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_val(char c)
{
    const char *p = c ? strchr(b64c, c) : NULL;
    return p ? (int)(p - b64c) : -1;
}

/* Returns malloc()ed NUL-terminated bytes, or NULL when malformed. */
static char *b64_decode(const char *in, size_t *outlen)
{
    size_t n = strlen(in);
    if (n % 4)
        return NULL;
    char *out = malloc(n / 4 * 3 + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = in[i + k] == '=' && k >= 2 && i + 4 == n ? 0 : b64_val(in[i + k]);
            if (v[k] < 0) {
                free(out);
                return NULL;
            }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        out[o++] = (char)(x >> 16);
        if (in[i + 2] != '=')
            out[o++] = (char)(x >> 8);
        if (in[i + 3] != '=')
            out[o++] = (char)x;
    }
    out[o] = '\0';
    *outlen = o;
    return out;
}

/* ---- HTTP ---- */

/* One POST to one endpoint: 0 with *resp, or a tern code; *retry set when
 * the next endpoint is worth trying: 1 could not connect or timed out, 2 the
 * member answered 5xx (503 "leader changed", "no leader": an election, over
 * in a second or two; another member or a later try succeeds). */
static int post_one(estore *s, const char *host, const char *path, const char *req,
                    json_object **resp, int *retry, char *err, size_t errlen)
{
    char url[512];
    snprintf(url, sizeof url, "http://%s%s", host, path);
    store_http_req rq = {.method = "POST", .url = url, .body = req, .body_len = strlen(req),
                         .timeout_ms = s->timeout_ms, .max_response = ETCD_MAX_RESPONSE};
    store_http_reply r;
    *retry = 0;
    int rc = store_http(&rq, &r, err, errlen);
    if (rc) {
        *retry = rc != TERN_ERR_PROTOCOL && rc != TERN_ERR_NOMEM;
        return rc;
    }
    json_object *o = json_tokener_parse(r.body ? r.body : "");
    if (!o || !json_object_is_type(o, json_type_object)) {
        rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: HTTP %ld, not a JSON object: %.120s",
                        url, r.status, r.body ? r.body : "");
        json_object_put(o);
    } else if (r.status != 200) {
        json_object *m = NULL;
        if (!json_object_object_get_ex(o, "message", &m))
            json_object_object_get_ex(o, "error", &m);
        rc = tern_kit_errf(err, errlen, TERN_ERR_IO, "%s: HTTP %ld: %s", url, r.status,
                        m ? json_object_get_string(m) : "(no message)");
        if (r.status >= 500)
            *retry = 2;
        json_object_put(o);
    } else {
        *resp = o;
    }
    free(r.body);
    return rc;
}

/* One round over the endpoints, starting with the last good one: 0, or the
 * last error with every endpoint's in all; *electing when one answered 5xx. */
static int post_round(estore *s, const char *text, const char *path, json_object **resp,
                      int *electing, int *final, char *all, size_t allen, char *err,
                      size_t errlen)
{
    pthread_mutex_lock(&s->mu);
    int start = s->good;
    pthread_mutex_unlock(&s->mu);
    size_t al = 0;
    int rc = TERN_ERR_CONNECT;
    all[0] = '\0';
    for (int k = 0; k < s->nhosts; k++) {
        int i = (start + k) % s->nhosts, retry = 0;
        char one[512];
        rc = post_one(s, s->hosts[i], path, text, resp, &retry, one, sizeof one);
        if (rc == 0) {
            pthread_mutex_lock(&s->mu);
            s->good = i;
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        if (!retry) {
            *final = 1;
            return tern_kit_errf(err, errlen, rc, "%s", one);
        }
        /* A member of a cluster that holds a request past the timeout is
         * most likely electing too (it answers once a leader is chosen). */
        *electing |= retry == 2 || (rc == TERN_ERR_TIMEOUT && s->nhosts > 1);
        if (al < allen)
            al += (size_t)snprintf(all + al, allen - al, "%s%s", al ? "; " : "", one);
    }
    return rc;
}

/* POST to the endpoints in turn.  While a member answers 5xx (a leader
 * election), or a member of several holds the request past the timeout
 * (electing members may answer nothing until a leader is chosen), the
 * rounds are repeated, backing off, for the store's timeout or
 * ETCD_ELECTION_MS, whichever is longer: an election must not fail an
 * engine's register or open, and one round may spend a whole timeout on a
 * member that does not answer (the dead leader, or one busy electing).
 * When no endpoint answers at all (refused, or a single endpoint timing
 * out), the store is down: reported at once. */
#define ETCD_ELECTION_MS 10000
static int post(estore *s, const char *path, json_object *req, json_object **resp, char *err,
                size_t errlen)
{
    const char *text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    uint64_t end = tern_kit_now_ms() + (uint64_t)(s->timeout_ms > ETCD_ELECTION_MS ? s->timeout_ms
                                                                           : ETCD_ELECTION_MS);
    long nap_ms = 50;
    char all[1024];
    for (;;) {
        int electing = 0, final = 0;
        int rc = post_round(s, text, path, resp, &electing, &final, all, sizeof all, err, errlen);
        if (rc == 0 || final)
            return rc; /* done, or refused for good (not worth another endpoint) */
        if (!electing || tern_kit_now_ms() + (uint64_t)nap_ms >= end)
            return tern_kit_errf(err, errlen, rc,
                        "no etcd endpoint answered%s (%s); check that etcd is running with "
                        "--listen-client-urls covering %s and that a majority of its members "
                        "is up", electing ? " while its members were electing a leader" : "", all, s->uri);
        struct timespec ts = tern_kit_span_ms(nap_ms);
        nanosleep(&ts, NULL);
        if (nap_ms < 400)
            nap_ms *= 2;
    }
}

static void add_b64(json_object *o, const char *name, const char *data, size_t n)
{
    char *e = b64_encode((const unsigned char *)data, n);
    json_object_object_add(o, name, json_object_new_string(e ? e : ""));
    free(e);
}

/* ---- operations ---- */


static int e_range(estore *s, const char *key, const char *range_end, json_object **resp,
                   char *err, size_t errlen);

static int e_open(const char *uri, int timeout_ms, void **store, char *err, size_t errlen)
{
    if (strncmp(uri, "etcd://", 7) != 0 || !uri[7])
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                    "expected etcd://host:port[,host:port...], got \"%s\"", uri);
    estore *s = calloc(1, sizeof *s);
    if (!s)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    snprintf(s->uri, sizeof s->uri, "%s", uri);
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    const char *p = uri + 7;
    while (*p) {
        size_t n = strcspn(p, ",/");
        if (n == 0 || n >= sizeof s->hosts[0] || s->nhosts == ETCD_MAX_HOSTS) {
            free(s);
            return tern_kit_errf(err, errlen, TERN_ERR_CONFIG, "%s: bad endpoint list", uri);
        }
        memcpy(s->hosts[s->nhosts], p, n);
        s->hosts[s->nhosts++][n] = '\0';
        p += n;
        if (*p == '/')
            break;
        if (*p == ',')
            p++;
    }
    pthread_mutex_init(&s->mu, NULL);
    /* One range query now, so a store that is down is reported at open. */
    json_object *r = NULL;
    int rc = e_range(s, "tern/", NULL, &r, err, errlen);
    json_object_put(r);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    *store = s;
    return 0;
}

static void e_close(void *store)
{
    estore *s = store;
    if (s) {
        pthread_mutex_destroy(&s->mu);
        free(s);
    }
}

static int e_range(estore *s, const char *key, const char *range_end, json_object **resp,
                   char *err, size_t errlen)
{
    json_object *req = json_object_new_object();
    add_b64(req, "key", key, strlen(key));
    if (range_end)
        add_b64(req, "range_end", range_end, strlen(range_end));
    int rc = post(s, "/v3/kv/range", req, resp, err, errlen);
    json_object_put(req);
    return rc;
}

/* Decode kvs[i]'s key and value. */
static int kv_of(json_object *kv, char **key, char **value, size_t *vlen)
{
    json_object *k, *v;
    size_t kl;
    *key = *value = NULL;
    *vlen = 0;
    if (!json_object_object_get_ex(kv, "key", &k) || !json_object_is_type(k, json_type_string))
        return TERN_ERR_PROTOCOL;
    *key = b64_decode(json_object_get_string(k), &kl);
    /* etcd omits "value" for an empty value. */
    if (json_object_object_get_ex(kv, "value", &v) && json_object_is_type(v, json_type_string))
        *value = b64_decode(json_object_get_string(v), vlen);
    else
        *value = calloc(1, 1);
    if (!*key || !*value) {
        free(*key);
        free(*value);
        return TERN_ERR_PROTOCOL;
    }
    return 0;
}

static int e_get(void *store, const char *key, char **value, size_t *len, char *err,
                 size_t errlen)
{
    estore *s = store;
    json_object *r = NULL, *kvs;
    int rc = e_range(s, key, NULL, &r, err, errlen);
    if (rc)
        return rc;
    if (!json_object_object_get_ex(r, "kvs", &kvs) || !json_object_is_type(kvs, json_type_array) ||
        json_object_array_length(kvs) == 0) {
        json_object_put(r);
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND, "%s: no key %s", s->uri, key);
    }
    char *k;
    rc = kv_of(json_object_array_get_idx(kvs, 0), &k, value, len);
    json_object_put(r);
    if (rc)
        return tern_kit_errf(err, errlen, rc, "%s: malformed range reply for %s", s->uri, key);
    free(k);
    return 0;
}

static int e_put(void *store, const char *key, const char *value, size_t len, char *err,
                 size_t errlen)
{
    json_object *req = json_object_new_object(), *r = NULL;
    add_b64(req, "key", key, strlen(key));
    add_b64(req, "value", value, len);
    int rc = post(store, "/v3/kv/put", req, &r, err, errlen);
    json_object_put(req);
    json_object_put(r);
    return rc;
}

/* The lease slot of key (a free one when absent); -1 when all are used. */
static int lease_slot(estore *s, const char *key)
{
    int freeslot = -1;
    for (int i = 0; i < ETCD_MAX_LEASES; i++) {
        if (strcmp(s->leases[i].key, key) == 0)
            return i;
        if (freeslot < 0 && !s->leases[i].key[0])
            freeslot = i;
    }
    return freeslot;
}

/* An int64 the gateway writes as a string (or a number); 0 when absent. */
static long long i64_of(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v))
        return 0;
    return json_object_is_type(v, json_type_string) ? strtoll(json_object_get_string(v), NULL, 10)
                                                    : json_object_get_int64(v);
}

/* Keep lease id alive: 1 when etcd still has it, 0 when not, < 0 error. */
static int lease_keepalive(estore *s, const char *id, char *err, size_t errlen)
{
    json_object *req = json_object_new_object(), *r = NULL, *res = NULL;
    json_object_object_add(req, "ID", json_object_new_string(id));
    int rc = post(s, "/v3/lease/keepalive", req, &r, err, errlen);
    json_object_put(req);
    if (rc == 0)
        rc = json_object_object_get_ex(r, "result", &res) && i64_of(res, "TTL") > 0;
    json_object_put(r);
    return rc;
}

static int lease_grant(estore *s, int ttl_s, char *id, size_t idlen, char *err, size_t errlen)
{
    json_object *req = json_object_new_object(), *r = NULL;
    json_object_object_add(req, "TTL", json_object_new_int(ttl_s));
    int rc = post(s, "/v3/lease/grant", req, &r, err, errlen);
    json_object_put(req);
    long long v = rc ? 0 : i64_of(r, "ID");
    json_object_put(r);
    if (rc)
        return rc;
    if (v == 0)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: /v3/lease/grant returned no ID", s->uri);
    snprintf(id, idlen, "%lld", v);
    return 0;
}

static int put_with_lease(estore *s, const char *key, const char *value, size_t len,
                          const char *id, char *err, size_t errlen)
{
    json_object *req = json_object_new_object(), *r = NULL;
    add_b64(req, "key", key, strlen(key));
    add_b64(req, "value", value, len);
    json_object_object_add(req, "lease", json_object_new_string(id));
    int rc = post(s, "/v3/kv/put", req, &r, err, errlen);
    json_object_put(req);
    json_object_put(r);
    return rc;
}

static int e_put_ttl(void *store, const char *key, const char *value, size_t len, int ttl_s,
                     char *err, size_t errlen)
{
    estore *s = store;
    char id[32] = "";
    if (ttl_s <= 0 || strlen(key) >= sizeof s->leases[0].key)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "etcd put_ttl: bad ttl %d s or key", ttl_s);
    pthread_mutex_lock(&s->mu);
    int slot = lease_slot(s, key);
    if (slot >= 0)
        snprintf(id, sizeof id, "%s", s->leases[slot].id);
    pthread_mutex_unlock(&s->mu);
    if (slot < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "etcd put_ttl: more than %d keys with a lease",
                    ETCD_MAX_LEASES);
    int rc = id[0] ? lease_keepalive(s, id, err, errlen) : 0;
    if (rc < 0)
        return rc;
    if (rc == 0 && (rc = lease_grant(s, ttl_s, id, sizeof id, err, errlen)) != 0)
        return rc; /* no lease (first call, or etcd lost it): a new one */
    rc = put_with_lease(s, key, value, len, id, err, errlen);
    pthread_mutex_lock(&s->mu);
    snprintf(s->leases[slot].key, sizeof s->leases[slot].key, "%s", key);
    snprintf(s->leases[slot].id, sizeof s->leases[slot].id, "%s", rc ? "" : id);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int e_del(void *store, const char *key, char *err, size_t errlen)
{
    estore *s = store;
    pthread_mutex_lock(&s->mu);
    int slot = lease_slot(s, key);
    if (slot >= 0 && strcmp(s->leases[slot].key, key) == 0)
        memset(&s->leases[slot], 0, sizeof s->leases[slot]); /* its lease just runs out */
    pthread_mutex_unlock(&s->mu);
    json_object *req = json_object_new_object(), *r = NULL;
    add_b64(req, "key", key, strlen(key));
    int rc = post(store, "/v3/kv/deleterange", req, &r, err, errlen);
    json_object_put(req);
    json_object_put(r);
    return rc;
}

static int e_list(void *store, const char *prefix, tern_metastore_list_cb cb, void *arg,
                  char *err, size_t errlen)
{
    estore *s = store;
    size_t n = strlen(prefix);
    if (n == 0)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "%s: empty prefix", s->uri);
    /* range_end = prefix with its last byte below 0xff incremented. */
    char *end = strdup(prefix);
    if (!end)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    while (n && (unsigned char)end[n - 1] == 0xff)
        end[--n] = '\0';
    if (!n) {
        free(end);
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "%s: prefix of 0xff bytes", s->uri);
    }
    end[n - 1]++;
    json_object *r = NULL, *kvs;
    int rc = e_range(s, prefix, end, &r, err, errlen);
    free(end);
    if (rc)
        return rc;
    if (json_object_object_get_ex(r, "kvs", &kvs) && json_object_is_type(kvs, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(kvs); i++) {
            char *k, *v;
            size_t vl;
            if (kv_of(json_object_array_get_idx(kvs, i), &k, &v, &vl) != 0) {
                rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: malformed range reply", s->uri);
                break;
            }
            int stop = cb(arg, k, v, vl);
            free(k);
            free(v);
            if (stop)
                break;
        }
    }
    json_object_put(r);
    return rc;
}

TERN_METASTORE_EXPORT const tern_metastore tern_metastore_v1 = {
    TERN_METASTORE_HEAD("etcd", "1.1"),
    .open = e_open,
    .close = e_close,
    .get = e_get,
    .put = e_put,
    .del = e_del,
    .list = e_list,
    .put_ttl = e_put_ttl,
};
