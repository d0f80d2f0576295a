/* core/peer/metadata.c: publishing and fetching segment descriptors.
 *
 * "p2p" (built in) keeps our descriptor in memory for the handshake
 * daemon's Metadata replies and fetches a peer's with a Metadata request to
 * its server name.  Any other scheme is a plugin libtern-meta-<scheme>.so
 * (tern/metastore.h), found and checked by the same loader as a transport
 * (plugin_load.h): one search order, the same checks before any of its
 * code runs, and the core's copy of its table with a default for put_ttl.
 *
 * With a store, our entry lives only as long as we do: it is written with
 * put_ttl (a TTL in redis, a lease in etcd) and a keep-alive thread writes
 * it again every period, which refreshes the lifetime and puts it back in a
 * store that restarted empty.  A plugin without put_ttl (ABI 1.0; the
 * default answers TERN_ERR_NOT_SUPPORTED) gets a periodic check instead:
 * the entry is put again when the store lost it.
 * See docs/protocol.md, "Metadata store entries". */
#include "peer/metadata.h"

#include <dlfcn.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peer/addrbook.h"
#include "control/handshake.h"
#include "desc/desc_sign.h"
#include "plugin/plugin_load.h"
#include "tern/metastore.h"
#include "base/util.h"
#include "tern/plugin_kit.h"

#define MD_MAX_SEGMENT 255
#define MD_KEEPALIVE_MS 5000 /* default keep-alive period */
#define MD_TTL_S 20          /* default lifetime of our entry: four periods */

struct tern_metadata {
    char backend[32];
    char uri[512];
    char cluster[128];
    int connect_ms, io_ms;
    uint64_t max_frame;
    pthread_mutex_t mu;
    char *local_json;          /* p2p: what our daemon serves */
    char local_name[MD_MAX_SEGMENT + 1];
    void *dl;                  /* plugin backends */
    const tern_metastore *ops; /* &table, NULL for p2p */
    tern_metastore table;      /* the core's copy: every operation set */
    void *store;
    const struct tern_auth *auth; /* the engine's secret for p2p fetches */
    struct tern_addrbook *book;   /* peers' other handshake addresses (borrowed) */
    /* keep-alive of our entry in a store (plugin backends) */
    pthread_mutex_t pub_mu;    /* one writer of our entry at a time: a keep-alive
                                  never puts back an older descriptor */
    char *pub_json;            /* the last descriptor published, NULL: none */
    char pub_name[MD_MAX_SEGMENT + 1];
    int ka_ms, ttl_s;
    pthread_t ka;
    int ka_started, ka_stop;   /* under mu */
    unsigned ka_gen;           /* bumped when the period changes (under mu) */
    pthread_cond_t ka_cv;
    unsigned long ka_rounds;   /* keep-alive writes/checks done (tests) */
    /* a descriptor handed over by tern_metadata_publish_async, written by
     * the keep-alive thread (under mu) */
    char *pend_json;
    char pend_name[MD_MAX_SEGMENT + 1];
    uint64_t pend_at_ms;       /* the next try, tern_now_ms() */
    int pend_backoff_ms;       /* after a failed write: doubling up to ka_ms */
    unsigned pend_epoch;       /* bumped by unpublish: an older try is not put back */
    int pend_busy;             /* a pending descriptor is being written */
};

static int is_p2p(const tern_metadata *md) { return md->ops == NULL; }

/* Find, open and check libtern-meta-<scheme>.so with the shared loader. */
static int load_plugin(tern_metadata *md, const tern_config *cfg, const char *scheme,
                       char *err, size_t errlen)
{
    char label[600], path[1024];
    snprintf(label, sizeof label, "metadata %s", md->uri);
    tern_plugin_ref ref = {.kind = &tern_metastore_kind, .name = scheme, .label = label,
                           .cfg = cfg};
    tern_load_outcome o = tern_plugin_find_file(&ref, path, sizeof path, err, errlen);
    if (o == TERN_LOAD_OK)
        o = tern_plugin_open_file(&ref, path, &md->table, &md->dl, NULL, err, errlen);
    if (o != TERN_LOAD_OK)
        return tern_load_outcome_err(o);
    md->ops = &md->table;
    return 0;
}

