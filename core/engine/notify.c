/* core/engine/notify.c: notifications out (a Notify frame to the peer's daemon)
 * and in (the queue the daemon's handler fills); see notify.h. */
#include "engine/notify.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine_error.h"
#include "base/util.h"
#include "tern/plugin_kit.h"

typedef struct tern_notification {
    char from[256], name[256];
    char *msg;
} tern_notification;

/* A kept control connection to one peer's daemon: sends to a peer reuse
 * it instead of a connection (and a secret proof) each.  `lock` makes the
 * sends to one peer take turns on it. */
typedef struct tern_nsession {
    char peer[256];
    int fd;               /* -1: not connected */
    pthread_mutex_t lock;
    struct tern_nsession *next;
} tern_nsession;

typedef struct tern_outmsg {
    char *peer, *name, *msg;
    tern_notes_done_fn done;
    void *arg;
    size_t note;
    struct tern_outmsg *next;
} tern_outmsg;

struct tern_notes {
    tern_engine *e;
    pthread_mutex_t lock;     /* the receive queue and its counters */
    pthread_cond_t cond;      /* a notification arrived (CLOCK_MONOTONIC) */
    tern_notification ring[TERN_NOTIFY_QUEUE];
    size_t head, count;
    int efd;                  /* readable while count > 0 */
    uint64_t received, delivered, refused;
    _Atomic uint64_t sent, send_failed;
    /* the outbox */
    pthread_mutex_t olock;
    pthread_cond_t ocond;
    tern_outmsg *ohead, *otail;
    int sender_running, ostop;
    pthread_t sender;
    /* kept connections, one per peer sent to */
    pthread_mutex_t slock;
    tern_nsession *sessions;
    _Atomic uint64_t connects; /* connections opened for sends */
};

struct tern_notes *tern_notes_create(tern_engine *e)
{
    struct tern_notes *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        free(q);
        return NULL;
    }
    q->e = e;
    pthread_mutex_init(&q->lock, NULL);
    tern_kit_cond_init_mono(&q->cond);
    pthread_mutex_init(&q->olock, NULL);
    pthread_cond_init(&q->ocond, NULL);
    pthread_mutex_init(&q->slock, NULL);
    return q;
}

static void outmsg_free(tern_outmsg *m)
{
    free(m->peer);
    free(m->name);
    free(m->msg);
    free(m);
}

void tern_notes_free(struct tern_notes *q)
{
    if (!q)
        return;
    tern_thread_stop(&q->sender, &q->olock, &q->ocond, &q->ostop, &q->sender_running);
    for (tern_outmsg *m = q->ohead, *n; m; m = n) {
        n = m->next;
        m->done(m->arg, m->note, TERN_ERR_CLOSED, "the engine was destroyed before it was sent");
        outmsg_free(m);
    }
    for (size_t i = 0; i < q->count; i++)
        free(q->ring[(q->head + i) % TERN_NOTIFY_QUEUE].msg);
    for (tern_nsession *s = q->sessions, *n; s; s = n) {
        n = s->next;
        if (s->fd >= 0)
            close(s->fd);
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
    pthread_mutex_destroy(&q->slock);
    close(q->efd);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->olock);
    pthread_cond_destroy(&q->ocond);
    free(q);
}

/* ---- in ---------------------------------------------------------------------- */

