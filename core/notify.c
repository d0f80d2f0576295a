/* core/notify.c: notifications out (a Notify frame to the peer's daemon)
 * and in (the queue the daemon's handler fills); see notify.h. */
#include "notify.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "engine_error.h"
#include "util.h"

typedef struct tern_notification {
    char from[256], name[256];
    char *msg;
} tern_notification;

struct tern_notes {
    pthread_mutex_t lock;
    tern_notification ring[TERN_NOTIFY_QUEUE];
    size_t head, count;
    uint64_t dropped;
};

struct tern_notes *tern_notes_create(void)
{
    struct tern_notes *q = calloc(1, sizeof *q);
    if (q)
        pthread_mutex_init(&q->lock, NULL);
    return q;
}

void tern_notes_free(struct tern_notes *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->count; i++)
        free(q->ring[(q->head + i) % TERN_NOTIFY_QUEUE].msg);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

void tern_notes_push(struct tern_notes *q, const char *from, const char *name, const char *msg)
{
    char *copy = tern_strdup(msg);
    if (!copy)
        return;
    pthread_mutex_lock(&q->lock);
    if (q->count == TERN_NOTIFY_QUEUE) { /* full: drop the oldest */
        free(q->ring[q->head].msg);
        q->head = (q->head + 1) % TERN_NOTIFY_QUEUE;
        q->count--;
        q->dropped++;
    }
    tern_notification *n = &q->ring[(q->head + q->count) % TERN_NOTIFY_QUEUE];
    tern_strlcpy(n->from, from, sizeof n->from);
    tern_strlcpy(n->name, name, sizeof n->name);
    n->msg = copy;
    q->count++;
    pthread_mutex_unlock(&q->lock);
}

uint64_t tern_notes_dropped(struct tern_notes *q)
{
    pthread_mutex_lock(&q->lock);
    uint64_t n = q->dropped;
    pthread_mutex_unlock(&q->lock);
    return n;
}

TERN_EXPORT int tern_notify_recv(tern_engine *e, char *from, size_t fromlen, char *name,
                                 size_t namelen, char *msg, size_t msglen)
{
    if (!e)
        return TERN_ERR_INVAL;
    struct tern_notes *q = e->notes;
    pthread_mutex_lock(&q->lock);
    if (!q->count) {
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    tern_notification n = q->ring[q->head];
    q->head = (q->head + 1) % TERN_NOTIFY_QUEUE;
    q->count--;
    pthread_mutex_unlock(&q->lock);
    if (from && fromlen)
        tern_strlcpy(from, n.from, fromlen);
    if (name && namelen)
        tern_strlcpy(name, n.name, namelen);
    if (msg && msglen)
        tern_strlcpy(msg, n.msg, msglen);
    free(n.msg);
    return 1;
}

TERN_EXPORT int tern_notify_send(tern_engine *e, tern_segment_id id, const char *name,
                                 const char *msg)
{
    tern_segment *s = e ? tern_segments_get(&e->segs, id) : NULL;
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
    /* the same message in Mooncake's shape, for a Mooncake receiver
     * (docs/protocol.md, Mooncake compatibility) */
    json_object_object_add(o, "notify_msg", json_object_new_string(msg));
    const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    char *reply = NULL, err[TERN_ERRMSG_MAX] = "";
    size_t rlen = 0;
    int rc = tern_hs_request_auth(e->auth, s->name, TERN_HS_NOTIFY, txt, strlen(txt), &reply,
                                  &rlen, e->cfg->handshake_max_frame,
                                  e->cfg->connect_timeout_ms, e->cfg->io_timeout_ms, err,
                                  sizeof err);
    json_object_put(o);
    free(reply);
    if (rc)
        return tern_engine_fail(e, rc, "notify_send to %s: %s", s->name, err);
    return 0;
}
