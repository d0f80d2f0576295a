/* core/engine/endpoint.c: endpoints, active and passive.
 *
 * An endpoint joins (local device, peer NIC path); each transport has its
 * own store keyed by tern_epstore_key(local device name, peer NIC path).
 *
 * Active side (a slice needs an endpoint that is not cached): only one
 * connect per key runs at a time; other threads wanting the same key wait
 * for it (x->connecting, x->conn_cond).  With TERN_CAP_HANDSHAKE the local
 * endpoint's fields go to the peer's daemon in a Connection frame and the
 * peer's reply brings the endpoint up; a non-empty reply_msg is the peer's
 * refusal, reported verbatim.
 *
 * Simultaneous open (both engines connect the same pair at once) must end
 * with exactly one connection.  Rule, applied by the passive handler when an
 * active connect for the same key is in flight here:
 *   - the side whose local_nic_path compares smaller keeps the active role:
 *     it refuses the peer's Connection with reply_msg "simultaneous open: ..."
 *   - the larger side yields: it accepts as usual, inserts the passive
 *     endpoint and marks its own in-flight attempt `yielded`.
 * The active attempt then ends in one of two ways:
 *   - refused with "simultaneous open": drop ours and wait (bounded) for the
 *     passive endpoint our handler inserts for the peer's attempt;
 *   - accepted: the peer replaced whatever it had by our attempt's endpoint,
 *     so if we yielded meanwhile we replace our passive endpoint too.
 * Both sides therefore keep the endpoints of the same, last accepted,
 * handshake.  A passive handler replaces an existing endpoint for its key
 * (the peer reconnecting after a failure) only once the segment the frame
 * names confirmed sending it (peer_check.h), and logs the replacement. */
#include "engine/endpoint.h"
#include "peer/addrbook.h"
#include "control/frames.h"
#include "desc/handshake_desc.h"
#include "peer/mooncake_compat.h"

#include <errno.h>
#include <stdarg.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "engine/peer_check.h"
#include "base/util.h"
#include "tern/plugin_kit.h"

static const char *nic_of(const char *nic_path)
{
    const char *at = strrchr(nic_path, '@');
    return at ? at + 1 : "";
}

void tern_endpoint_drop(tern_xport *x, int local_dev, const char *peer_nic_path, void *bad)
{
    char key[400];
    if (local_dev < 0 || local_dev >= x->pl->ndevices)
        return;
    tern_epstore_key(key, sizeof key, x->pl->devices[local_dev].name, peer_nic_path);
    void *cur = NULL; /* only if it is still the failed one, not a fresh one */
    tern_ep_ref *ref = tern_epstore_get(x->eps, key, &cur);
    if (!ref)
        return;
    tern_epstore_release(x->eps, ref);
    if (cur != bad)
        return;
    tern_epstore_remove(x->eps, key);
    tern_log(&x->eng->log, TERN_LOG_DEBUG, "endpoint down: %s %s -> %s (it failed)",
             x->pl->name, x->pl->devices[local_dev].name, peer_nic_path);
}

/* ---- in-flight connects (conn_lock held) ------------------------------------ */

static tern_connecting *connecting_find(tern_xport *x, const char *key)
{
    for (tern_connecting *c = x->connecting; c; c = c->next)
        if (strcmp(c->key, key) == 0)
            return c;
    return NULL;
}

