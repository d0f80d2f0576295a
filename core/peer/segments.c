/* core/peer/segments.c: opened peer segments, their descriptors and healing
 * state (see segments.h). */
#include "peer/segments.h"
#include "peer/addrbook.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/client.h"
#include "base/log.h"
#include "peer/negotiate.h"
#include "obs/stats.h"
#include "base/util.h"

void tern_segments_init(tern_segments *t)
{
    pthread_mutex_init(&t->lock, NULL);
}

void tern_segments_bind(tern_segments *t, tern_xport *xports, size_t nxports,
                        tern_metadata *md, const tern_config *cfg,
                        const struct tern_logger *log)
{
    t->xports = xports;
    t->nxports = nxports;
    t->md = md;
    t->cfg = cfg;
    t->log = log;
}

tern_segment *tern_segments_get(tern_segments *t, tern_segment_id id)
{
    if (id < 0 || id >= TERN_MAX_SEGMENTS)
        return NULL;
    pthread_mutex_lock(&t->lock);
    tern_segment *s = t->segs[id] && t->segs[id]->used ? t->segs[id] : NULL;
    pthread_mutex_unlock(&t->lock);
    return s;
}

/* ---- the debug story of a peer (docs/configuration.md, Logging) ---------------- */

/* "a, b, c" of the peer's transports, truncated to fit. */
static void peer_transports(const tern_segment_desc *d, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < d->ntransports && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", d->transports[i].name);
}

static void log_fetched(const tern_segments *t, const char *name, const tern_segment_desc *d)
{
    if (!tern_log_enabled(t->log, TERN_LOG_DEBUG))
        return;
    char list[256];
    peer_transports(d, list, sizeof list);
    tern_log(t->log, TERN_LOG_DEBUG,
             "segment %s: descriptor fetched from %s: generation %llu, %zu buffer(s), "
             "transports [%s]", name, tern_metadata_backend(t->md),
             (unsigned long long)d->timestamp, d->nbuffers, list);
}

/* Why transport x was chosen: ours that come before it and why each was
 * passed over (negotiate.c's rule: our order, usable here, listed by the peer). */
static void log_choice(const tern_segments *t, const char *name, int x, uint32_t skip)
{
    if (!tern_log_enabled(t->log, TERN_LOG_DEBUG))
        return;
    char why[512] = "";
    size_t o = 0;
    for (int i = 0; i < x && o < sizeof why; i++)
        o += (size_t)snprintf(why + o, sizeof why - o, "; %s passed over: %s",
                              t->xports[i].pl->name,
                              (skip & (1u << i)) ? "it cannot reach the peer"
                                                 : "the peer does not list it");
    tern_log(t->log, TERN_LOG_DEBUG, "segment %s: transport %s chosen (%s of our %zu%s)", name,
             t->xports[x].pl->name, x ? "the first usable" : "the first", t->nxports, why);
}

/* Fetch and decode the descriptor of `name`. */
static int fetch_desc(tern_segments *t, const char *name, tern_segment_desc **out, char *err,
                      size_t errlen)
{
    char *json = NULL;
    char msg[1024] = "";
    int rc = tern_metadata_fetch(t->md, name, &json, msg, sizeof msg);
    if (rc)
        return tern_errf(err, errlen, rc, "segment %s: fetching its descriptor failed: %s",
                         name, msg);
    rc = tern_segment_desc_decode(json, strlen(json), out, msg, sizeof msg);
    free(json);
    if (rc)
        return tern_errf(err, errlen, rc, "segment %s: bad descriptor: %s", name, msg);
    /* The descriptor's name is where handshakes go and what endpoints are
     * kept under: one naming another engine would hand us that engine (and
     * an endpoint to it we already hold) for the segment we asked for. */
    if (strcmp((*out)->name, name) != 0) {
        rc = tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                       "segment %s: its descriptor names segment %.200s; refused (open a "
                       "segment by the name it publishes, its server_name)", name,
                       (*out)->name);
        tern_segment_desc_free(*out);
        *out = NULL;
    }
    if (!rc) {
        log_fetched(t, name, *out);
        tern_addrbook_note(tern_metadata_addrbook(t->md), name,
                           (const char (*)[TERN_DESC_HS_ADDR_MAX])(*out)->hs_addrs,
                           (*out)->n_hs_addrs);
    }
    return rc;
}