/* ---------------------------------------------------------- lifecycle */

int tern_metadata_open(const tern_config *cfg, tern_metadata **out, char *err, size_t errlen)
{
    if (!out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "metadata: no output");
    const char *uri = cfg && cfg->metadata && *cfg->metadata ? cfg->metadata : "p2p";
    tern_metadata *md = calloc(1, sizeof *md);
    if (!md)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "metadata: out of memory");
    pthread_mutex_init(&md->mu, NULL);
    pthread_mutex_init(&md->pub_mu, NULL);
    pthread_cond_init(&md->ka_cv, NULL);
    md->ka_ms = MD_KEEPALIVE_MS;
    md->ttl_s = MD_TTL_S;
    if (tern_strlcpy(md->uri, uri, sizeof md->uri) >= sizeof md->uri) {
        free(md);
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "metadata: URI longer than %zu bytes",
                         sizeof md->uri - 1);
    }
    tern_strlcpy(md->cluster, cfg && cfg->cluster_id ? cfg->cluster_id : "default",
                 sizeof md->cluster);
    md->connect_ms = cfg && cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 5000;
    md->io_ms = cfg && cfg->io_timeout_ms > 0 ? cfg->io_timeout_ms : 5000;
    md->max_frame = cfg && cfg->handshake_max_frame ? cfg->handshake_max_frame
                                                    : TERN_HS_DEFAULT_MAX_FRAME;
    if (strcmp(uri, "p2p") == 0) {
        strcpy(md->backend, "p2p");
        *out = md;
        return 0;
    }
    const char *sep = strstr(uri, "://");
    size_t sl = sep ? (size_t)(sep - uri) : 0;
    int ok = sl > 0 && sl < sizeof md->backend;
    for (size_t i = 0; ok && i < sl; i++)
        ok = (uri[i] >= 'a' && uri[i] <= 'z') || (uri[i] >= '0' && uri[i] <= '9') ||
             uri[i] == '-';
    if (!ok) {
        free(md);
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "metadata: \"%s\" is not \"p2p\" nor a URI like redis://host:port or "
                         "etcd://host:port",
                         uri);
    }
    memcpy(md->backend, uri, sl);
    md->backend[sl] = '\0';
    int rc = load_plugin(md, cfg, md->backend, err, errlen);
    if (!rc) {
        char perr[768] = "";
        rc = md->ops->open(uri, md->io_ms, &md->store, perr, sizeof perr);
        if (rc)
            tern_errf(err, errlen, rc, "metadata %s: %s", uri, perr);
    }
    if (rc) {
        if (md->dl)
            dlclose(md->dl);
        pthread_mutex_destroy(&md->mu);
        free(md);
        return rc;
    }
    *out = md;
    return 0;
}

void tern_metadata_close(tern_metadata *md)
{
    if (!md)
        return;
    tern_thread_stop(&md->ka, &md->mu, &md->ka_cv, &md->ka_stop, &md->ka_started);
    free(md->pub_json);
    free(md->pend_json);
    if (md->ops)
        md->ops->close(md->store);
    if (md->dl)
        dlclose(md->dl);
    free(md->local_json);
    pthread_mutex_destroy(&md->mu);
    free(md);
}

const char *tern_metadata_backend(const tern_metadata *md) { return md ? md->backend : NULL; }

void tern_metadata_set_auth(tern_metadata *md, const struct tern_auth *auth)
{
    if (md)
        md->auth = auth;
}

void tern_metadata_set_addrbook(tern_metadata *md, struct tern_addrbook *book)
{
    if (md)
        md->book = book;
}

