/* core/datapath/batch.c: the batch API: submit (validate, cut, dispatch
 * on the calling thread, never waiting for a peer), state, wait, free.
 * What happens to slices afterwards: dispatch.c, complete.c. */
#include "datapath/request.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datapath/batch.h"
#include "datapath/batch_state.h"
#include "datapath/cut.h"
#include "datapath/dispatch.h"
#include "engine/engine_error.h"
#include "base/util.h"
#include "tern/plugin_kit.h"

TERN_EXPORT tern_batch *tern_batch_alloc(tern_engine *e, size_t capacity)
{
    if (!e)
        return NULL;
    if (capacity == 0 || capacity > (1u << 24)) {
        tern_engine_fail(e, TERN_ERR_INVAL, "batch_alloc: capacity %zu, expected 1..%u",
                         capacity, 1u << 24);
        return NULL;
    }
    tern_batch *b = calloc(1, sizeof *b);
    if (b)
        b->reqs = calloc(capacity, sizeof *b->reqs);
    if (!b || !b->reqs) {
        free(b);
        tern_engine_fail(e, TERN_ERR_NOMEM, "batch_alloc: out of memory for %zu requests",
                         capacity);
        return NULL;
    }
    b->e = e;
    b->cap = capacity;
    b->efd = -1;
    b->pending_note = -1;
    pthread_mutex_init(&b->lock, NULL);
    tern_kit_cond_init_mono(&b->cond);
    return b;
}

/* ---- submit ------------------------------------------------------------------------ */

/* Validate and cut request idx; its slices go to l (or one uncut slice
 * when the descriptor must be refetched first).  t0: the submit's time
 * for the latency statistics (one clock read per call, not per request). */
static void req_start(tern_batch *b, size_t idx, tern_cut_list *l, uint64_t t0)
{
    tern_req *q = &b->reqs[idx];
    tern_segment *seg = NULL;
    char msg[768] = "";
    int rc = tern_cut_validate(b->e, &q->r, &seg, msg, sizeof msg);
    int n = rc;
    if (rc == TERN_CUT_REFETCH) { /* a worker refetches, then cuts */
        tern_cslice *cs = tern_cut_whole(b, idx, seg);
        n = cs && tern_cut_list_add(l, cs) == 0 ? 1 : TERN_ERR_NOMEM;
        if (n < 0)
            free(cs);
        else
            cs->failed_ns = tern_now_ns();
    } else if (rc == 0) {
        n = tern_cut(b, idx, seg, l);
    }
    pthread_mutex_lock(&b->lock);
    q->st = seg ? atomic_load_explicit(&seg->stats, memory_order_relaxed) : NULL;
    if (n < 0) {
        tern_req_fail_locked(b, idx, TERN_INVALID, n, "%s",
                             rc < 0 ? msg : "registered memory changed during the cut");
    } else {
        q->started = 1;
        q->start_ns = t0;
        q->status = TERN_PENDING;
        q->nslices = rc == TERN_CUT_REFETCH ? 0 : n;
        q->live = n;
        q->deadline_ms = q->r.timeout_ms ? tern_now_ms() + q->r.timeout_ms : 0;
        b->inflight += n;
    }
    pthread_mutex_unlock(&b->lock);
}

/* The requests that completed inside the submit get its duration as
 * their latency (tern_stats_defer); a batch that has ended is flushed.
 * No lock unless some did (pend: see request.h). */
static void submit_done(tern_batch *b, uint64_t t0)
{
    atomic_store_explicit(&b->submitting, 0, memory_order_relaxed);
    if (!b->pend.n)
        return;
    pthread_mutex_lock(&b->lock);
    tern_stats_resolve(b->e->stats, &b->pend, &b->acc, t0);
    if (b->open == 0)
        tern_stats_flush(b->e->stats, &b->acc);
    pthread_mutex_unlock(&b->lock);
}