/* Index of the transport negotiated for descriptor d, skipping those in
 * `skip` (bit per index). */
static int choose_xport(tern_segments *t, const tern_segment_desc *d, const char *name,
                        uint32_t skip, char *err, size_t errlen)
{
    const char *local[TERN_DESC_MAX_TRANSPORTS], *peer[TERN_DESC_MAX_TRANSPORTS];
    int usable[TERN_DESC_MAX_TRANSPORTS];
    size_t nl = 0;
    for (; nl < t->nxports && nl < TERN_DESC_MAX_TRANSPORTS; nl++) {
        local[nl] = t->xports[nl].pl->name;
        usable[nl] = !(skip & (1u << nl));
    }
    size_t np = 0;
    for (; np < d->ntransports && np < TERN_DESC_MAX_TRANSPORTS; np++)
        peer[np] = d->transports[np].name;
    return tern_negotiate(local, nl, usable, peer, np, name, err, errlen);
}

/* Attach d to s (write lock held); s keeps d on success. */
static int attach(tern_segments *t, tern_segment *s, tern_segment_desc *d, uint32_t skip,
                  char *err, size_t errlen)
{
    int x = choose_xport(t, d, s->name, skip, err, errlen);
    if (x < 0)
        return x;
    const tern_seg_transport *st = tern_segment_find_transport(d, t->xports[x].pl->name);
    if (!st || !st->topology)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "segment %s publishes no priority_matrix for transport %s", s->name,
                         t->xports[x].pl->name);
    log_choice(t, s->name, x, skip);
    if (s->desc != d)
        tern_segment_desc_free(s->desc);
    s->desc = d;
    s->st = st;
    s->xport = x;
    s->desc_gen = d->timestamp;
    s->unreachable = skip;
    return 0;
}

static void drop_endpoints(tern_segments *t, const char *name)
{
    for (size_t i = 0; i < t->nxports; i++)
        if (t->xports[i].eps)
            tern_epstore_remove_peer(t->xports[i].eps, name);
}

static int refetch(tern_segments *t, tern_segment *s, uint64_t since_ns, int limited,
                   uint64_t *later_ms, char *err, size_t errlen)
{
    pthread_mutex_lock(&s->heal_lock);
    if (since_ns && s->last_fetch_ns > since_ns) { /* fresh enough already */
        pthread_mutex_unlock(&s->heal_lock);
        return 0;
    }
    uint64_t now = tern_now_ns();
    uint64_t next = s->last_fetch_ns + (uint64_t)TERN_REFETCH_MIN_MS * 1000000u;
    if (limited && s->last_fetch_ns && now < next) { /* the rate limit: come back then */
        pthread_mutex_unlock(&s->heal_lock);
        if (later_ms)
            *later_ms = tern_now_ms() + (next - now) / 1000000u + 1;
        return TERN_REFETCH_LATER;
    }
    s->last_fetch_ns = now;
    tern_stat_set *st = atomic_load_explicit(&s->stats, memory_order_relaxed);
    tern_stats_event(t->stats, st, -1, TERN_STAT_REFETCH);
    tern_segment_desc *d = NULL;
    int rc = fetch_desc(t, s->name, &d, err, errlen);
    if (rc) {
        pthread_mutex_unlock(&s->heal_lock);
        return rc;
    }
    pthread_rwlock_wrlock(&s->lock);
    uint64_t gen = d->timestamp;
    int newer = s->desc && gen != s->desc_gen;
    if (!s->used || !s->desc) {
        tern_segment_desc_free(d);
        rc = tern_errf(err, errlen, TERN_ERR_CLOSED, "segment %s was closed", s->name);
    } else if (!newer) {
        tern_log(t->log, TERN_LOG_DEBUG, "segment %s: descriptor generation %llu unchanged",
                 s->name, (unsigned long long)gen);
        tern_segment_desc_free(d); /* unchanged: keep what slices were cut on */
        rc = 0;
    } else if (t->cfg && t->cfg->auth_secret_file && gen < s->desc_gen) {
        /* Signed descriptors carry their generation (desc_sign.h): an older
         * one is a replay by whoever can write the store, never used. */
        tern_segment_desc_free(d);
        newer = 0;
        rc = tern_errf(err, errlen, TERN_ERR_AUTH,
                       "segment %s: the store holds an older signed descriptor (generation "
                       "%llu, ours is %llu): a replay; refused", s->name,
                       (unsigned long long)gen, (unsigned long long)s->desc_gen);
    } else {
        rc = attach(t, s, d, 0, err, errlen);
        if (rc)
            tern_segment_desc_free(d);
    }
    char name[sizeof s->name];
    tern_strlcpy(name, s->name, sizeof name);
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_unlock(&s->heal_lock);
    if (rc)
        return rc;
    if (newer) { /* the peer restarted or changed: connect afresh */
        tern_stats_event(t->stats, st, -1, TERN_STAT_HEAL);
        drop_endpoints(t, name);
        tern_log(t->log, TERN_LOG_INFO, "segment %s: new descriptor generation %llu, "
                 "its endpoints dropped", name, (unsigned long long)gen);
    }
    return newer;
}