struct tern_addrbook *tern_metadata_addrbook(const tern_metadata *md)
{
    return md ? md->book : NULL;
}

int tern_metadata_key(const tern_metadata *md, const char *segment, char *key, size_t keylen)
{
    if (!md || !segment || !*segment || strlen(segment) > MD_MAX_SEGMENT)
        return TERN_ERR_INVAL;
    int n = snprintf(key, keylen, "tern/%s/segments/%s", md->cluster, segment);
    return n < 0 || (size_t)n >= keylen ? TERN_ERR_INVAL : 0;
}

static int bad_segment(const char *what, const char *segment, char *err, size_t errlen)
{
    return tern_errf(err, errlen, TERN_ERR_INVAL,
                     "metadata %s: segment name \"%.64s\" is empty or longer than %d bytes",
                     what, segment ? segment : "(null)", MD_MAX_SEGMENT);
}

/* Prefix a plugin's message with the store's URI. */
static int store_err(const tern_metadata *md, int rc, const char *what, const char *segment,
                     const char *perr, char *err, size_t errlen)
{
    return tern_errf(err, errlen, rc, "metadata %s: %s %s: %s", md->uri, what, segment,
                     perr[0] ? perr : tern_strerror(rc));
}

/* ---------------------------------------------------------- keep-alive */

/* Write our entry (pub_mu held): with a lifetime when the plugin can. */
static int store_write(tern_metadata *md, const char *key, const char *json, char *perr,
                       size_t perrlen)
{
    int rc = md->ops->put_ttl(md->store, key, json, strlen(json), md->ttl_s, perr, perrlen);
    if (rc != TERN_ERR_NOT_SUPPORTED)
        return rc;
    perr[0] = '\0';
    return md->ops->put(md->store, key, json, strlen(json), perr, perrlen);
}

/* One round (pub_mu held): rewrite the entry, or with an ABI 1.0 plugin put
 * it back only if the store lost it.  One retry when the first call failed
 * at once (a store that restarted fails the first call on the old
 * connection); not after a timeout, so that a publish waiting on pub_mu
 * (under the engine's memory lock) waits for one store timeout at most. */
static void keepalive_round(tern_metadata *md)
{
    char key[512], perr[768];
    if (!md->pub_json || tern_metadata_key(md, md->pub_name, key, sizeof key))
        return;
    uint64_t t0 = tern_now_ms();
    for (int attempt = 0; attempt < 2 && tern_now_ms() - t0 < 1000; attempt++) {
        size_t len = strlen(md->pub_json);
        int rc = md->ops->put_ttl(md->store, key, md->pub_json, len, md->ttl_s, perr,
                                  sizeof perr);
        if (rc == TERN_ERR_NOT_SUPPORTED) { /* ABI 1.0: put it back only if lost */
            char *v = NULL;
            size_t vlen = 0;
            rc = md->ops->get(md->store, key, &v, &vlen, perr, sizeof perr);
            free(v);
            if (rc == TERN_ERR_NOT_FOUND)
                rc = md->ops->put(md->store, key, md->pub_json, len, perr, sizeof perr);
        }
        if (rc == 0)
            break;
    }
    md->ka_rounds++;
}

/* Writes *json under key (pub_mu held).  Once written it is what the
 * keep-alive writes from now on: *json moves into pub_json (set to NULL). */
static int pub_write_locked(tern_metadata *md, const char *key, const char *name, char **json,
                            char *perr, size_t perrlen)
{
    int rc = store_write(md, key, *json, perr, perrlen);
    if (rc == 0) {
        free(md->pub_json);
        md->pub_json = *json;
        *json = NULL;
        tern_strlcpy(md->pub_name, name, sizeof md->pub_name);
    }
    return rc;
}

/* Write the pending descriptor (mu held; released meanwhile).  A failure
 * keeps it pending, tried again after a backoff, unless a newer one or an
 * unpublish came meanwhile. */
