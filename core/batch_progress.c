/* core/batch_progress.c: the slice life cycle after the cut.
 *
 * prepare: path choice (tern_path_choose with the slice's attempt number as
 * retry count) and an endpoint; a failure moves to the next path, up to
 * `retries` times.  One progress thread per transport polls completions:
 * success adds the slice's bytes to its request; failure drops the
 * endpoint when the error is a device or connection one (a retry then
 * builds a fresh one), marks a local device down for TERN_ERR_DEVICE, and
 * queues the slice for the transport's retry thread, which chooses the next
 * path (maybe a handshake) and resubmits: the progress thread never blocks.
 * Completions of a request that already ended (timeout, failure) are
 * dropped. */
#include "batch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define POLL_MAX 64
#define POLL_TIMEOUT_MS 20

void tern_req_fail_locked(tern_batch *b, size_t idx, tern_status st, int code,
                          const char *fmt, ...)
{
    tern_req *q = &b->reqs[idx];
    if ((q->status != TERN_PENDING && q->status != TERN_WAITING) || q->ending)
        return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(q->errmsg);
    q->errmsg = strdup(msg); /* NULL on no memory: tern_batch_error then says "" */
    q->error = code;
    /* A FAILED request ends when its last slice is back, so the application
     * never sees a final status while a transport may still touch its
     * memory.  A TIMEOUT is published at once: the caller asked for a
     * deadline; tern_batch_free stays refused until the slices are back. */
    if (q->live > 0 && st == TERN_FAILED) {
        q->ending = st; /* published by the last slice's tern_cslice_free_locked */
        return;
    }
    q->status = st;
    pthread_cond_broadcast(&b->cond);
}

/* Live (neither ended nor ending): its slices may still move data. */
static int req_active_locked(const tern_req *q)
{
    return q->status == TERN_PENDING && !q->ending;
}

void tern_cslice_free_locked(tern_cslice *cs)
{
    tern_batch *b = cs->b;
    tern_req *q = &b->reqs[cs->idx];
    if (cs->ref)
        tern_epstore_release(cs->x->eps, cs->ref);
    free(cs);
    if (--q->live == 0 && q->ending) {
        q->status = q->ending;
        q->ending = 0;
        pthread_cond_broadcast(&b->cond);
    }
    if (--b->inflight == 0)
        pthread_cond_broadcast(&b->cond);
}

static int req_live(tern_cslice *cs)
{
    pthread_mutex_lock(&cs->b->lock);
    int live = req_active_locked(&cs->b->reqs[cs->idx]);
    pthread_mutex_unlock(&cs->b->lock);
    return live;
}

/* One attempt: path and endpoint for the slice's current attempt number. */
static int prepare_once(tern_cslice *cs, char *err, size_t errlen)
{
    tern_engine *e = cs->b->e;
    tern_xport *x = cs->x;
    tern_path path;
    pthread_rwlock_rdlock(&cs->seg->lock);
    if (!cs->seg->desc || cs->seg->gen != cs->seg_gen) {
        pthread_rwlock_unlock(&cs->seg->lock);
        return tern_errf(err, errlen, TERN_ERR_CLOSED, "segment %s was closed", cs->seg->name);
    }
    pthread_rwlock_rdlock(&e->memlock);
    int rc = tern_path_choose(e->local_desc, x->topo, cs->seg->desc, NULL, x->pl->name,
                              (uint64_t)(uintptr_t)cs->s.local, cs->s.remote, cs->s.length,
                              cs->attempt, &path, err, errlen);
    pthread_rwlock_unlock(&e->memlock);
    void *ep = NULL;
    if (rc == 0)
        rc = tern_endpoint_get(x, cs->seg, &path, &ep, &cs->ref, err, errlen);
    pthread_rwlock_unlock(&cs->seg->lock);
    if (rc)
        return rc;
    cs->s.lkey = path.lkey;
    cs->s.rkey = path.rkey;
    cs->s.ep = ep;
    cs->local_dev = path.local_dev;
    tern_strlcpy(cs->peer_nic_path, path.peer_nic_path, sizeof cs->peer_nic_path);
    return 0;
}