int tern_segment_refetch(tern_segments *t, tern_segment *s, uint64_t since_ns,
                         uint64_t *later_ms, char *err, size_t errlen)
{
    return refetch(t, s, since_ns, 1, later_ms, err, errlen);
}

int tern_segment_refetch_asked(tern_segments *t, tern_segment *s, uint64_t since_ns, char *err,
                               size_t errlen)
{
    return refetch(t, s, since_ns, 0, NULL, err, errlen);
}

int tern_segment_unreachable(tern_segments *t, tern_segment *s, int xport, char *err,
                             size_t errlen)
{
    pthread_rwlock_wrlock(&s->lock);
    if (!s->desc) {
        pthread_rwlock_unlock(&s->lock);
        return tern_errf(err, errlen, TERN_ERR_CLOSED, "segment %s was closed", s->name);
    }
    if (s->xport != xport) { /* another slice moved it already */
        pthread_rwlock_unlock(&s->lock);
        return 0;
    }
    uint32_t skip = s->unreachable | (1u << xport);
    char why[512] = "";
    int rc = attach(t, s, s->desc, skip, why, sizeof why);
    const char *to = rc ? NULL : t->xports[s->xport].pl->name;
    pthread_rwlock_unlock(&s->lock);
    if (rc)
        return tern_errf(err, errlen, rc, "%s", why);
    tern_stats_event(t->stats, atomic_load_explicit(&s->stats, memory_order_relaxed), xport,
                     TERN_STAT_FALLBACK);
    tern_log(t->log, TERN_LOG_WARN, "segment %s: %s cannot reach it, using %s",
             s->name, t->xports[xport].pl->name, to);
    return 0;
}

uint64_t tern_segment_failed(tern_segment *s, int code, const char *why)
{
    uint64_t now = tern_now_ms();
    if (atomic_load(&s->retry_at_ms) > now)
        return atomic_load(&s->fail_epoch); /* the same attempt: one step of backoff */
    int n = atomic_fetch_add(&s->fails, 1);
    uint64_t wait = (uint64_t)TERN_BACKOFF_MIN_MS << (n < 8 ? n : 8);
    wait = wait > TERN_BACKOFF_MAX_MS ? TERN_BACKOFF_MAX_MS : wait;
    pthread_mutex_lock(&s->park_lock);
    s->fail_code = code;
    tern_strlcpy(s->fail_why, why ? why : "", sizeof s->fail_why);
    pthread_mutex_unlock(&s->park_lock);
    atomic_store(&s->retry_at_ms, now + wait);
    return atomic_fetch_add(&s->fail_epoch, 1) + 1;
}

int tern_segment_fail_reason(tern_segment *s, char *why, size_t whylen)
{
    pthread_mutex_lock(&s->park_lock);
    int code = s->fail_code;
    tern_strlcpy(why, s->fail_why, whylen);
    pthread_mutex_unlock(&s->park_lock);
    return code ? code : TERN_ERR_CONNECT;
}

void tern_segment_ok(tern_segment *s)
{
    if (atomic_load_explicit(&s->fails, memory_order_relaxed)) {
        atomic_store(&s->fails, 0);
        atomic_store(&s->retry_at_ms, 0);
    }
}

/* ---- open, close ------------------------------------------------------------ */

static tern_segment_id find_open(tern_segments *t, const char *name)
{
    for (int i = 0; i < TERN_MAX_SEGMENTS; i++)
        if (t->segs[i] && t->segs[i]->used && strcmp(t->segs[i]->name, name) == 0)
            return i;
    return TERN_ERR_NOT_FOUND;
}

