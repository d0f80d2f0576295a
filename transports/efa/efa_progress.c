/* transports/efa/efa_progress.c: operations in flight and their
 * completions: the device's in-flight list, the CQ drain, the recycle of a
 * wedged endpoint, and the progress thread that hands each finished slice
 * back through the host service complete(). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "efa_internal.h"

/* ---- completion plumbing ------------------------------------------------- */

/* The slice is the core's again once complete() is called. */
static void efa_done_push(efa_ctx *c, tern_slice *s)
{
    s->plugin[0] = NULL;
    c->host->complete(c->host->host, s);
}

void efa_slice_finish(efa_ctx *c, tern_slice *s, int status, const char *msg)
{
    s->status = status;
    s->transferred = status ? 0 : s->length;
    if (status && msg) {
        /* Truncate quietly: the slice's buffer is fixed by the ABI. */
        size_t n = strnlen(msg, sizeof s->errmsg - 1);
        memcpy(s->errmsg, msg, n);
        s->errmsg[n] = '\0';
    }
    efa_done_push(c, s);
}

void efa_op_link(efa_dev *d, efa_op *op, efa_posting *call)
{
    pthread_mutex_lock(&d->ops_lock);
    call->since_ms = op->posted_ms;
    call->next = d->posting.next;
    call->prev = &d->posting;
    d->posting.next->prev = call;
    d->posting.next = call;
    op->peer = op->ep->peer;
    op->peer->inflight++;
    op->next = d->ops.next;
    op->prev = &d->ops;
    d->ops.next->prev = op;
    d->ops.next = op;
    pthread_mutex_unlock(&d->ops_lock);
}


/* A completion (status 0) or error for op: give the slice back unless it
 * was abandoned, then free the record. */
static efa_peer *efa_op_complete(efa_dev *d, efa_op *op, int status, const char *msg)
{
    tern_slice *s;
    pthread_mutex_lock(&d->ops_lock);
    op->prev->next = op->next;
    op->next->prev = op->prev;
    s = op->slice;
    op->slice = NULL;
    efa_peer *gone = NULL;
    if (op->peer && !op->peer->stale && --op->peer->inflight == 0 && op->peer->refs == 0)
        gone = efa_peer_unlink_locked(d, op->peer);
    pthread_mutex_unlock(&d->ops_lock);
    if (status)
        atomic_fetch_add(&d->failed, 1);
    else
        atomic_fetch_add(&d->completed, 1);
    if (s) {
        atomic_fetch_sub(&d->ctx->inflight, 1);
        efa_slice_finish(d->ctx, s, status, msg);
    }
    free(op);
    return gone; /* the caller removes it once it holds no av_lock */
}

/* Give back (with status) every in-flight slice of ep, or of every endpoint
 * when ep is NULL, or only those older than deadline_ms when it is set. */
int efa_ops_abandon(efa_dev *d, const efa_ep *ep, uint64_t older_than,
                    int status, const char *msg)
{
    int n = 0;
    pthread_mutex_lock(&d->ops_lock);
    for (efa_op *op = d->ops.next; op != &d->ops; op = op->next) {
        if (!op->slice || (ep && op->ep != ep))
            continue;
        if (older_than && op->posted_ms > older_than)
            continue;
        tern_slice *s = op->slice;
        op->slice = NULL;
        if (ep)
            op->ep = NULL;
        atomic_fetch_sub(&d->ctx->inflight, 1);
        atomic_fetch_add(&d->failed, 1);
        efa_slice_finish(d->ctx, s, status, msg);
        n++;
    }
    pthread_mutex_unlock(&d->ops_lock);
    return n;
}

/* A CQ error's tern status.  Connection-level errors are the peer's (the
 * engine drops the endpoint and retries); access errors are final; anything
 * else is the local device's (the engine marks it down). */