static void connecting_remove(tern_xport *x, tern_connecting *c)
{
    for (tern_connecting **pp = &x->connecting; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
}

static int handshake_budget_ms(const tern_engine *e)
{
    return e->cfg->connect_timeout_ms + 2 * e->cfg->io_timeout_ms;
}

/* ---- handshake JSON ------------------------------------------------------------ */

/* The transport's fields plus the reference keys tern sets itself. */
static char *hs_json(tern_desc *fields, const char *transport, const char *local_nic,
                     const char *peer_nic, const char *reply_msg)
{
    tern_desc_set_str(fields, "transport", transport);
    tern_desc_set_str(fields, "local_nic_path", local_nic);
    tern_desc_set_str(fields, "peer_nic_path", peer_nic);
    tern_desc_set_str(fields, "reply_msg", reply_msg);
    return tern_strdup(json_object_to_json_string_ext((json_object *)fields,
                                                      JSON_C_TO_STRING_PLAIN));
}

static char *refusal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* {"reply_msg": <why>}: the passive side's refusal. */
static char *refusal(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tern_hs_refusal(msg);
}

/* ---- active side ------------------------------------------------------------------ */

typedef struct active_ctx {
    tern_xport *x;
    tern_segment *seg;
    const tern_path *path;
    const char *key;
    tern_connecting *c;
    char *err;
    size_t errlen;
} active_ctx;

/* Send our fields, read the peer's; *peer is decoded into hd. */
static int active_exchange(active_ctx *a, void *ep, tern_handshake_desc *hd)
{
    tern_xport *x = a->x;
    const tern_config *cfg = x->eng->cfg;
    tern_desc *mine = tern_desc_new();
    if (!mine)
        return tern_errf(a->err, a->errlen, TERN_ERR_NOMEM, "out of memory");
    int rc = x->ops->ep_describe(ep, mine);
    char *req = rc ? NULL
                   : hs_json(mine, x->pl->name, a->path->local_nic_path,
                             a->path->peer_nic_path, "");
    tern_desc_free(mine);
    if (!req)
        return tern_errf(a->err, a->errlen, rc ? rc : TERN_ERR_NOMEM,
                         "%s: describing the endpoint failed", x->pl->name);
    tern_peer_check_sent(x, a->c, req, strlen(req)); /* the peer calls back to confirm */
    char *reply = NULL, msg[TERN_ERRMSG_MAX] = "";
    size_t rlen = 0;
    char addrs[TERN_HS_MAX_LISTEN + 1][TERN_HS_ADDR_MAX]; /* its daemon's, best first */
    size_t n = tern_addrbook_order(x->eng->book, a->seg->name, addrs, TERN_HS_MAX_LISTEN + 1);
    size_t used = 0;
    rc = tern_hs_request_via(x->eng->auth, a->seg->name, addrs, n, &used, TERN_HS_CONNECTION, req,
                             strlen(req), &reply, &rlen, cfg->handshake_max_frame,
                             cfg->connect_timeout_ms, cfg->io_timeout_ms, msg, sizeof msg);
    if (rc == 0 && n)
        tern_addrbook_answered(x->eng->book, a->seg->name, addrs[used]);
    free(req);
    if (rc)
        return tern_errf(a->err, a->errlen, rc, "handshake with %s: %s", a->seg->name, msg);
    tern_mooncake_hs mk; /* the reference keys' types are checked whatever the transport */
    rc = tern_mooncake_hs_decode(reply, rlen, hd, &mk, msg, sizeof msg);
    free(reply);
    if (rc)
        return tern_errf(a->err, a->errlen, rc, "handshake with %s: bad reply: %s",
                         a->seg->name, msg);
    tern_mooncake_handshake_fill(hd, a->seg->st); /* docs/protocol.md, Mooncake compatibility */
    return 0;
}

/* After "simultaneous open" from the peer: wait for the passive endpoint our
 * handler inserts for the peer's attempt (conn_lock not held on entry). */
static int active_await_passive(active_ctx *a, void **ep, tern_ep_ref **ref)
{
    tern_xport *x = a->x;
    /* conn_cond is a default cond (tern_xport_init): CLOCK_REALTIME */
    struct timespec until = tern_kit_deadline(handshake_budget_ms(x->eng));
    pthread_mutex_lock(&x->conn_lock);
    int rc = 0;
    while (!(*ref = tern_epstore_get(x->eps, a->key, ep)) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&x->conn_cond, &x->conn_lock, &until);
    pthread_mutex_unlock(&x->conn_lock);
    if (*ref)
        return 0;
    return tern_errf(a->err, a->errlen, TERN_ERR_TIMEOUT,
                     "simultaneous open with %s: the peer kept the active role but its "
                     "endpoint did not arrive", a->path->peer_nic_path);
}

/* Bring a fresh active endpoint up (handshake when the transport needs it).
 * Returns 1 when the peer keeps the active role (simultaneous open). */
static int active_connect(active_ctx *a, void *ep)
{
    tern_xport *x = a->x;
    char msg[TERN_ERRMSG_MAX] = "";
    if (!(x->ops->caps & TERN_CAP_HANDSHAKE)) {
        int rc = x->ops->ep_connect(ep, NULL, msg, sizeof msg);
        return rc ? tern_errf(a->err, a->errlen, rc, "%s: connecting to %s failed: %s",
                              x->pl->name, a->path->peer_nic_path, tern_xport_msg(x, msg))
                  : 0;
    }
    tern_handshake_desc hd;
    int rc = active_exchange(a, ep, &hd);
    if (rc)
        return rc;
    if (hd.reply_msg[0]) {
        int simul = strncmp(hd.reply_msg, "simultaneous open", 17) == 0;
        rc = simul ? 1
                   : tern_errf(a->err, a->errlen, TERN_ERR_REFUSED, "peer %s refused: %s",
                               a->seg->name, hd.reply_msg);
    } else {
        rc = x->ops->ep_connect(ep, hd.fields, msg, sizeof msg);
        if (rc)
            tern_errf(a->err, a->errlen, rc, "%s: connecting to %s failed: %s", x->pl->name,
                      a->path->peer_nic_path, tern_xport_msg(x, msg));
    }
    tern_handshake_desc_clear(&hd);
    return rc;
}

/* Insert our new endpoint; replace a passive one inserted while we were
 * connecting if we yielded (see the rule at the top). */
static void active_insert(active_ctx *a, void *newep, void **ep, tern_ep_ref **ref)
{
    tern_xport *x = a->x;
    pthread_mutex_lock(&x->conn_lock);
    int rc = tern_epstore_insert(x->eps, a->key, newep, ep, ref);
    if (rc == TERN_ERR_EXISTS && (a->c->yielded || a->c->replace)) {
        tern_epstore_release(x->eps, *ref);
        tern_epstore_remove(x->eps, a->key);
        rc = tern_epstore_insert(x->eps, a->key, newep, ep, ref);
    }
    if (rc == 0)
        tern_peer_check_inserted(x, a->key, 0);
    pthread_mutex_unlock(&x->conn_lock);
    if (rc == TERN_ERR_EXISTS)
        x->ops->ep_close(newep); /* someone else's is as good */
}

static int active_open(active_ctx *a, void **ep, tern_ep_ref **ref)
{
    tern_xport *x = a->x;
    char msg[TERN_ERRMSG_MAX] = "";
    tern_ep_params p = {
        .struct_size = sizeof p, .local_dev = a->path->local_dev,
        .peer_dev = a->path->peer_dev, .peer_name = a->seg->name,
        .peer_nic_path = a->path->peer_nic_path, .local_nic_path = a->path->local_nic_path,
        .peer_segment = a->seg->st->addr, .passive = 0};
    tern_desc *empty = NULL;
    if (!p.peer_segment)
        p.peer_segment = empty = tern_desc_new();
    void *newep = NULL;
    int rc = x->ops->ep_open(x->pl->ctx, &p, &newep, msg, sizeof msg);
    tern_desc_free(empty);
    if (rc)
        return tern_errf(a->err, a->errlen, rc, "%s: opening an endpoint to %s failed: %s",
                         x->pl->name, a->path->peer_nic_path, tern_xport_msg(x, msg));
    rc = active_connect(a, newep);
    if (rc) {
        x->ops->ep_close(newep);
        return rc == 1 ? active_await_passive(a, ep, ref) : rc;
    }
    active_insert(a, newep, ep, ref);
    return 0;
}

/* Wait for the connect in flight for key c (conn_lock held); returns its
 * outcome: 0 (the endpoint is then in the store) or its failure, shared by
 * every waiter so one unreachable peer costs one connect, not one per slice. */
static int connecting_wait(tern_xport *x, tern_connecting *c, char *err, size_t errlen)
{
    c->waiters++;
    while (!c->done)
        pthread_cond_wait(&x->conn_cond, &x->conn_lock);
    int rc = c->rc;
    if (rc)
        tern_errf(err, errlen, rc, "%s", c->err);
    if (--c->waiters == 0)
        free(c); /* the connecting thread left it to the last waiter */
    return rc;
}

#define UNREACH_KEEP_MS 1000 /* how long an UNREACHABLE outcome is shared */

/* An UNREACHABLE outcome for key, segment seg as it is now (conn_lock and
 * the segment's lock held): noted, or whether one was noted. */
static void unreach_note(tern_xport *x, const tern_segment *seg, const char *key,
                         const char *err)
{
    tern_strlcpy(x->unreach_key, key, sizeof x->unreach_key);
    tern_strlcpy(x->unreach_err, err ? err : "", sizeof x->unreach_err);
    x->unreach_seg = seg;
    x->unreach_gen = seg->gen;
    x->unreach_desc_gen = seg->desc_gen;
    x->unreach_ms = tern_now_ms();
}

static int unreach_noted(const tern_xport *x, const tern_segment *seg, const char *key)
{
    return x->unreach_ms && tern_now_ms() - x->unreach_ms < UNREACH_KEEP_MS &&
           x->unreach_seg == seg && x->unreach_gen == seg->gen &&
           x->unreach_desc_gen == seg->desc_gen && strcmp(x->unreach_key, key) == 0;
}

/* The connecting thread publishes its outcome (conn_lock held). */
static void connecting_finish(tern_xport *x, tern_connecting *c, int rc, const char *err)
{
    connecting_remove(x, c);
    c->done = 1;
    c->rc = rc;
    tern_strlcpy(c->err, rc && err ? err : "", sizeof c->err);
    pthread_cond_broadcast(&x->conn_cond);
    if (c->waiters == 0)
        free(c);
}

int tern_endpoint_cached(tern_xport *x, const tern_path *path, void **ep, tern_ep_ref **ref)
{
    char key[400];
    tern_epstore_key(key, sizeof key, nic_of(path->local_nic_path), path->peer_nic_path);
    *ref = NULL;
    if (atomic_load(&x->nrecheck) > 0) { /* marked: a worker connects afresh */
        pthread_mutex_lock(&x->conn_lock);
        int marked = tern_peer_check_marked(x, key);
        pthread_mutex_unlock(&x->conn_lock);
        if (marked)
            return 1;
    }
    *ref = tern_epstore_get(x->eps, key, ep);
    return *ref ? 0 : 1;
}

int tern_endpoint_get(tern_xport *x, tern_segment *seg, const tern_path *path, void **ep,
                      tern_ep_ref **ref, char *err, size_t errlen)
{
    char key[400];
    tern_epstore_key(key, sizeof key, nic_of(path->local_nic_path), path->peer_nic_path);
    if (atomic_load(&x->nrecheck) == 0 && (*ref = tern_epstore_get(x->eps, key, ep)) != NULL)
        return 0;
    pthread_mutex_lock(&x->conn_lock);
    tern_connecting *c;
    int replace = 0;
    for (;;) {
        c = connecting_find(x, key);
        if (!c) {
            /* A passive endpoint older than our segment: connect afresh and
             * replace it (peer_check.h).  The mark stays until an endpoint
             * is inserted for the key, so no slice takes the old one
             * meanwhile: the application thread's lookup misses and the
             * workers wait for this connect (c->replace). */
            replace = tern_peer_check_marked(x, key);
            if (!replace && (*ref = tern_epstore_get(x->eps, key, ep)) != NULL) {
                pthread_mutex_unlock(&x->conn_lock);
                return 0;
            }
            if (unreach_noted(x, seg, key)) { /* one connect per unreachable peer */
                tern_errf(err, errlen, TERN_ERR_UNREACHABLE, "%s", x->unreach_err);
                pthread_mutex_unlock(&x->conn_lock);
                return TERN_ERR_UNREACHABLE;
            }
            break;
        }
        if (!c->replace && (*ref = tern_epstore_get(x->eps, key, ep)) != NULL) {
            pthread_mutex_unlock(&x->conn_lock);
            return 0;
        }
        int rc = connecting_wait(x, c, err, errlen); /* one connect per key */
        if (rc) {
            pthread_mutex_unlock(&x->conn_lock);
            return rc;
        }
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        pthread_mutex_unlock(&x->conn_lock);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    }
    c->replace = replace;
    tern_strlcpy(c->key, key, sizeof c->key);
    tern_strlcpy(c->local_nic_path, path->local_nic_path, sizeof c->local_nic_path);
    c->next = x->connecting;
    x->connecting = c;
    pthread_mutex_unlock(&x->conn_lock);

    active_ctx a = {x, seg, path, key, c, err, errlen};
    int rc = active_open(&a, ep, ref);
    tern_log(&x->eng->log, TERN_LOG_DEBUG, "endpoint %s: %s %s -> %s (segment %s)%s%s",
             rc ? "not up" : "up", x->pl->name, path->local_nic_path, path->peer_nic_path,
             seg->name, rc ? ": " : "", rc ? err : "");

    pthread_mutex_lock(&x->conn_lock);
    if (rc == TERN_ERR_UNREACHABLE)
        unreach_note(x, seg, key, err);
    connecting_finish(x, c, rc, err);
    pthread_mutex_unlock(&x->conn_lock);
    return rc;
}

/* ---- passive side (our daemon got a Connection frame) ------------------------------- */

static tern_xport *xport_named(tern_engine *e, const char *name)
{
    for (size_t i = 0; i < e->nxports; i++)
        if (name[0] ? strcmp(e->xports[i].pl->name, name) == 0
                    : (e->xports[i].ops->caps & TERN_CAP_HANDSHAKE) != 0)
            return &e->xports[i]; /* no "transport" key: a reference peer */
    return NULL;
}

static int device_index(const tern_xport *x, const char *name)
{
    for (int i = 0; i < x->pl->ndevices; i++)
        if (strcmp(x->pl->devices[i].name, name) == 0)
            return i;
    return TERN_ERR_NOT_FOUND;
}

/* The peer's segment blob if we have its segment open, else an empty one. */
static tern_desc *peer_blob(tern_engine *e, const tern_xport *x, const char *peer_name)
{
    return tern_segments_peer_blob(&e->segs, peer_name, x->pl->name);
}

typedef struct passive_ctx {
    tern_engine *e;
    tern_xport *x;
    tern_handshake_desc *hd;
    int dev;
    char key[400];
    char my_nic[320];
    char peer_name[320];
    int unconfirmed;   /* accepted without confirmation: may not replace */
} passive_ctx;

/* Open and connect the passive endpoint; on failure msg says why. */
static int passive_open(passive_ctx *p, void **out, char *msg, size_t msglen)
{
    tern_xport *x = p->x;
    tern_desc *blob = peer_blob(p->e, x, p->peer_name);
    tern_ep_params prm = {
        .struct_size = sizeof prm, .local_dev = p->dev, .peer_dev = 0,
        .peer_name = p->peer_name, .peer_nic_path = p->hd->local_nic_path,
        .local_nic_path = p->my_nic, .peer_segment = blob, .passive = 1};
    void *ep = NULL;
    int rc = x->ops->ep_open(x->pl->ctx, &prm, &ep, msg, msglen);
    tern_desc_free(blob);
    if (rc)
        return rc;
    rc = x->ops->ep_connect(ep, p->hd->fields, msg, msglen);
    if (rc) {
        x->ops->ep_close(ep);
        return rc;
    }
    *out = ep;
    return 0;
}

/* Insert (replacing any endpoint for the key) and flag our own in-flight
 * attempt as yielded; wakes an active side waiting for it. */
static int passive_insert(passive_ctx *p, void *ep)
{
    tern_xport *x = p->x;
    void *cur = NULL;
    tern_ep_ref *ref = NULL;
    pthread_mutex_lock(&x->conn_lock);
    if (p->unconfirmed && (connecting_find(x, p->key) || /* raced with our own */
                           !tern_peer_check_replaceable(x, p->key))) {
        pthread_mutex_unlock(&x->conn_lock);
        x->ops->ep_close(ep);
        return TERN_ERR_EXISTS;
    }
    tern_epstore_remove(x->eps, p->key);
    int rc = tern_epstore_insert(x->eps, p->key, ep, &cur, &ref);
    if (rc == TERN_ERR_EXISTS)
        x->ops->ep_close(ep);
    else if (rc == 0)
        tern_peer_check_inserted(x, p->key, 1);
    if (ref)
        tern_epstore_release(x->eps, ref);
    tern_connecting *c = connecting_find(x, p->key);
    if (c) {
        c->yielded = 1;
        tern_log(&p->e->log, TERN_LOG_DEBUG, "simultaneous open with %s: yielded",
                 p->hd->local_nic_path);
    }
    pthread_cond_broadcast(&x->conn_cond);
    pthread_mutex_unlock(&x->conn_lock);
    return rc == TERN_ERR_EXISTS ? rc : 0;
}

static char *passive_reply(passive_ctx *p, void *ep)
{
    tern_desc *mine = tern_desc_new();
    char *json = NULL;
    if (mine && p->x->ops->ep_describe(ep, mine) == 0)
        json = hs_json(mine, p->x->pl->name, p->my_nic, p->hd->local_nic_path, "");
    tern_desc_free(mine);
    return json;
}

/* The tie-break: refuse when an active attempt for the key runs here and
 * our local_nic_path is the smaller one. */
static int passive_keeps_out(passive_ctx *p)
{
    pthread_mutex_lock(&p->x->conn_lock);
    tern_connecting *c = connecting_find(p->x, p->key);
    int refuse = c && strcmp(c->local_nic_path, p->hd->local_nic_path) < 0;
    pthread_mutex_unlock(&p->x->conn_lock);
    return refuse;
}

static char *passive_run(passive_ctx *p)
{
    tern_xport *x = p->x;
    const char *dev = nic_of(p->hd->peer_nic_path);
    p->dev = device_index(x, dev);
    if (p->dev < 0)
        return refusal("no %s device '%s' here", x->pl->name, dev);
    snprintf(p->my_nic, sizeof p->my_nic, "%s@%s", p->e->server_name, dev);
    tern_strlcpy(p->peer_name, p->hd->local_nic_path, sizeof p->peer_name);
    char *at = strrchr(p->peer_name, '@');
    if (at)
        *at = '\0';
    tern_epstore_key(p->key, sizeof p->key, dev, p->hd->local_nic_path);
    if (passive_keeps_out(p)) {
        tern_log(&p->e->log, TERN_LOG_DEBUG, "simultaneous open with %s: keeping the active role",
                 p->hd->local_nic_path);
        return refusal("simultaneous open: %s keeps the active role towards %s", p->my_nic,
                       p->hd->local_nic_path);
    }
    char msg[TERN_ERRMSG_MAX] = "";
    void *ep = NULL;
    int rc = passive_open(p, &ep, msg, sizeof msg);
    if (rc) /* the transport's own message names it */
        return msg[0] ? refusal("%s", msg) : refusal("%s: %s", x->pl->name, tern_strerror(rc));
    char *reply = passive_reply(p, ep);
    if (!reply) {
        x->ops->ep_close(ep);
        return refusal("%s: describing the endpoint failed", x->pl->name);
    }
    if (passive_insert(p, ep) != 0) { /* only an unconfirmed one (docs/protocol.md) */
        tern_log(&p->e->log, TERN_LOG_DEBUG, "endpoint not up: %s %s <- %s: unconfirmed, and "
                 "our own endpoint came up meanwhile", x->pl->name, p->my_nic,
                 p->hd->local_nic_path);
        free(reply);
        return refusal("Connection from %s is unconfirmed and this engine's own endpoint to "
                       "it was established meanwhile: an unconfirmed Connection never "
                       "replaces one",
                       p->hd->local_nic_path);
    }
    tern_log(&p->e->log, TERN_LOG_DEBUG, "endpoint up: %s %s <- %s (passive%s)", x->pl->name,
             p->my_nic, p->hd->local_nic_path, p->unconfirmed ? ", unconfirmed" : "");
    return reply;
}

char *tern_endpoint_accept(tern_engine *e, const char *json, size_t len)
{
    tern_handshake_desc hd;
    tern_mooncake_hs mk; /* the reference keys' types are checked whatever the transport */
    char msg[512] = "";
    if (tern_mooncake_hs_decode(json, len, &hd, &mk, msg, sizeof msg) != 0)
        return refusal("bad handshake descriptor: %s", msg);
    passive_ctx p = {.e = e, .hd = &hd};
    char *reply;
    int mooncake = !hd.transport[0];
    if (mooncake) /* a Mooncake peer: docs/protocol.md, Mooncake compatibility */
        tern_strlcpy(hd.transport, tern_mooncake_infer_transport(&hd, &mk), sizeof hd.transport);
    if (!(p.x = xport_named(e, hd.transport)))
        reply = refusal("transport '%s' is not loaded on %s", hd.transport[0] ? hd.transport
                                                                              : "(none named)",
                        e->server_name);
    else if (!(p.x->ops->caps & TERN_CAP_HANDSHAKE))
        reply = refusal("transport '%s' on %s takes no handshake", p.x->pl->name,
                        e->server_name);
    else if (tern_peer_check_connection(e, p.x, &hd, json, len, &p.unconfirmed, msg,
                                        sizeof msg) != 0)
        reply = refusal("%s", msg); /* not sent by the segment it names */
    else {
        if (mooncake) /* v0.3.10 sends no local_lid / local_gid */
            tern_mooncake_handshake_fill_passive(e->segs.md, &hd, p.x->pl->name);
        reply = passive_run(&p);
    }
    tern_handshake_desc_clear(&hd);
    return reply;
}