TERN_EXPORT int tern_batch_submit(tern_batch *b, const tern_request *reqs, size_t n)
{
    if (!b)
        return TERN_ERR_INVAL;
    if (!reqs && n)
        return tern_engine_fail(b->e, TERN_ERR_INVAL, "batch_submit: reqs is NULL");
    if (tern_gate_closed(&b->e->gate))
        return tern_engine_fail(b->e, TERN_ERR_CLOSED, "batch_submit: the engine is closed "
                                "(tern_engine_close)");
    uint64_t t0 = tern_stats_now(b->e->stats);
    pthread_mutex_lock(&b->lock);
    if (n > b->cap - b->n) {
        size_t have = b->n;
        pthread_mutex_unlock(&b->lock);
        return tern_engine_fail(b->e, TERN_ERR_INVAL,
                                "batch_submit: batch full (capacity %zu, %zu submitted, %zu more)",
                                b->cap, have, n);
    }
    size_t base = b->n;
    for (size_t i = 0; i < n; i++) {
        memset(&b->reqs[base + i], 0, sizeof b->reqs[0]);
        b->reqs[base + i].r = reqs[i];
        b->reqs[base + i].status = TERN_WAITING;
        b->reqs[base + i].note = b->pending_note;
        b->reqs[base + i].xport = -1;
    }
    b->pending_note = -1; /* one submit carries a note (batch_ctl.c) */
    b->n += n;
    b->open += n;
    b->submitter = pthread_self();
    b->submit_t0 = t0;
    atomic_store_explicit(&b->submitting, t0 != 0, memory_order_relaxed); /* 0: not counting */
    pthread_mutex_unlock(&b->lock);
    tern_cut_list l = {0};
    tern_stat_set *st = NULL;
    uint64_t started = 0; /* a run of requests to one peer: one add */
    for (size_t i = 0; i < n; i++) {
        req_start(b, base + i, &l, t0);
        tern_req *q = &b->reqs[base + i]; /* st, started: set by req_start, fixed after */
        if (!q->started)
            continue;
        if (started && q->st != st) {
            tern_stats_started(b->e->stats, st, started);
            started = 0;
        }
        st = q->st;
        started++;
    }
    tern_stats_started(b->e->stats, st, started);
    tern_dispatch(b->e, l.v, l.n, 0);
    free(l.v);
    submit_done(b, t0);
    return (int)n;
}

/* ---- state, wait, free ------------------------------------------------------------ */

static void timeouts_locked(tern_batch *b)
{
    uint64_t now = tern_now_ms();
    for (size_t i = 0; i < b->n; i++) {
        tern_req *q = &b->reqs[i];
        if (q->status == TERN_PENDING && !q->ending && q->deadline_ms && now >= q->deadline_ms)
            tern_req_fail_locked(b, i, TERN_TIMEOUT, TERN_ERR_TIMEOUT,
                                 "request timed out after %u ms (%llu of %llu bytes done)",
                                 q->r.timeout_ms, (unsigned long long)q->transferred,
                                 (unsigned long long)q->r.length);
    }
}

TERN_EXPORT int tern_batch_state(tern_batch *b, size_t index, tern_request_state *out)
{
    if (!b || !out)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    if (index >= b->n) {
        size_t have = b->n;
        pthread_mutex_unlock(&b->lock);
        return tern_engine_fail(b->e, TERN_ERR_INVAL, "batch_state: index %zu, %zu submitted",
                                index, have);
    }
    timeouts_locked(b);
    out->status = b->reqs[index].status;
    out->transferred = b->reqs[index].transferred;
    out->error = b->reqs[index].error;
    pthread_mutex_unlock(&b->lock);
    return 0;
}

/* The earliest deadline among pending requests and `until` (0 = none). */
static uint64_t next_wake_locked(tern_batch *b, uint64_t until, int *pending)
{
    *pending = 0;
    for (size_t i = 0; i < b->n; i++) {
        tern_req *q = &b->reqs[i];
        if (q->status != TERN_PENDING && q->status != TERN_WAITING)
            continue;
        *pending = 1;
        if (q->deadline_ms && (!until || q->deadline_ms < until))
            until = q->deadline_ms;
    }
    return until;
}

static void wait_until_locked(tern_batch *b, uint64_t ms)
{
    uint64_t step = ms ? tern_kit_ms_left(ms) : 0;
    step = !step || step > 100 ? 100 : step; /* re-check deadlines at least every 100 ms */
    struct timespec ts = tern_kit_deadline_mono((int64_t)step); /* b->cond: monotonic */
    pthread_cond_timedwait(&b->cond, &b->lock, &ts);
}

