/* core/datapath/batch_ctl.c: what an application does with a batch
 * besides submit and wait: an eventfd for event loops, reset for reuse,
 * cancel, a notification that rides on requests, and the one-request
 * synchronous call (see docs/api.md, Batches).  The top of the data path:
 * built on batch.c (alloc, submit, wait); the batch state the completion
 * path changes is in batch_state.c, at the bottom. */
#include "datapath/batch_state.h"
#include "datapath/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine_error.h"
#include "engine/notify.h"
#include "base/util.h"
#include "tern/plugin_kit.h"

TERN_EXPORT int tern_batch_fd(tern_batch *b)
{
    if (!b)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    if (b->efd < 0)
        b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int fd = b->efd;
    pthread_mutex_unlock(&b->lock);
    return fd >= 0 ? fd : tern_engine_fail(b->e, TERN_ERR_IO, "batch_fd: eventfd failed");
}

TERN_EXPORT long tern_batch_inflight(tern_batch *b)
{
    if (!b)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    long n = b->inflight;
    pthread_mutex_unlock(&b->lock);
    return n;
}

TERN_EXPORT int tern_batch_reset(tern_batch *b)
{
    if (!b)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    size_t busy = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->reqs[i].status == TERN_WAITING || b->reqs[i].status == TERN_PENDING)
            busy++;
    long inflight = b->inflight;
    int notes = b->notes_busy;
    if (busy || inflight > 0 || notes) {
        pthread_mutex_unlock(&b->lock);
        return tern_engine_fail(b->e, TERN_ERR_BUSY,
                                "batch_reset: %zu request(s) not finished, %ld slice(s) still "
                                "held, %d notification(s) not sent; wait first",
                                busy, inflight, notes);
    }
    for (size_t i = 0; i < b->n; i++) {
        free(b->reqs[i].errmsg);
        b->reqs[i].errmsg = NULL;
    }
    b->n = 0;
    b->open = 0;
    tern_stats_flush(b->e->stats, &b->acc);
    tern_batch_notes_clear_locked(b);
    tern_batch_drain_fd_locked(b);
    pthread_mutex_unlock(&b->lock);
    return 0;
}

TERN_EXPORT int tern_batch_cancel(tern_batch *b)
{
    if (!b)
        return TERN_ERR_INVAL;
    int n = 0;
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->n; i++) {
        tern_req *q = &b->reqs[i];
        if (!tern_req_active_locked(q))
            continue;
        /* Published at once, like TIMEOUT: slices still held are ignored
         * when they come back (complete.c checks the request is active) and
         * reset/free wait for them (inflight). */
        tern_req_fail_locked(b, i, TERN_CANCELED, TERN_ERR_CANCELED,
                             "canceled by tern_batch_cancel (%llu of %llu bytes done)",
                             (unsigned long long)q->transferred,
                             (unsigned long long)q->r.length);
        n++;
    }
    pthread_mutex_unlock(&b->lock);
    tern_dpq_kick(b->e->dp); /* workers drop queued slices of ended requests */
    return n;
}

/* ---- notifications riding on requests ------------------------------------------ */

TERN_EXPORT int tern_batch_submit_with_notify(tern_batch *b, const tern_request *reqs, size_t n,
                                              tern_segment_id seg, const char *name,
                                              const char *msg)
{
    if (!b)
        return TERN_ERR_INVAL;
    tern_engine *e = b->e;
    if (!n || !reqs)
        return tern_engine_fail(e, TERN_ERR_INVAL, "batch_submit_with_notify: no requests");
    if (tern_gate_closed(&e->gate))
        return tern_engine_fail(e, TERN_ERR_CLOSED, "batch_submit_with_notify: the engine is "
                                "closed (tern_engine_close)");
    tern_segment *sg = tern_segments_get(&e->segs, seg);
    char peer[sizeof sg->name];
    if (sg) {
        pthread_rwlock_rdlock(&sg->lock);
        tern_strlcpy(peer, sg->name, sizeof peer);
        pthread_rwlock_unlock(&sg->lock);
    }
    if (!sg)
        return tern_engine_fail(e, TERN_ERR_NOT_FOUND,
                                "batch_submit_with_notify: no open segment %d", (int)seg);
    if (!name || !msg || strlen(name) > 255 || strlen(msg) > TERN_NOTIFY_MAX)
        return tern_engine_fail(e, TERN_ERR_INVAL,
                                "batch_submit_with_notify: name (<= 255 bytes) and msg (<= %d "
                                "bytes) needed", TERN_NOTIFY_MAX);
    pthread_mutex_lock(&b->lock);
    if (n > b->cap - b->n) {
        size_t have = b->n;
        pthread_mutex_unlock(&b->lock);
        return tern_engine_fail(e, TERN_ERR_INVAL,
                                "batch_submit_with_notify: batch full (capacity %zu, %zu "
                                "submitted, %zu more)", b->cap, have, n);
    }
    tern_bnote *nn = realloc(b->notes, (b->nnotes + 1) * sizeof *nn);
    if (nn)
        b->notes = nn;
    char *nm = tern_strdup(name), *ms = tern_strdup(msg);
    if (!nn || !nm || !ms) {
        pthread_mutex_unlock(&b->lock);
        free(nm);
        free(ms);
        return tern_engine_fail(e, TERN_ERR_NOMEM, "batch_submit_with_notify: out of memory");
    }
    tern_bnote *nt = &b->notes[b->nnotes];
    memset(nt, 0, sizeof *nt);
    nt->first = b->n;
    nt->count = nt->left = n;
    nt->seg = seg;
    tern_strlcpy(nt->peer, peer, sizeof nt->peer);
    nt->name = nm;
    nt->msg = ms;
    nt->state = 1;
    b->notes_busy++;
    b->pending_note = (int)b->nnotes++;
    pthread_mutex_unlock(&b->lock);
    /* tern_batch_submit marks the requests it appends with pending_note. */
    int rc = tern_batch_submit(b, reqs, n);
    return rc;
}