int tern_notes_push(struct tern_notes *q, const char *from, const char *name, const char *msg)
{
    char *copy = tern_strdup(msg);
    if (!copy)
        return TERN_ERR_NOMEM;
    pthread_mutex_lock(&q->lock);
    if (q->count == TERN_NOTIFY_QUEUE) { /* full: refuse, the sender hears it */
        q->refused++;
        pthread_mutex_unlock(&q->lock);
        free(copy);
        return TERN_ERR_BUSY;
    }
    tern_notification *n = &q->ring[(q->head + q->count) % TERN_NOTIFY_QUEUE];
    tern_strlcpy(n->from, from, sizeof n->from);
    tern_strlcpy(n->name, name, sizeof n->name);
    n->msg = copy;
    if (q->count++ == 0) {
        uint64_t one = 1;
        if (write(q->efd, &one, sizeof one) < 0) { /* cannot overflow from 0 */
        }
    }
    q->received++;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

uint64_t tern_notes_dropped(struct tern_notes *q)
{
    pthread_mutex_lock(&q->lock);
    uint64_t n = q->refused;
    pthread_mutex_unlock(&q->lock);
    return n;
}

/* Pop the oldest (lock held, count > 0); the eventfd is drained with the
 * last one. */
static tern_notification pop_locked(struct tern_notes *q)
{
    tern_notification n = q->ring[q->head];
    q->head = (q->head + 1) % TERN_NOTIFY_QUEUE;
    if (--q->count == 0) {
        uint64_t v;
        if (read(q->efd, &v, sizeof v) < 0) { /* already drained */
        }
    }
    q->delivered++;
    return n;
}

static void wait_locked(struct tern_notes *q, uint64_t until_ms)
{
    uint64_t step = until_ms ? tern_kit_ms_left(until_ms) : 1000;
    struct timespec ts = tern_kit_deadline_mono((int64_t)step); /* q->cond: monotonic */
    pthread_cond_timedwait(&q->cond, &q->lock, &ts);
}

TERN_EXPORT int tern_notify_recv_wait(tern_engine *e, char *from, size_t fromlen, char *name,
                                      size_t namelen, char *msg, size_t msglen, int timeout_ms)
{
    if (!e)
        return TERN_ERR_INVAL;
    struct tern_notes *q = e->notes;
    uint64_t until = timeout_ms < 0 ? 0 : tern_now_ms() + (uint64_t)timeout_ms;
    tern_gate_waiter w;
    if (timeout_ms != 0 && tern_gate_enter(&e->gate, &w, &q->lock, &q->cond) != 0)
        return tern_engine_fail(e, TERN_ERR_CLOSED,
                                "notify_recv_wait: the engine is closed (tern_engine_close)");
    pthread_mutex_lock(&q->lock);
    while (!q->count && timeout_ms != 0 && (!until || tern_now_ms() < until) &&
           !tern_gate_closed(&e->gate))
        wait_locked(q, until);
    int closed = !q->count && timeout_ms != 0 && tern_gate_closed(&e->gate);
    tern_notification n = {{0}, {0}, NULL};
    if (q->count)
        n = pop_locked(q);
    pthread_mutex_unlock(&q->lock);
    if (closed) /* woken by tern_engine_close; inside the gate, e is still there */
        tern_engine_fail(e, TERN_ERR_CLOSED, "notify_recv_wait: the engine was closed while "
                         "waiting (tern_engine_close from another thread)");
    if (timeout_ms != 0)
        tern_gate_leave(&e->gate, &w); /* e may be freed from here on */
    if (closed)
        return TERN_ERR_CLOSED;
    if (!n.msg)
        return 0;
    if (from && fromlen)
        tern_strlcpy(from, n.from, fromlen);
    if (name && namelen)
        tern_strlcpy(name, n.name, namelen);
    if (msg && msglen)
        tern_strlcpy(msg, n.msg, msglen);
    free(n.msg);
    return 1;
}

TERN_EXPORT int tern_notify_recv(tern_engine *e, char *from, size_t fromlen, char *name,
                                 size_t namelen, char *msg, size_t msglen)
{
    return tern_notify_recv_wait(e, from, fromlen, name, namelen, msg, msglen, 0);
}

TERN_EXPORT int tern_notify_fd(tern_engine *e)
{
    return e ? e->notes->efd : TERN_ERR_INVAL;
}

TERN_EXPORT int tern_notify_stats_get(tern_engine *e, tern_notify_stats *out)
{
    if (!e || !out)
        return TERN_ERR_INVAL;
    struct tern_notes *q = e->notes;
    pthread_mutex_lock(&q->lock);
    out->received = q->received;
    out->delivered = q->delivered;
    out->refused = q->refused;
    out->queued = q->count;
    pthread_mutex_unlock(&q->lock);
    out->sent = atomic_load(&q->sent);
    out->send_failed = atomic_load(&q->send_failed);
    return 0;
}

/* ---- out --------------------------------------------------------------------- */

/* The daemon's answer: {"ok": true}, or {"reply_msg": why, "busy": true}
 * when its queue is full (docs/protocol.md, Notify). */
static int parse_reply(const char *reply, const char *peer, char *err, size_t errlen)
{
    json_object *o = reply ? json_tokener_parse(reply) : NULL;
    json_object *v;
    int rc = 0;
    if (o && json_object_object_get_ex(o, "ok", &v) && json_object_get_boolean(v)) {
        rc = 0;
    } else if (o && json_object_object_get_ex(o, "notify_msg", &v) &&
               strcmp(json_object_get_string(v), "success") == 0) {
        rc = 0; /* a Mooncake engine's answer (docs/protocol.md, Mooncake compatibility) */
    } else if (o && json_object_object_get_ex(o, "busy", &v) && json_object_get_boolean(v)) {
        json_object_object_get_ex(o, "reply_msg", &v);
        rc = tern_errf(err, errlen, TERN_ERR_BUSY, "notify to %s: refused: %s", peer,
                       v ? json_object_get_string(v) : "its queue is full");
    } else {
        const char *why = o && json_object_object_get_ex(o, "reply_msg", &v)
                              ? json_object_get_string(v)
                              : "an unexpected reply";
        rc = tern_errf(err, errlen, TERN_ERR_PROTOCOL, "notify to %s: %s", peer, why);
    }
    json_object_put(o);
    return rc;
}

static tern_nsession *session_get(struct tern_notes *q, const char *peer)
{
    pthread_mutex_lock(&q->slock);
    tern_nsession *s = q->sessions;
    while (s && strcmp(s->peer, peer) != 0)
        s = s->next;
    if (!s && (s = calloc(1, sizeof *s)) != NULL) {
        tern_strlcpy(s->peer, peer, sizeof s->peer);
        s->fd = -1;
        pthread_mutex_init(&s->lock, NULL);
        s->next = q->sessions;
        q->sessions = s;
    }
    pthread_mutex_unlock(&q->slock);
    return s;
}

/* One Notify frame on the peer's kept connection (session lock held).  A
 * kept connection the daemon closed while idle (it keeps one for its
 * io_timeout) reads as CLOSED/IO: the daemon never read that request, so
 * it is sent once more on a new connection. */
static int session_send(struct tern_notes *q, tern_nsession *s, const char *txt, char **reply,
                        char *err, size_t errlen)
{
    tern_engine *e = q->e;
    const tern_config *c = e->cfg;
    for (int attempt = 0;; attempt++) {
        int reused = s->fd >= 0;
        if (!reused) {
            s->fd = tern_hs_session_open(e->auth, s->peer, c->connect_timeout_ms,
                                         c->io_timeout_ms, c->handshake_max_frame, err, errlen);
            if (s->fd < 0) {
                int rc = s->fd;
                s->fd = -1;
                return rc;
            }
            atomic_fetch_add(&q->connects, 1);
        }
        size_t rlen = 0;
        int rc = tern_hs_session_request(s->fd, s->peer, TERN_HS_NOTIFY, txt, strlen(txt), reply,
                                         &rlen, c->handshake_max_frame, c->io_timeout_ms, err,
                                         errlen);
        if (rc == 0)
            return 0;
        close(s->fd);
        s->fd = -1;
        if (!reused || attempt > 0 || (rc != TERN_ERR_CLOSED && rc != TERN_ERR_IO))
            return rc;
    }
}

int tern_notes_deliver(struct tern_notes *q, const char *peer, const char *name,
                       const char *msg, char *err, size_t errlen)
{
    tern_engine *e = q->e;
    tern_nsession *s = session_get(q, peer);
    if (!s)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "notify: out of memory");
    json_object *o = json_object_new_object();
    json_object_object_add(o, "from", json_object_new_string(e->server_name));
    json_object_object_add(o, "name", json_object_new_string(name));
    /* Mooncake's key for the message: tern and Mooncake receivers both read
     * it (docs/protocol.md, Mooncake compatibility) */
    json_object_object_add(o, "notify_msg", json_object_new_string(msg));
    const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    char *reply = NULL;
    pthread_mutex_lock(&s->lock);
    int rc = session_send(q, s, txt, &reply, err, errlen);
    pthread_mutex_unlock(&s->lock);
    json_object_put(o);
    if (rc == 0)
        rc = parse_reply(reply, peer, err, errlen);
    free(reply);
    atomic_fetch_add(rc ? &q->send_failed : &q->sent, 1);
    return rc;
}

