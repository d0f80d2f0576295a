/* core/engine_segment.c: opening peers' segments by name, their
 * descriptors, the negotiated transport, and notifications to them.
 *
 * Segment structs are never freed before the engine: close only drops the
 * descriptor, so a slice that races a close sees "closed" instead of freed
 * memory.  A segment's descriptor is replaced under its write lock when a
 * target address is not covered (stale descriptor, refetched once). */
#include "engine.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

tern_segment *tern_engine_segment(tern_engine *e, tern_segment_id id)
{
    if (!e || id < 0 || id >= TERN_MAX_SEGMENTS)
        return NULL;
    pthread_mutex_lock(&e->seglock);
    tern_segment *s = e->segs[id] && e->segs[id]->used ? e->segs[id] : NULL;
    pthread_mutex_unlock(&e->seglock);
    return s;
}

/* Fetch and decode the descriptor of `name`. */
static int fetch_desc(tern_engine *e, const char *name, tern_segment_desc **out, char *err,
                      size_t errlen)
{
    char *json = NULL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_metadata_fetch(e->md, name, &json, msg, sizeof msg);
    if (rc)
        return tern_errf(err, errlen, rc, "segment %s: fetching its descriptor failed: %s",
                         name, msg);
    rc = tern_segment_desc_decode(json, strlen(json), out, msg, sizeof msg);
    free(json);
    if (rc)
        return tern_errf(err, errlen, rc, "segment %s: bad descriptor: %s", name, msg);
    return 0;
}

/* Index in e->xports of the negotiated transport for descriptor d. */
static int choose_xport(tern_engine *e, const tern_segment_desc *d, const char *name,
                        char *err, size_t errlen)
{
    const char *local[TERN_DESC_MAX_TRANSPORTS], *peer[TERN_DESC_MAX_TRANSPORTS];
    int loaded[TERN_DESC_MAX_TRANSPORTS];
    size_t nl = 0;
    for (size_t i = 0; i < e->plugins.n && nl < TERN_DESC_MAX_TRANSPORTS; i++, nl++) {
        local[nl] = e->plugins.plugins[i].name;
        loaded[nl] = e->plugins.plugins[i].outcome == TERN_LOAD_OK &&
                     e->plugins.plugins[i].ops != NULL;
    }
    size_t np = 0;
    for (; np < d->ntransports && np < TERN_DESC_MAX_TRANSPORTS; np++)
        peer[np] = d->transports[np].name;
    int i = tern_negotiate(local, nl, loaded, peer, np, name, err, errlen);
    if (i < 0)
        return i;
    for (size_t x = 0; x < e->nxports; x++)
        if (strcmp(e->xports[x].pl->name, local[i]) == 0)
            return (int)x;
    return tern_errf(err, errlen, TERN_ERR_NO_TRANSPORT, "transport %s is not loaded", local[i]);
}

/* Check and attach a descriptor to a segment (write lock held). */
static int segment_attach(tern_engine *e, tern_segment *s, tern_segment_desc *d, char *err,
                          size_t errlen)
{
    int x = choose_xport(e, d, s->name, err, errlen);
    if (x < 0)
        return x;
    const tern_seg_transport *st = tern_segment_find_transport(d, e->xports[x].pl->name);
    if (!st || !st->topology)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "segment %s publishes no priority_matrix for transport %s", s->name,
                         e->xports[x].pl->name);
    tern_segment_desc_free(s->desc);
    s->desc = d;
    s->st = st;
    s->xport = x;
    return 0;
}

int tern_segment_refetch(tern_engine *e, tern_segment *s, char *err, size_t errlen)
{
    tern_segment_desc *d = NULL;
    int rc = fetch_desc(e, s->name, &d, err, errlen);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&s->lock);
    rc = segment_attach(e, s, d, err, errlen);
    pthread_rwlock_unlock(&s->lock);
    if (rc)
        tern_segment_desc_free(d);
    return rc;
}

static tern_segment_id find_open(tern_engine *e, const char *name)
{
    for (int i = 0; i < TERN_MAX_SEGMENTS; i++)
        if (e->segs[i] && e->segs[i]->used && strcmp(e->segs[i]->name, name) == 0)
            return i;
    return TERN_ERR_NOT_FOUND;
}

/* A free slot (reusing a closed segment struct); seglock held. */
static tern_segment_id take_slot(tern_engine *e)
{
    for (int i = 0; i < TERN_MAX_SEGMENTS; i++) {
        if (!e->segs[i]) {
            e->segs[i] = calloc(1, sizeof *e->segs[i]);
            if (!e->segs[i])
                return TERN_ERR_NOMEM;
            pthread_rwlock_init(&e->segs[i]->lock, NULL);
        }
        if (!e->segs[i]->used)
            return i;
    }
    return TERN_ERR_NOMEM;
}

static tern_segment_id segment_install(tern_engine *e, const char *name, tern_segment_desc *d,
                                       char *err, size_t errlen)
{
    pthread_mutex_lock(&e->seglock);
    tern_segment_id id = find_open(e, name); /* another thread was faster */
    if (id >= 0) {
        pthread_mutex_unlock(&e->seglock);
        tern_segment_desc_free(d);
        return id;
    }
    id = take_slot(e);
    if (id < 0) {
        pthread_mutex_unlock(&e->seglock);
        tern_segment_desc_free(d);
        return tern_errf(err, errlen, id, "too many open segments (%d)", TERN_MAX_SEGMENTS);
    }
    tern_segment *s = e->segs[id];
    pthread_rwlock_wrlock(&s->lock);
    tern_strlcpy(s->name, name, sizeof s->name);
    s->gen++;
    int rc = segment_attach(e, s, d, err, errlen);
    s->used = rc == 0;
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_unlock(&e->seglock);
    if (rc) {
        tern_segment_desc_free(d);
        return rc;
    }
    return id;
}