static void fail_final(tern_cslice *cs, int code, const char *why)
{
    tern_batch *b = cs->b;
    pthread_mutex_lock(&b->lock);
    tern_req_fail_locked(b, cs->idx, TERN_FAILED, code,
                         "slice at offset %llu (%llu bytes) failed after %d attempt(s): %s (%s)",
                         (unsigned long long)cs->offset, (unsigned long long)cs->s.length,
                         cs->attempt + 1, why, tern_strerror(code));
    tern_cslice_free_locked(cs);
    pthread_mutex_unlock(&b->lock);
}

int tern_cslice_prepare(tern_cslice *cs)
{
    int retries = cs->b->e->cfg->retries;
    char err[512] = "";
    for (;;) {
        if (!req_live(cs)) {
            tern_batch *b = cs->b; /* cs is freed below */
            pthread_mutex_lock(&b->lock);
            tern_cslice_free_locked(cs);
            pthread_mutex_unlock(&b->lock);
            return TERN_ERR_CANCELED;
        }
        int rc = prepare_once(cs, err, sizeof err);
        if (rc == 0)
            return 0;
        if (rc == TERN_ERR_RANGE || rc == TERN_ERR_CLOSED || cs->attempt >= retries) {
            fail_final(cs, rc, err);
            return rc;
        }
        cs->attempt++;
    }
}

/* ---- submission ------------------------------------------------------------------ */

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

void tern_cslice_submit_all(tern_xport *x, void *ep, tern_cslice **cs, int n)
{
    tern_slice *arr[256];
    int done = 0;
    while (done < n) {
        int k = n - done < 256 ? n - done : 256;
        for (int i = 0; i < k; i++)
            arr[i] = &cs[done + i]->s;
        int rc = x->ops->submit(ep, arr, k);
        if (rc == 0 && atomic_load(&x->progress_stop))
            rc = TERN_ERR_CLOSED; /* nobody drains the queue any more */
        if (rc < 0) { /* none taken: each fails and retries on another path */
            for (int i = 0; i < k; i++) {
                cs[done + i]->s.status = rc;
                snprintf(cs[done + i]->s.errmsg, sizeof cs[done + i]->s.errmsg,
                         "%s: submit refused", x->pl->name);
                tern_cslice_done(cs[done + i]);
            }
            rc = k;
        } else if (rc == 0) {
            sleep_us(50); /* the transport's queue is full: let poll drain it */
        }
        done += rc;
    }
}

/* ---- completions ----------------------------------------------------------------- */

static int is_path_error(int code)
{
    return code == TERN_ERR_DEVICE || code == TERN_ERR_CONNECT || code == TERN_ERR_CLOSED ||
           code == TERN_ERR_IO || code == TERN_ERR_TIMEOUT;
}

static void retry_queue(tern_cslice *cs)
{
    tern_xport *x = cs->x;
    pthread_mutex_lock(&x->retry_lock);
    cs->next = x->retry_head;
    x->retry_head = cs;
    pthread_cond_signal(&x->retry_cond);
    pthread_mutex_unlock(&x->retry_lock);
}

static void done_failed(tern_cslice *cs)
{
    tern_xport *x = cs->x;
    int code = cs->s.status;
    if (code == TERN_ERR_DEVICE)
        tern_topology_mark_down(x->topo, cs->local_dev, 1);
    if (is_path_error(code))
        tern_endpoint_drop(x, cs->local_dev, cs->peer_nic_path, cs->s.ep);
    if (cs->ref) {
        tern_epstore_release(x->eps, cs->ref);
        cs->ref = NULL;
    }
    cs->s.ep = NULL; /* the retry chooses a path and an endpoint again */
    if (cs->attempt >= cs->b->e->cfg->retries) {
        fail_final(cs, code, cs->s.errmsg[0] ? cs->s.errmsg : "transport error");
        return;
    }
    cs->attempt++;
    retry_queue(cs);
}