uint64_t tern_notes_connects(struct tern_notes *q) { return atomic_load(&q->connects); }

static int check_args(tern_engine *e, const char *name, const char *msg)
{
    if (!name || !msg || strlen(msg) > TERN_NOTIFY_MAX || strlen(name) > 255)
        return tern_engine_fail(e, TERN_ERR_INVAL,
                                "notify_send: name (<= 255 bytes) and msg (<= %d bytes) needed%s",
                                TERN_NOTIFY_MAX, msg && strlen(msg) > TERN_NOTIFY_MAX
                                                     ? ": msg is longer" : "");
    return 0;
}

TERN_EXPORT int tern_notify_send(tern_engine *e, tern_segment_id id, const char *name,
                                 const char *msg)
{
    tern_segment *s = e ? tern_segments_get(&e->segs, id) : NULL;
    if (!s)
        return e ? tern_engine_fail(e, TERN_ERR_NOT_FOUND, "notify_send: no open segment %d",
                                    (int)id)
                 : TERN_ERR_INVAL;
    int rc = check_args(e, name, msg);
    if (rc)
        return rc;
    char err[TERN_ERRMSG_MAX] = "";
    rc = tern_notes_deliver(e->notes, s->name, name, msg, err, sizeof err);
    return rc ? tern_engine_fail(e, rc, "notify_send to %s: %s", s->name, err) : 0;
}