TERN_EXPORT tern_segment_id tern_segment_open(tern_engine *e, const char *name)
{
    if (!e)
        return TERN_ERR_INVAL;
    if (!name || !*name || strlen(name) >= 256)
        return tern_engine_fail(e, TERN_ERR_INVAL, "segment_open: %s",
                                !name || !*name ? "empty name" : "name too long");
    pthread_mutex_lock(&e->seglock);
    tern_segment_id id = find_open(e, name);
    pthread_mutex_unlock(&e->seglock);
    if (id >= 0)
        return id;
    char msg[TERN_ERRMSG_MAX] = "";
    tern_segment_desc *d = NULL;
    int rc = fetch_desc(e, name, &d, msg, sizeof msg);
    if (rc == 0)
        rc = segment_install(e, name, d, msg, sizeof msg);
    if (rc < 0)
        return tern_engine_fail(e, rc, "%s", msg);
    tern_engine_clear_error(e);
    return rc;
}

TERN_EXPORT int tern_segment_close(tern_engine *e, tern_segment_id id)
{
    tern_segment *s = tern_engine_segment(e, id);
    if (!s)
        return e ? tern_engine_fail(e, TERN_ERR_NOT_FOUND, "segment_close: no open segment %d",
                                    (int)id)
                 : TERN_ERR_INVAL;
    char name[sizeof s->name];
    pthread_mutex_lock(&e->seglock);
    pthread_rwlock_wrlock(&s->lock);
    tern_strlcpy(name, s->name, sizeof name);
    s->used = 0;
    tern_segment_desc_free(s->desc);
    s->desc = NULL;
    s->st = NULL;
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_unlock(&e->seglock);
    /* Its endpoints go too: a closed (perhaps dead) peer must not keep
     * connections and file descriptors until the cache evicts them. */
    for (size_t i = 0; i < e->nxports; i++)
        if (e->xports[i].eps)
            tern_epstore_remove_peer(e->xports[i].eps, name);
    return 0;
}

TERN_EXPORT int tern_segment_descriptor(tern_engine *e, tern_segment_id id, char **json_out)
{
    if (!e || !json_out)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_descriptor: json_out is NULL")
                 : TERN_ERR_INVAL;
    *json_out = NULL;
    if (id == TERN_LOCAL_SEGMENT) {
        pthread_rwlock_rdlock(&e->memlock);
        *json_out = tern_strdup(e->local_json);
        pthread_rwlock_unlock(&e->memlock);
    } else {
        tern_segment *s = tern_engine_segment(e, id);
        if (!s)
            return tern_engine_fail(e, TERN_ERR_NOT_FOUND,
                                    "segment_descriptor: no open segment %d", (int)id);
        pthread_rwlock_rdlock(&s->lock);
        *json_out = s->desc ? tern_segment_desc_encode(s->desc) : NULL;
        pthread_rwlock_unlock(&s->lock);
    }
    return *json_out ? 0 : tern_engine_fail(e, TERN_ERR_NOT_FOUND, "no descriptor");
}

TERN_EXPORT int tern_segment_transport(tern_engine *e, tern_segment_id id, char *name,
                                       size_t namelen)
{
    if (!e || !name || !namelen)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_transport: no output buffer")
                 : TERN_ERR_INVAL;
    tern_segment *s = tern_engine_segment(e, id);
    if (!s)
        return tern_engine_fail(e, TERN_ERR_NOT_FOUND, "segment_transport: no open segment %d",
                                (int)id);
    tern_strlcpy(name, e->xports[s->xport].pl->name, namelen);
    return 0;
}

void tern_engine_segments_free(tern_engine *e)
{
    for (int i = 0; i < TERN_MAX_SEGMENTS; i++) {
        if (!e->segs[i])
            continue;
        tern_segment_desc_free(e->segs[i]->desc);
        pthread_rwlock_destroy(&e->segs[i]->lock);
        free(e->segs[i]);
        e->segs[i] = NULL;
    }
}

/* ---- notifications out ---------------------------------------------------- */

TERN_EXPORT int tern_notify_send(tern_engine *e, tern_segment_id id, const char *name,
                                 const char *msg)
{
    tern_segment *s = tern_engine_segment(e, id);
    if (!s)
        return e ? tern_engine_fail(e, TERN_ERR_NOT_FOUND, "notify_send: no open segment %d",
                                    (int)id)
                 : TERN_ERR_INVAL;
    if (!name || !msg || strlen(msg) > TERN_NOTIFY_MAX || strlen(name) > 255)
        return tern_engine_fail(e, TERN_ERR_INVAL,
                                "notify_send: name (<= 255 bytes) and msg (<= %d bytes) needed",
                                TERN_NOTIFY_MAX);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "from", json_object_new_string(e->server_name));
    json_object_object_add(o, "name", json_object_new_string(name));
    json_object_object_add(o, "msg", json_object_new_string(msg));
    /* the same message in Mooncake's shape, for a Mooncake receiver */
    json_object_object_add(o, "notify_msg", json_object_new_string(msg));
    const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    char *reply = NULL, err[TERN_ERRMSG_MAX] = "";
    size_t rlen = 0;
    int rc = tern_hs_request_auth(e->auth, s->name, TERN_HS_NOTIFY, txt, strlen(txt), &reply, &rlen,
                             e->cfg->handshake_max_frame, e->cfg->connect_timeout_ms,
                             e->cfg->io_timeout_ms, err, sizeof err);
    json_object_put(o);
    free(reply);
    if (rc)
        return tern_engine_fail(e, rc, "notify_send to %s: %s", s->name, err);
    return 0;
}