static int result_locked(tern_batch *b)
{
    for (size_t i = 0; i < b->nnotes; i++)
        if (b->notes[i].state < 0) {
            /* the requests completed, the notification did not get through */
            int all = 1;
            for (size_t k = 0; k < b->notes[i].count; k++)
                all &= b->reqs[b->notes[i].first + k].status == TERN_COMPLETED;
            if (all)
                return tern_engine_fail(b->e, b->notes[i].state, "notification %zu: %s", i,
                                        b->notes[i].why ? b->notes[i].why : "failed");
        }
    for (size_t i = 0; i < b->n; i++) {
        const tern_req *q = &b->reqs[i];
        if (q->status == TERN_COMPLETED)
            continue;
        tern_engine_fail(b->e, q->error ? q->error : TERN_ERR_INVAL, "request %zu: %s", i,
                         q->errmsg ? q->errmsg : "failed");
        return q->error ? q->error : TERN_ERR_INVAL;
    }
    return 0;
}

TERN_EXPORT int tern_batch_wait(tern_batch *b, int timeout_ms)
{
    if (!b)
        return TERN_ERR_INVAL;
    uint64_t until = timeout_ms < 0 ? 0 : tern_now_ms() + (uint64_t)timeout_ms;
    tern_gate *g = &b->e->gate;
    tern_gate_waiter w;
    int entered = timeout_ms != 0 && tern_gate_enter(g, &w, &b->lock, &b->cond) == 0;
    int rc = 1;
    pthread_mutex_lock(&b->lock);
    while (rc == 1) {
        timeouts_locked(b);
        int pending;
        uint64_t wake = next_wake_locked(b, until, &pending);
        if (!pending && !b->notes_busy) /* a notification riding on it counts */
            rc = result_locked(b);
        else if (tern_gate_closed(g)) /* tern_engine_close: nobody may block here */
            rc = tern_engine_fail(b->e, TERN_ERR_CLOSED,
                                  "batch_wait: the engine was closed (tern_engine_close) with "
                                  "requests or a notification of this batch still running");
        else if (until && tern_now_ms() >= until)
            rc = tern_engine_fail(b->e, TERN_ERR_TIMEOUT, "batch_wait: %d ms passed",
                                  timeout_ms);
        else
            wait_until_locked(b, wake);
    }
    if (rc != TERN_ERR_TIMEOUT && rc != TERN_ERR_CLOSED)
        tern_batch_drain_fd_locked(b);
    pthread_mutex_unlock(&b->lock);
    if (entered)
        tern_gate_leave(g, &w);
    return rc;
}

TERN_EXPORT const char *tern_batch_error(tern_batch *b, size_t index)
{
    if (!b)
        return "";
    pthread_mutex_lock(&b->lock); /* set once; lives as long as the batch */
    const char *m = index < b->n && b->reqs[index].errmsg ? b->reqs[index].errmsg : "";
    pthread_mutex_unlock(&b->lock);
    return m;
}

TERN_EXPORT size_t tern_batch_size(const tern_batch *b) { return b ? b->n : 0; }

TERN_EXPORT int tern_batch_free(tern_batch *b)
{
    if (!b)
        return 0;
    pthread_mutex_lock(&b->lock);
    long inflight = b->inflight;
    int notes = b->notes_busy;
    if (inflight <= 0 && !notes)
        tern_batch_release_locked(b);
    pthread_mutex_unlock(&b->lock);
    if (inflight > 0 || notes)
        return tern_engine_fail(b->e, TERN_ERR_BUSY,
                                "batch_free: %ld slice(s) still in flight, %d notification(s) "
                                "not sent; wait first", inflight, notes);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    for (size_t i = 0; i < b->n; i++)
        free(b->reqs[i].errmsg);
    free(b->reqs);
    free(b);
    return 0;
}

int tern_batch_slice_count(tern_batch *b, size_t index)
{
    if (!b || index >= b->n)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    int n = b->reqs[index].nslices;
    pthread_mutex_unlock(&b->lock);
    return n;
}