/* ---- the outbox: batch notifications, sent in order by one thread ------------ */

static void *sender_main(void *arg)
{
    struct tern_notes *q = arg;
    pthread_mutex_lock(&q->olock);
    for (;;) {
        while (!q->ohead && !q->ostop)
            pthread_cond_wait(&q->ocond, &q->olock);
        if (q->ostop)
            break;
        tern_outmsg *m = q->ohead;
        q->ohead = m->next;
        if (!q->ohead)
            q->otail = NULL;
        pthread_mutex_unlock(&q->olock);
        char err[TERN_ERRMSG_MAX] = "";
        int rc = tern_notes_deliver(q, m->peer, m->name, m->msg, err, sizeof err);
        m->done(m->arg, m->note, rc, err);
        outmsg_free(m);
        pthread_mutex_lock(&q->olock);
    }
    pthread_mutex_unlock(&q->olock);
    return NULL;
}

int tern_notes_post(struct tern_notes *q, const char *peer, const char *name, const char *msg,
                    tern_notes_done_fn done, void *arg, size_t note)
{
    tern_outmsg *m = calloc(1, sizeof *m);
    if (m) {
        m->peer = tern_strdup(peer);
        m->name = tern_strdup(name);
        m->msg = tern_strdup(msg);
    }
    if (!m || !m->peer || !m->name || !m->msg) {
        if (m)
            outmsg_free(m);
        return TERN_ERR_NOMEM;
    }
    m->done = done;
    m->arg = arg;
    m->note = note;
    pthread_mutex_lock(&q->olock);
    if (q->ostop) {
        pthread_mutex_unlock(&q->olock);
        outmsg_free(m);
        return TERN_ERR_CLOSED;
    }
    if (!q->sender_running) {
        if (pthread_create(&q->sender, NULL, sender_main, q) != 0) {
            pthread_mutex_unlock(&q->olock);
            outmsg_free(m);
            return TERN_ERR_IO;
        }
        q->sender_running = 1;
    }
    if (q->otail)
        q->otail->next = m;
    else
        q->ohead = m;
    q->otail = m;
    pthread_cond_signal(&q->ocond);
    pthread_mutex_unlock(&q->olock);
    return 0;
}