static void pending_write(tern_metadata *md)
{
    char *json = md->pend_json, name[MD_MAX_SEGMENT + 1], key[512], perr[768] = "";
    unsigned epoch = md->pend_epoch;
    md->pend_json = NULL;
    md->pend_busy = 1;
    tern_strlcpy(name, md->pend_name, sizeof name);
    pthread_mutex_unlock(&md->mu);
    pthread_mutex_lock(&md->pub_mu);
    int rc = tern_metadata_key(md, name, key, sizeof key)
                 ? TERN_ERR_INVAL
                 : pub_write_locked(md, key, name, &json, perr, sizeof perr);
    pthread_mutex_unlock(&md->pub_mu);
    pthread_mutex_lock(&md->mu);
    if (rc == 0) {
        md->pend_backoff_ms = 0;
    } else {
        if (!md->pend_json && epoch == md->pend_epoch) {
            md->pend_json = json;
            json = NULL;
        }
        int b = md->pend_backoff_ms ? md->pend_backoff_ms * 2 : 100;
        md->pend_backoff_ms = b < md->ka_ms ? b : md->ka_ms;
        md->pend_at_ms = tern_now_ms() + (uint64_t)md->pend_backoff_ms;
    }
    md->pend_busy = 0;
    pthread_cond_broadcast(&md->ka_cv); /* tern_metadata_publish_wait */
    free(json);
}

/* The keep-alive thread: writes a pending descriptor as soon as it is due,
 * and rewrites the published one every ka_ms. */
static void *keepalive_main(void *arg)
{
    tern_metadata *md = arg;
    pthread_mutex_lock(&md->mu);
    uint64_t next_ka = tern_now_ms() + (uint64_t)md->ka_ms;
    while (!md->ka_stop) {
        uint64_t now = tern_now_ms(), wake = next_ka;
        if (md->pend_json && md->pend_at_ms < wake)
            wake = md->pend_at_ms;
        if (now < wake) {
            unsigned gen = md->ka_gen;
            /* ka_cv is a default cond: CLOCK_REALTIME */
            struct timespec until = tern_kit_deadline((int64_t)(wake - now));
            pthread_cond_timedwait(&md->ka_cv, &md->mu, &until);
            if (gen != md->ka_gen) /* a new period: wait that long from now */
                next_ka = tern_now_ms() + (uint64_t)md->ka_ms;
            continue;
        }
        if (md->pend_json && md->pend_at_ms <= now) {
            pending_write(md);
            continue;
        }
        pthread_mutex_unlock(&md->mu);
        pthread_mutex_lock(&md->pub_mu);
        keepalive_round(md);
        pthread_mutex_unlock(&md->pub_mu);
        pthread_mutex_lock(&md->mu);
        next_ka = tern_now_ms() + (uint64_t)md->ka_ms;
    }
    pthread_mutex_unlock(&md->mu);
    return NULL;
}

/* Started by the first publish to a store. */
static void keepalive_start(tern_metadata *md)
{
    pthread_mutex_lock(&md->mu);
    if (!md->ka_started && !md->ka_stop &&
        pthread_create(&md->ka, NULL, keepalive_main, md) == 0)
        md->ka_started = 1;
    pthread_mutex_unlock(&md->mu);
}

void tern_metadata_set_keepalive(tern_metadata *md, int period_ms, int ttl_s)
{
    if (!md || period_ms <= 0 || ttl_s <= 0)
        return;
    pthread_mutex_lock(&md->mu);
    md->ka_ms = period_ms;
    md->ttl_s = ttl_s;
    md->ka_gen++;
    pthread_cond_broadcast(&md->ka_cv); /* the next round on the new period */
    pthread_mutex_unlock(&md->mu);
}

unsigned long tern_metadata_keepalive_rounds(tern_metadata *md)
{
    pthread_mutex_lock(&md->pub_mu);
    unsigned long n = md->ka_rounds;
    pthread_mutex_unlock(&md->pub_mu);
    return n;
}