/* A free slot (reusing a closed segment struct); table lock held. */
static tern_segment_id take_slot(tern_segments *t)
{
    for (int i = 0; i < TERN_MAX_SEGMENTS; i++) {
        if (!t->segs[i]) {
            t->segs[i] = calloc(1, sizeof *t->segs[i]);
            if (!t->segs[i])
                return TERN_ERR_NOMEM;
            pthread_rwlock_init(&t->segs[i]->lock, NULL);
            pthread_mutex_init(&t->segs[i]->heal_lock, NULL);
            pthread_mutex_init(&t->segs[i]->park_lock, NULL);
            pthread_mutex_init(&t->segs[i]->probe_lock, NULL);
        }
        if (!t->segs[i]->used)
            return i;
    }
    return TERN_ERR_NOMEM;
}

static tern_segment_id install(tern_segments *t, const char *name, tern_segment_desc *d,
                               char *err, size_t errlen)
{
    pthread_mutex_lock(&t->lock);
    tern_segment_id id = find_open(t, name); /* another thread was faster */
    if (id >= 0) {
        pthread_mutex_unlock(&t->lock);
        tern_segment_desc_free(d);
        return id;
    }
    id = take_slot(t);
    if (id < 0) {
        pthread_mutex_unlock(&t->lock);
        tern_segment_desc_free(d);
        return tern_errf(err, errlen, id, "too many open segments (%d)", TERN_MAX_SEGMENTS);
    }
    tern_segment *s = t->segs[id];
    pthread_rwlock_wrlock(&s->lock);
    tern_strlcpy(s->name, name, sizeof s->name);
    atomic_store_explicit(&s->stats, tern_stats_peer(t->stats, name), memory_order_relaxed);
    s->gen++;
    tern_spread_reset(&s->spread);
    s->last_fetch_ns = tern_now_ns();
    atomic_store(&s->fails, 0);
    atomic_store(&s->retry_at_ms, 0);
    int rc = attach(t, s, d, 0, err, errlen);
    s->used = rc == 0;
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_unlock(&t->lock);
    if (rc) {
        tern_segment_desc_free(d);
        return rc;
    }
    return id;
}

tern_segment_id tern_segments_open(tern_segments *t, const char *name, char *err,
                                   size_t errlen)
{
    if (!name || !*name || strlen(name) >= 256)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "segment_open: %s",
                         !name || !*name ? "empty name" : "name too long");
    pthread_mutex_lock(&t->lock);
    tern_segment_id id = find_open(t, name);
    pthread_mutex_unlock(&t->lock);
    if (id >= 0)
        return id;
    tern_segment_desc *d = NULL;
    int rc = fetch_desc(t, name, &d, err, errlen);
    if (rc)
        return rc;
    id = install(t, name, d, err, errlen);
    /* Endpoints the peer made to us before are suspect now: it may have
     * closed our segment, and its side of them with it. */
    for (size_t i = 0; id >= 0 && t->opened && i < t->nxports; i++)
        t->opened(&t->xports[i], name);
    return id;
}

int tern_segments_close(tern_segments *t, tern_segment_id id, char *err, size_t errlen)
{
    tern_segment *s = tern_segments_get(t, id);
    if (!s)
        return tern_errf(err, errlen, TERN_ERR_NOT_FOUND, "segment_close: no open segment %d",
                         (int)id);
    char name[sizeof s->name];
    pthread_mutex_lock(&t->lock);
    pthread_rwlock_wrlock(&s->lock);
    tern_strlcpy(name, s->name, sizeof name);
    s->used = 0;
    tern_segment_desc_free(s->desc);
    s->desc = NULL;
    s->st = NULL;
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_unlock(&t->lock);
    /* Its endpoints go too: a closed (perhaps dead) peer must not keep
     * connections and file descriptors until the cache evicts them. */
    drop_endpoints(t, name);
    tern_log(t->log, TERN_LOG_DEBUG, "segment %s: closed, its endpoints dropped", name);
    return 0;
}

char *tern_segments_json(tern_segment *s)
{
    pthread_rwlock_rdlock(&s->lock);
    char *json = s->desc ? tern_segment_desc_encode(s->desc) : NULL;
    pthread_rwlock_unlock(&s->lock);
    return json;
}