static int efa_cq_status(int fi_err)
{
    switch (fi_err) {
    case FI_ECONNRESET: case FI_ECONNREFUSED: case FI_ECONNABORTED: case FI_ECANCELED:
    case FI_ENOTCONN: case FI_EHOSTUNREACH: case FI_ETIMEDOUT: case EPIPE: case FI_EIO: case FI_EREMOTEIO:
    case FI_ESHUTDOWN: case FI_EADDRNOTAVAIL:
        return TERN_ERR_CLOSED;
    case FI_EACCES: case FI_EKEYREJECTED: case FI_EPERM:
        return TERN_ERR_RANGE;
    default:
        return TERN_ERR_DEVICE;
    }
}

/* Read what the CQ has; returns completions handled, 0 when empty.  Called
 * by the progress thread and by submitters that got -FI_EAGAIN. */
int efa_cq_drain(efa_dev *d, int timeout_ms)
{
    struct fi_cq_entry ent[32];
    efa_peer *gone[33];
    int ngone = 0, done = 0;
    ssize_t n;
    /* Completions are handled under the read lock: a recycle (writer)
     * frees the operation records. */
    pthread_rwlock_rdlock(&d->av_lock);
    efa_lock(d);
    if (timeout_ms > 0 && d->cq_waitable && !d->serialise)
        n = fi_cq_sread(d->cq, ent, 32, NULL, timeout_ms);
    else
        n = fi_cq_read(d->cq, ent, 32);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        char text[256];
        memset(&ee, 0, sizeof ee);
        n = fi_cq_readerr(d->cq, &ee, 0);
        efa_unlock(d);
        if (n > 0 && ee.op_context) {
            const char *pe = ee.prov_errno
                                 ? fi_cq_strerror(d->cq, ee.prov_errno, ee.err_data, NULL, 0)
                                 : NULL;
            snprintf(text, sizeof text, "%s: %s (provider: %s)", d->dinfo.name,
                     fi_strerror(ee.err), pe ? pe : "no detail");
            gone[ngone] = efa_op_complete(d, (efa_op *)ee.op_context, efa_cq_status(ee.err),
                                          text);
            ngone += gone[ngone] != NULL;
            done = 1;
        }
    } else {
        efa_unlock(d);
        for (ssize_t i = 0; i < n; i++)
            if (ent[i].op_context) {
                gone[ngone] = efa_op_complete(d, (efa_op *)ent[i].op_context, 0, NULL);
                ngone += gone[ngone] != NULL;
            }
        done = n > 0 ? (int)n : 0;
    }
    pthread_rwlock_unlock(&d->av_lock);
    for (int i = 0; i < ngone; i++)
        efa_peer_remove(d, gone[i]);
    return done;
}


uint64_t efa_dev_stuck_post_ms(efa_dev *d)
{
    uint64_t now = tern_kit_now_ms(), oldest = 0;
    pthread_mutex_lock(&d->ops_lock);
    for (efa_posting *p = d->posting.next; p != &d->posting; p = p->next)
        if (now - p->since_ms > oldest)
            oldest = now - p->since_ms;
    pthread_mutex_unlock(&d->ops_lock);
    return oldest;
}

/* A peer that died with operations in flight can wedge a provider's
 * endpoint for every peer (libfabric 1.17 shm keeps waiting for its
 * answers in order).  Replace the device's CQ, AV and endpoint: in-flight
 * slices fail with TERN_ERR_CLOSED, endpoints of the old generation refuse
 * their slices the same way, and the engine reconnects (new efa_addr). */