/* ------------------------------------------------------------ publish */

static int publish_text(tern_metadata *md, const char *segment, const char *key,
                        const char *json, char *err, size_t errlen);

int tern_metadata_publish(tern_metadata *md, const char *segment, const char *json, char *err,
                          size_t errlen)
{
    char key[512];
    if (!md || !json)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "metadata publish: no descriptor");
    if (tern_metadata_key(md, segment, key, sizeof key))
        return bad_segment("publish", segment, err, errlen);
    char *signed_json = NULL; /* with a secret, what every store holds (desc_sign.h) */
    if (md->auth) {
        int src = tern_desc_sign(md->auth, segment, json, &signed_json, err, errlen);
        if (src)
            return src;
        json = signed_json;
    }
    int rc = publish_text(md, segment, key, json, err, errlen);
    free(signed_json);
    return rc;
}

/* Publish json as it is (signed or not) under key. */
static int publish_text(tern_metadata *md, const char *segment, const char *key,
                        const char *json, char *err, size_t errlen)
{
    char perr[768] = "";
    if (is_p2p(md)) {
        char *copy = strdup(json);
        if (!copy)
            return tern_errf(err, errlen, TERN_ERR_NOMEM, "metadata publish: out of memory");
        pthread_mutex_lock(&md->mu);
        free(md->local_json);
        md->local_json = copy;
        tern_strlcpy(md->local_name, segment, sizeof md->local_name);
        pthread_mutex_unlock(&md->mu);
        return 0;
    }
    char *copy = strdup(json);
    if (!copy)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "metadata publish: out of memory");
    pthread_mutex_lock(&md->pub_mu);
    int rc = pub_write_locked(md, key, segment, &copy, perr, sizeof perr);
    pthread_mutex_unlock(&md->pub_mu);
    free(copy);
    if (rc)
        return store_err(md, rc, "publish", segment, perr, err, errlen);
    keepalive_start(md);
    return 0;
}

int tern_metadata_publish_async(tern_metadata *md, const char *segment, const char *json,
                                char *err, size_t errlen)
{
    char key[512];
    if (!md || !json)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "metadata publish: no descriptor");
    if (is_p2p(md)) /* nothing to wait for: our daemon serves it */
        return tern_metadata_publish(md, segment, json, err, errlen);
    if (tern_metadata_key(md, segment, key, sizeof key))
        return bad_segment("publish", segment, err, errlen);
    char *copy = NULL; /* with a secret, signed now: the writer stores it as it is */
    if (md->auth) {
        int src = tern_desc_sign(md->auth, segment, json, &copy, err, errlen);
        if (src)
            return src;
    } else if (!(copy = strdup(json))) {
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "metadata publish: out of memory");
    }
    pthread_mutex_lock(&md->mu);
    free(md->pend_json); /* only the newest descriptor matters */
    md->pend_json = copy;
    tern_strlcpy(md->pend_name, segment, sizeof md->pend_name);
    md->pend_at_ms = 0;
    md->pend_backoff_ms = 0;
    pthread_cond_broadcast(&md->ka_cv);
    pthread_mutex_unlock(&md->mu);
    keepalive_start(md);
    return 0;
}

int tern_metadata_publish_wait(tern_metadata *md, int ms)
{
    if (!md || is_p2p(md))
        return 1;
    struct timespec until = tern_kit_deadline(ms); /* ka_cv: CLOCK_REALTIME */
    pthread_mutex_lock(&md->mu);
    int rc = 0;
    while ((md->pend_json || md->pend_busy) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&md->ka_cv, &md->mu, &until);
    int done = !md->pend_json && !md->pend_busy;
    pthread_mutex_unlock(&md->mu);
    return done;
}