void tern_cslice_done(tern_cslice *cs)
{
    tern_batch *b = cs->b;
    if (cs->s.status != 0) {
        pthread_mutex_lock(&b->lock);
        int live = req_active_locked(&b->reqs[cs->idx]);
        if (!live)
            tern_cslice_free_locked(cs);
        pthread_mutex_unlock(&b->lock);
        if (live)
            done_failed(cs);
        return;
    }
    pthread_mutex_lock(&b->lock);
    tern_req *q = &b->reqs[cs->idx];
    if (req_active_locked(q)) {
        q->transferred += cs->s.length;
        if (q->transferred >= q->r.length) {
            q->status = TERN_COMPLETED;
            pthread_cond_broadcast(&b->cond);
        }
    }
    tern_cslice_free_locked(cs);
    pthread_mutex_unlock(&b->lock);
}

/* The retry thread: path, endpoint (possibly a handshake, which may take
 * up to the I/O timeout) and submit for failed slices, so the progress
 * thread never blocks and completions of other peers keep flowing. */
static void *retry_main(void *arg)
{
    tern_xport *x = arg;
    pthread_mutex_lock(&x->retry_lock);
    while (!atomic_load(&x->progress_stop)) {
        if (!x->retry_head) {
            pthread_cond_wait(&x->retry_cond, &x->retry_lock);
            continue;
        }
        tern_cslice *list = x->retry_head;
        x->retry_head = NULL;
        pthread_mutex_unlock(&x->retry_lock);
        while (list) {
            tern_cslice *cs = list;
            list = cs->next;
            if (tern_cslice_prepare(cs) == 0)
                tern_cslice_submit_all(x, cs->s.ep, &cs, 1);
        }
        pthread_mutex_lock(&x->retry_lock);
    }
    pthread_mutex_unlock(&x->retry_lock);
    return NULL;
}

static void *progress_main(void *arg)
{
    tern_xport *x = arg;
    tern_slice *done[POLL_MAX];
    while (!atomic_load(&x->progress_stop)) {
        int n = x->ops->poll(x->pl->ctx, done, POLL_MAX, POLL_TIMEOUT_MS);
        for (int i = 0; i < n; i++)
            tern_cslice_done(done[i]->core);
        if (n < 0)
            sleep_us(1000);
    }
    return NULL;
}

/* The host service complete(): a transport hands a finished slice back from
 * its own thread (ABI 1.1), with no progress thread in between. */
void tern_slice_complete(tern_slice *s)
{
    tern_cslice_done(s->core);
}

int tern_progress_start(tern_xport *x, char *err, size_t errlen)
{
    pthread_mutex_init(&x->retry_lock, NULL);
    pthread_cond_init(&x->retry_cond, NULL);
    atomic_store(&x->progress_stop, 0);
    x->progress_polls = x->ops->poll != NULL; /* 1.1 plugins may use complete() only */
    if (x->progress_polls && pthread_create(&x->progress, NULL, progress_main, x) != 0)
        return tern_errf(err, errlen, TERN_ERR_IO, "cannot start the %s progress thread",
                         x->pl->name);
    if (pthread_create(&x->retrier, NULL, retry_main, x) != 0) {
        atomic_store(&x->progress_stop, 1);
        if (x->progress_polls)
            pthread_join(x->progress, NULL);
        return tern_errf(err, errlen, TERN_ERR_IO, "cannot start the %s retry thread",
                         x->pl->name);
    }
    x->progress_started = 1;
    return 0;
}

void tern_progress_stop(tern_xport *x)
{
    if (!x->progress_started)
        return;
    atomic_store(&x->progress_stop, 1);
    pthread_mutex_lock(&x->retry_lock);
    pthread_cond_broadcast(&x->retry_cond);
    pthread_mutex_unlock(&x->retry_lock);
    pthread_join(x->retrier, NULL);
    if (x->progress_polls)
        pthread_join(x->progress, NULL);
    x->progress_started = 0;
    pthread_mutex_lock(&x->retry_lock);
    tern_cslice *list = x->retry_head;
    x->retry_head = NULL;
    pthread_mutex_unlock(&x->retry_lock);
    while (list) { /* engine going away: their requests fail */
        tern_cslice *cs = list;
        list = cs->next;
        fail_final(cs, TERN_ERR_CLOSED, "engine destroyed");
    }
    pthread_mutex_destroy(&x->retry_lock);
    pthread_cond_destroy(&x->retry_cond);
}