static void efa_dev_recycle(efa_dev *d)
{
    char err[256];
    if (d->mr_mode & FI_MR_ENDPOINT) {
        atomic_store(&d->wedged, 0); /* registrations are bound to the endpoint */
        return;
    }
    /* A post that never returns (it spins inside the provider) holds the
     * read lock: the endpoint cannot be replaced under it.  Give up for
     * now rather than stop the progress thread, which keeps serving the
     * other peers and failing the timed-out operations. */
    struct timespec until = tern_kit_deadline(200);
    if (pthread_rwlock_timedwrlock(&d->av_lock, &until) != 0) {
        uint64_t stuck = efa_dev_stuck_post_ms(d), now = tern_kit_now_ms();
        if (now - d->stuck_logged_ms >= 10000) {
            d->stuck_logged_ms = now;
            efa_log(d->ctx, TERN_LOG_ERROR, "%s: a post has been inside the provider for %llu "
                    "ms (libfabric's shm spins on a lock its dead peer held): the device "
                    "cannot be recycled; transfers on it fail by timeout",
                    d->dinfo.name, (unsigned long long)stuck);
        }
        return;
    }
    efa_lock(d);
    efa_ops_abandon(d, NULL, 0, TERN_ERR_CLOSED, "device endpoint recycled: a peer stopped "
                    "answering");
    efa_dev_close_ep(d);
    pthread_mutex_lock(&d->ops_lock);
    for (efa_op *op = d->ops.next, *n; op != &d->ops; op = n) {
        n = op->next;
        free(op);
    }
    d->ops.next = d->ops.prev = &d->ops;
    for (efa_peer *p = d->peers, *n; p; p = n) {
        n = p->next;
        p->stale = 1;
        p->inflight = 0;
        p->next = NULL;
        if (p->refs == 0)
            efa_peer_free(p);
    }
    d->peers = NULL;
    pthread_mutex_unlock(&d->ops_lock);
    int rc = efa_dev_open_ep(d, err, sizeof err);
    atomic_fetch_add(&d->gen, 1);
    atomic_fetch_add(&d->recycles, 1);
    atomic_store(&d->wedged, rc != 0);
    efa_unlock(d);
    pthread_rwlock_unlock(&d->av_lock);
    efa_log(d->ctx, rc ? TERN_LOG_ERROR : TERN_LOG_WARN, "%s: endpoint recycled%s%s",
            d->dinfo.name, rc ? ": " : " after a peer stopped answering", rc ? err : "");
}

/* Progress thread: keeps the provider moving (manual data progress, also as
 * a passive target), parks completions, and times out lost operations. */
/* A progress call longer than this did a peer's work (an empty one costs
 * well under a microsecond); after work, yield rather than sleep for a
 * while: a sleep costs tens of microseconds per step of the peer's
 * protocol (shm's segmented READ takes several). */
#define EFA_BUSY_CALL_US 4
#define EFA_LINGER_MS 2

void *efa_progress_main(void *arg)
{
    efa_dev *d = arg;
    efa_ctx *c = d->ctx;
    uint64_t next_check = tern_kit_now_ms() + 100, last_work = tern_kit_now_ms();
    while (!atomic_load(&c->stop)) {
        uint64_t t0 = tern_kit_now_us();
        int got = efa_cq_drain(d, 50);
        uint64_t now = tern_kit_now_ms();
        /* Without a wait object a passive target sees no completion of its
         * own: a progress call that took long did work for a peer (shm
         * copies inside it), so keep polling hard while that goes on. */
        int busy = !d->cq_waitable && tern_kit_now_us() - t0 > EFA_BUSY_CALL_US;
        if (got || busy || atomic_load(&c->inflight) > 0) {
            last_work = now;
            if (!got && (!d->cq_waitable || d->serialise))
                sched_yield();
        } else if ((!d->cq_waitable || d->serialise) && now - last_work < EFA_LINGER_MS) {
            sched_yield(); /* a peer's next command is likely microseconds away */
        } else if (!d->cq_waitable || d->serialise) {
            /* No wait object: keep polling (a passive target must progress
             * too) but back off the longer we are idle. */
            struct timespec ts = {0, now - last_work > 1000 ? 200000 : 20000};
            nanosleep(&ts, NULL);
        }
        if (atomic_load(&d->wedged))
            efa_dev_recycle(d);
        if (now >= next_check) {
            next_check = now + 100;
            if (c->timeout_ms > 0 && now > (uint64_t)c->timeout_ms)
                if (efa_ops_abandon(d, NULL, now - (uint64_t)c->timeout_ms, TERN_ERR_TIMEOUT,
                                    "no completion within the I/O timeout: is the peer "
                                    "alive?"))
                    atomic_store(&d->wedged, 1);
        }
    }
    return NULL;
}