int tern_metadata_unpublish(tern_metadata *md, const char *segment, char *err, size_t errlen)
{
    char key[512], perr[768] = "";
    if (!md || tern_metadata_key(md, segment, key, sizeof key))
        return bad_segment("unpublish", segment, err, errlen);
    if (is_p2p(md)) {
        pthread_mutex_lock(&md->mu);
        if (strcmp(md->local_name, segment) == 0) {
            free(md->local_json);
            md->local_json = NULL;
            md->local_name[0] = '\0';
        }
        pthread_mutex_unlock(&md->mu);
        return 0;
    }
    pthread_mutex_lock(&md->mu);
    if (md->pend_json && strcmp(md->pend_name, segment) == 0) {
        free(md->pend_json); /* never written after the entry is removed */
        md->pend_json = NULL;
    }
    md->pend_epoch++;
    pthread_mutex_unlock(&md->mu);
    pthread_mutex_lock(&md->pub_mu);
    if (md->pub_json && strcmp(md->pub_name, segment) == 0) {
        free(md->pub_json); /* the keep-alive stops writing it */
        md->pub_json = NULL;
        md->pub_name[0] = '\0';
    }
    int rc = md->ops->del(md->store, key, perr, sizeof perr);
    pthread_mutex_unlock(&md->pub_mu);
    return rc ? store_err(md, rc, "unpublish", segment, perr, err, errlen) : 0;
}

char *tern_metadata_local_json(tern_metadata *md)
{
    if (!md)
        return NULL;
    pthread_mutex_lock(&md->mu);
    char *s = tern_strdup(md->local_json);
    pthread_mutex_unlock(&md->mu);
    return s;
}

int tern_metadata_hs_reply(tern_metadata *md, const char *request, size_t len, char **reply,
                           size_t *replylen)
{
    (void)request;
    (void)len;
    char *s = tern_metadata_local_json(md);
    if (!s)
        s = tern_hs_refusal("no segment descriptor is published on this engine");
    if (!s)
        return TERN_ERR_NOMEM;
    *reply = s;
    if (replylen)
        *replylen = strlen(s);
    return 0;
}

/* -------------------------------------------------------------- fetch */

/* A p2p reply is either a descriptor or {"reply_msg": "why not"}. */
static int p2p_fetch(tern_metadata *md, const char *segment, char **json, char *err,
                     size_t errlen)
{
    json_object *req = json_object_new_object();
    json_object_object_add(req, "segment_name", json_object_new_string(segment));
    const char *rs = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    char *reply = NULL;
    size_t rlen = 0;
    char herr[768] = "";
    char addrs[TERN_HS_MAX_LISTEN + 1][TERN_HS_ADDR_MAX]; /* its daemon's, best first */
    size_t n = tern_addrbook_order(md->book, segment, addrs, TERN_HS_MAX_LISTEN + 1), used = 0;
    int rc = tern_hs_request_via(md->auth, segment, addrs, n, &used, TERN_HS_METADATA, rs,
                                 strlen(rs), &reply, &rlen, md->max_frame, md->connect_ms,
                                 md->io_ms, herr, sizeof herr);
    if (rc == 0 && n)
        tern_addrbook_answered(md->book, segment, addrs[used]);
    json_object_put(req);
    if (rc)
        return tern_errf(err, errlen, rc, "metadata p2p: fetching segment %s: %s", segment,
                         herr);
    json_object *o = json_tokener_parse(reply);
    json_object *msg;
    rc = 0;
    if (!o || !json_object_is_type(o, json_type_object))
        rc = tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                       "metadata p2p: segment %s answered with something that is not a JSON "
                       "object",
                       segment);
    else if (!json_object_object_get_ex(o, "name", NULL) &&
             json_object_object_get_ex(o, "reply_msg", &msg) &&
             json_object_get_string_len(msg) > 0)
        rc = tern_errf(err, errlen, TERN_ERR_NOT_FOUND, "metadata p2p: segment %s: %s", segment,
                       json_object_get_string(msg));
    json_object_put(o);
    if (rc) {
        free(reply);
        return rc;
    }
    *json = reply;
    return 0;
}