TERN_EXPORT int tern_batch_notify_error(tern_batch *b, char *why, size_t whylen)
{
    if (!b)
        return TERN_ERR_INVAL;
    int rc = 0;
    const char *msg = "";
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->nnotes && rc == 0; i++) {
        if (b->notes[i].state < 0) {
            rc = b->notes[i].state;
            msg = b->notes[i].why ? b->notes[i].why : "";
        } else if (b->notes[i].state > 0) {
            rc = 1;
            msg = "pending";
        }
    }
    if (why && whylen)
        tern_strlcpy(why, msg, whylen);
    pthread_mutex_unlock(&b->lock);
    return rc;
}

/* ---- one request ---------------------------------------------------------------- */

/* Wait until no slice of b is held (after a cancel). */
static void wait_slices(tern_batch *b)
{
    pthread_mutex_lock(&b->lock);
    while (b->inflight > 0) {
        struct timespec ts = tern_kit_deadline_mono(100); /* b->cond: monotonic */
        pthread_cond_timedwait(&b->cond, &b->lock, &ts);
    }
    pthread_mutex_unlock(&b->lock);
}

TERN_EXPORT int tern_transfer_sync(tern_engine *e, tern_opcode op, void *local,
                                   tern_segment_id seg, uint64_t remote, uint64_t length,
                                   int timeout_ms)
{
    if (!e)
        return TERN_ERR_INVAL;
    /* Inside the gate for the whole call: tern_engine_close wakes the wait
     * below and returns once the slices are back and this call is done. */
    tern_gate_waiter w;
    if (tern_gate_enter(&e->gate, &w, NULL, NULL) != 0)
        return tern_engine_fail(e, TERN_ERR_CLOSED, "transfer_sync: the engine is closed "
                                "(tern_engine_close)");
    tern_batch *b = tern_batch_alloc(e, 1);
    if (!b) {
        tern_gate_leave(&e->gate, &w);
        return TERN_ERR_NOMEM;
    }
    tern_request r = {op, local, seg, remote, length, 0};
    int rc = tern_batch_submit(b, &r, 1);
    if (rc >= 0)
        rc = tern_batch_wait(b, timeout_ms);
    if (rc == TERN_ERR_TIMEOUT || rc == TERN_ERR_CLOSED) {
        tern_batch_cancel(b);
        if (rc == TERN_ERR_TIMEOUT)
            tern_engine_fail(e, rc, "transfer_sync: %s of %llu bytes did not finish within "
                             "%d ms (canceled)", op == TERN_READ ? "READ" : "WRITE",
                             (unsigned long long)length, timeout_ms);
        else
            tern_engine_fail(e, rc, "transfer_sync: the engine was closed (tern_engine_close) "
                             "before the %s of %llu bytes finished (canceled)",
                             op == TERN_READ ? "READ" : "WRITE", (unsigned long long)length);
    } else if (rc < 0) {
        char msg[TERN_ERRMSG_MAX];
        tern_strlcpy(msg, tern_batch_error(b, 0), sizeof msg);
        tern_engine_fail(e, rc, "transfer_sync: %s", msg[0] ? msg : tern_engine_last_error(e));
    }
    wait_slices(b); /* the memory is the caller's again when this returns */
    tern_batch_free(b);
    tern_gate_leave(&e->gate, &w);
    return rc < 0 ? rc : 0;
}