const char *tern_segments_transport(tern_segments *t, tern_segment *s)
{
    pthread_rwlock_rdlock(&s->lock);
    int x = s->xport;
    pthread_rwlock_unlock(&s->lock);
    return t->xports[x].pl->name;
}

tern_desc *tern_segments_peer_blob(tern_segments *t, const char *peer, const char *xname)
{
    tern_desc *copy = NULL;
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < TERN_MAX_SEGMENTS && !copy; i++) {
        tern_segment *s = t->segs[i];
        if (!s || !s->used || strcmp(s->name, peer) != 0)
            continue;
        pthread_rwlock_rdlock(&s->lock);
        const tern_seg_transport *st = s->desc ? tern_segment_find_transport(s->desc, xname)
                                               : NULL;
        json_object *o = NULL;
        if (st && st->addr && json_object_deep_copy((json_object *)st->addr, &o, NULL) == 0)
            copy = (tern_desc *)o;
        pthread_rwlock_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return copy ? copy : tern_desc_new();
}

void tern_segments_fini(tern_segments *t)
{
    for (int i = 0; i < TERN_MAX_SEGMENTS; i++) {
        if (!t->segs[i])
            continue;
        tern_segment_desc_free(t->segs[i]->desc);
        pthread_rwlock_destroy(&t->segs[i]->lock);
        pthread_mutex_destroy(&t->segs[i]->heal_lock);
        pthread_mutex_destroy(&t->segs[i]->park_lock);
        pthread_mutex_destroy(&t->segs[i]->probe_lock);
        free(t->segs[i]);
        t->segs[i] = NULL;
    }
    pthread_mutex_destroy(&t->lock);
}

/* ---- liveness ------------------------------------------------------------------ */

void tern_segments_set_auth(tern_segments *t, const struct tern_auth *auth) { t->auth = auth; }

int tern_segments_probe(tern_segments *t, const char *name, int timeout_ms, char *err,
                        size_t errlen)
{
    static const char req[] = "{}"; /* a plain probe (docs/protocol.md, Probe) */
    char *reply = NULL, why[512] = "";
    size_t rlen = 0;
    int tmo = timeout_ms > 0 ? timeout_ms : 1;
    int rc = tern_hs_request_auth(t->auth, name, TERN_HS_PROBE, req, sizeof req - 1, &reply,
                                  &rlen, 4096, tmo, tmo, why, sizeof why);
    if (rc) {
        free(reply);
        return tern_errf(err, errlen, rc, "probe of %s: no answer within %d ms: %s", name, tmo,
                         why);
    }
    json_object *o = reply && rlen < 4096 ? json_tokener_parse(reply) : NULL;
    json_object *v;
    int ok = o && ((json_object_object_get_ex(o, "ok", &v) && json_object_get_boolean(v)) ||
                   (json_object_object_get_ex(o, "status", &v) &&
                    strcmp(json_object_get_string(v), "success") == 0)); /* Mooncake's */
    json_object_put(o);
    free(reply);
    return ok ? 0
              : tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                          "probe of %s: the daemon answered, but not as a tern or Mooncake "
                          "daemon does", name);
}

int tern_segment_alive(tern_segments *t, tern_segment *s, uint64_t since_ns, char *err,
                       size_t errlen)
{
    pthread_mutex_lock(&s->probe_lock);
    /* "alive" counts only from a probe that started after the failure;
     * "silent" from one that was still unanswered after it (the peer said
     * nothing across the failure either): slices that timed out while a
     * probe ran share its verdict instead of probing once more. */
    int fresh = s->probe_ns && (s->probe_rc ? s->probe_end_ns > since_ns
                                            : s->probe_ns > since_ns);
    if (!fresh) {
        char name[sizeof s->name];
        pthread_rwlock_rdlock(&s->lock);
        tern_strlcpy(name, s->name, sizeof name);
        pthread_rwlock_unlock(&s->lock);
        s->probe_ns = tern_now_ns();
        s->probe_rc = tern_segments_probe(t, name, t->cfg->io_timeout_ms, s->probe_why,
                                          sizeof s->probe_why);
        s->probe_end_ns = tern_now_ns();
    }
    int rc = s->probe_rc;
    if (rc)
        tern_strlcpy(err, s->probe_why, errlen);
    pthread_mutex_unlock(&s->probe_lock);
    return rc;
}