/* The text under segment's key, as the store (or the peer) holds it. */
static int fetch_text(tern_metadata *md, const char *segment, char **json, char *err,
                      size_t errlen)
{
    char key[512], perr[768] = "";
    if (!md || !json)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "metadata fetch: no output");
    *json = NULL;
    if (tern_metadata_key(md, segment, key, sizeof key))
        return bad_segment("fetch", segment, err, errlen);
    if (is_p2p(md))
        return p2p_fetch(md, segment, json, err, errlen);
    char *v = NULL;
    size_t len = 0;
    int rc = md->ops->get(md->store, key, &v, &len, perr, sizeof perr);
    if (rc == TERN_ERR_NOT_FOUND)
        return tern_errf(err, errlen, rc, "metadata %s: no segment %s (key %s)", md->uri,
                         segment, key);
    if (rc)
        return store_err(md, rc, "fetch", segment, perr, err, errlen);
    if (len > md->max_frame) { /* the handshake's bound holds for every store */
        free(v);
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "metadata %s: fetch %s: a descriptor of %zu bytes, above the limit "
                         "of %llu bytes (handshake_max_frame); the store holds something else",
                         md->uri, segment, len, (unsigned long long)md->max_frame);
    }
    /* Values are text; make sure the caller gets a C string. */
    char *s = malloc(len + 1);
    if (!s) {
        free(v);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "metadata fetch: out of memory");
    }
    memcpy(s, v, len);
    s[len] = '\0';
    free(v);
    *json = s;
    return 0;
}

/* With a secret only a signed descriptor of this very segment is used;
 * without one a signed descriptor cannot be checked, and is not used
 * either (desc_sign.h). */
int tern_metadata_fetch(tern_metadata *md, const char *segment, char **json, char *err,
                        size_t errlen)
{
    char *text = NULL;
    if (json)
        *json = NULL;
    int rc = fetch_text(md, segment, json ? &text : NULL, err, errlen);
    if (rc)
        return rc;
    if (md->auth) {
        rc = tern_desc_verify(md->auth, segment, text, strlen(text), json, err, errlen);
        free(text);
        return rc;
    }
    if (tern_desc_is_signed(text, strlen(text))) {
        free(text);
        *json = NULL;
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s publishes a signed descriptor: it uses auth_secret_file; "
                         "set the same auth_secret_file here to reach it", segment);
    }
    *json = text;
    return 0;
}

/* --------------------------------------------------------------- list */

typedef struct list_ctx {
    size_t plen;
    int (*cb)(void *, const char *);
    void *arg;
} list_ctx;

static int list_one(void *arg, const char *key, const char *value, size_t len)
{
    list_ctx *l = arg;
    (void)value;
    (void)len;
    return strlen(key) > l->plen ? l->cb(l->arg, key + l->plen) : 0;
}

int tern_metadata_list(tern_metadata *md, int (*cb)(void *arg, const char *segment), void *arg,
                       char *err, size_t errlen)
{
    if (!md || !cb)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "metadata list: no callback");
    if (is_p2p(md)) {
        char name[MD_MAX_SEGMENT + 1];
        pthread_mutex_lock(&md->mu);
        tern_strlcpy(name, md->local_json ? md->local_name : "", sizeof name);
        pthread_mutex_unlock(&md->mu);
        if (name[0])
            cb(arg, name);
        return 0;
    }
    char prefix[256], perr[768] = "";
    snprintf(prefix, sizeof prefix, "tern/%s/segments/", md->cluster);
    list_ctx l = {strlen(prefix), cb, arg};
    int rc = md->ops->list(md->store, prefix, list_one, &l, perr, sizeof perr);
    return rc ? store_err(md, rc, "list", prefix, perr, err, errlen) : 0;
}
