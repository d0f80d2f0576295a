/* core/datapath/dispatch.c: submit to transports, and the workers (see
 * dispatch.h). */
#include "datapath/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datapath/complete.h"
#include "base/log.h"
#include "datapath/cut.h"
#include "datapath/heal.h"
#include "datapath/route.h"
#include "datapath/stall.h"
#include "datapath/stage.h"
#include "base/util.h"

#define WORKER_WAKE_MS 100 /* workers also reap released endpoints this often */

/* ---- submit ------------------------------------------------------------------------ */

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

#define APP_FULL_SPIN_US 1000 /* the application thread waits this long for a full
                                 transport queue, then leaves the rest to a worker */

/* Route again later (a worker): the slice gives its endpoint back. */
static void requeue(tern_engine *e, tern_cslice *cs)
{
    if (cs->ref) {
        tern_epstore_release(cs->x->eps, cs->ref);
        cs->ref = NULL;
    }
    cs->s.ep = NULL;
    tern_dpq_push(e->dp, cs, 0);
}

/* n routed slices of one endpoint; each is handed to the transport,
 * completed as refused, or (application thread, transport queue full for
 * long) left to a worker, so one saturated peer does not hold a submit to
 * another for long. */
static void submit_group(tern_engine *e, tern_xport *x, void *ep, tern_cslice **cs, int n,
                         int worker)
{
    tern_slice *arr[256];
    int done = 0, spun_us = 0;
    /* The slices hold the endpoint, but a transport may complete every one
     * of them inside submit() (and the last hold may then close it): keep
     * one of our own until we stop calling it. */
    tern_ep_ref *hold = n > 0 ? cs[0]->ref : NULL;
    tern_epstore_hold(hold);
    while (done < n) {
        int k = n - done < 256 ? n - done : 256;
        for (int i = 0; i < k; i++)
            arr[i] = &cs[done + i]->s;
        int rc = x->ops->submit(ep, arr, k);
        if (rc < 0) { /* none taken: each fails and is healed like any failure */
            for (int i = 0; i < k; i++) {
                cs[done + i]->s.status = rc;
                snprintf(cs[done + i]->s.errmsg, sizeof cs[done + i]->s.errmsg,
                         "%s: submit refused", x->pl->name);
                tern_cslice_done(cs[done + i]);
            }
            rc = k;
        } else if (rc == 0 && !worker && spun_us >= APP_FULL_SPIN_US) {
            for (int i = done; i < n; i++)
                requeue(e, cs[i]);
            break;
        } else if (rc == 0) {
            sleep_us(50); /* the transport's queue is full: it drains on its own */
            spun_us += 50;
        } else {
            spun_us = 0;
        }
        done += rc;
    }
    tern_epstore_release_deferred(x->eps, hold);
}

/* The stager hands a slice back once its bytes are in a staging buffer. */
static void stage_submit(tern_cslice *cs)
{
    submit_group(cs->b->e, cs->x, cs->s.ep, &cs, 1, 1);
}

static int by_endpoint(const void *a, const void *b)
{
    const tern_cslice *x = *(tern_cslice *const *)a, *y = *(tern_cslice *const *)b;
    if (x->x != y->x)
        return x->x < y->x ? -1 : 1;
    if (x->s.ep != y->s.ep)
        return (uintptr_t)x->s.ep < (uintptr_t)y->s.ep ? -1 : 1;
    return 0;
}

/* ---- route failures ------------------------------------------------------------------ */

/* worker: 0 on the application thread, where healing only queues (heal.h). */
static void route_failed(tern_engine *e, tern_cslice *cs, int rc, const char *err, int worker)
{
    if (rc == TERN_ROUTE_SEG_CLOSED) {
        tern_cslice_fail(cs, TERN_ERR_CLOSED, err);
        return;
    }
    if (cs->ref) { /* not submitted: give the endpoint back */
        tern_epstore_release(cs->x->eps, cs->ref);
        cs->ref = NULL;
    }
    cs->s.ep = NULL;
    tern_heal_failed(e, cs, rc, err, worker ? TERN_HEAL_SEEN_WORKER : TERN_HEAL_SEEN_SUBMIT);
}

/* A worker connects for cs.  While it does, other slices of the same peer
 * park on the segment instead of holding workers; they share the outcome:
 * one connect per peer at a time, one failure for all who waited. */
static int route_connect(tern_engine *e, tern_cslice *cs, char *err, size_t errlen)
{
    tern_segment *seg = cs->seg;
    pthread_mutex_lock(&seg->park_lock);
    uint64_t at = atomic_load(&seg->retry_at_ms);
    if (at > tern_now_ms()) { /* an attempt failed just now: wait for the backoff */
        pthread_mutex_unlock(&seg->park_lock);
        tern_dpq_push(e->dp, cs, at);
        return TERN_ROUTE_CONNECT; /* handed on */
    }
    if (seg->connecting) {
        cs->next = seg->parked;
        seg->parked = cs;
        pthread_mutex_unlock(&seg->park_lock);
        return TERN_ROUTE_CONNECT; /* parked: handed on */
    }
    seg->connecting = 1;
    pthread_mutex_unlock(&seg->park_lock);
    int rc = tern_route(cs, 1, err, errlen);
    /* A failed attempt starts the peer's backoff before this connect is
     * seen to end: a slice arriving just after it waits that out instead of
     * connecting again (one connect per wave, not per latecomer). */
    tern_heal_connect_failed(e, seg, rc, err);
    pthread_mutex_lock(&seg->park_lock);
    tern_cslice *list = seg->parked;
    seg->parked = NULL;
    seg->connecting = 0;
    pthread_mutex_unlock(&seg->park_lock);
    while (list) {
        tern_cslice *p = list;
        list = p->next;
        p->next = NULL;
        /* The verdict is on cs's transport.  One that parked after the peer
         * moved to another (a fallback racing this connect) is routed
         * again; given this verdict it would leave a transport that works. */
        if (rc == 0 || rc == TERN_ROUTE_SEG_CLOSED || p->x != cs->x)
            tern_dpq_push(e->dp, p, 0);
        else
            route_failed(e, p, rc, err, 1);
    }
    return rc;
}

void tern_dispatch(tern_engine *e, tern_cslice **v, size_t n, int connect)
{
    size_t ready = 0;
    uint64_t now = n ? tern_now_ms() : 0;
    for (size_t i = 0; i < n; i++) {
        tern_cslice *cs = v[i];
        uint64_t at = atomic_load_explicit(&cs->seg->retry_at_ms, memory_order_relaxed);
        if (cs->whole || at > now) { /* needs a refetch, or the peer is backing off */
            tern_dpq_push(e->dp, cs, cs->whole ? 0 : at);
            continue;
        }
        char err[768] = "";
        int rc = tern_route(cs, 0, err, sizeof err);
        if (rc == TERN_ROUTE_CONNECT && connect)
            rc = route_connect(e, cs, err, sizeof err);
        else if (rc == TERN_ROUTE_CONNECT)
            tern_dpq_push(e->dp, cs, 0); /* the application thread never connects */
        if (rc == 0 && tern_stage_needed(cs))
            tern_stage_out(e->dp->stage, cs); /* GPU memory: through a staging buffer */
        else if (rc == 0)
            v[ready++] = cs;
        else if (rc != TERN_ROUTE_CONNECT)
            route_failed(e, cs, rc, err, connect);
    }
    if (ready > 1)
        qsort(v, ready, sizeof *v, by_endpoint);
    for (size_t i = 0; i < ready;) {
        size_t j = i + 1;
        while (j < ready && v[j]->x == v[i]->x && v[j]->s.ep == v[i]->s.ep)
            j++;
        submit_group(e, v[i]->x, v[i]->s.ep, &v[i], (int)(j - i), connect);
        i = j;
    }
}

/* ---- the workers ------------------------------------------------------------------ */

/* A request whose remote range the cached descriptor did not cover:
 * refetch, check, cut, dispatch. */
static void work_whole(tern_engine *e, tern_cslice *cs)
{
    tern_batch *b = cs->b;
    const tern_request *r = &b->reqs[cs->idx].r; /* fixed after submit */
    char why[768] = "", msg[1024] = "";
    uint64_t later = 0;
    int rc = tern_segment_refetch(&e->segs, cs->seg, cs->failed_ns, &later, why, sizeof why);
    if (rc == TERN_REFETCH_LATER) {
        tern_dpq_push(e->dp, cs, later);
        return;
    }
    if (rc >= 0)
        rc = tern_cut_check_remote(cs->seg, r, msg, sizeof msg);
    else
        snprintf(msg, sizeof msg, "remote address 0x%llx (+%llu bytes) is not covered by the "
                 "cached descriptor of segment %s, and refetching it failed: %s",
                 (unsigned long long)r->remote, (unsigned long long)r->length, cs->seg->name,
                 why);
    tern_cut_list l = {0};
    int n = rc < 0 ? rc : tern_cut(b, cs->idx, cs->seg, &l);
    pthread_mutex_lock(&b->lock);
    tern_req *q = &b->reqs[cs->idx];
    if (n < 0) {
        tern_req_fail_locked(b, cs->idx, TERN_INVALID, n == TERN_ERR_NOMEM ? n : TERN_ERR_RANGE,
                             "%s", msg[0] ? msg : "registered memory changed during the cut");
    } else if (!tern_req_active_locked(q)) { /* timed out meanwhile */
        for (size_t i = 0; i < l.n; i++)
            free(l.v[i]);
        l.n = 0;
    } else {
        q->nslices = n;
        q->live += n;
        b->inflight += n;
    }
    tern_cslice_free_locked(cs);
    pthread_mutex_unlock(&b->lock);
    tern_dispatch(e, l.v, l.n, 1);
    free(l.v);
}

static void work(tern_engine *e, tern_cslice *cs)
{
    if (tern_cslice_drop_if_ended(cs))
        return;
    if (cs->whole)
        work_whole(e, cs);
    else if (tern_heal_resume(e, cs) == 0) /* what its failure asked for, done */
        tern_dispatch(e, &cs, 1, 1);
}

static void reap_all(tern_engine *e)
{
    for (size_t i = 0; i < e->nxports; i++)
        tern_xport_reap(&e->xports[i]);
}

static void worker_loop(struct tern_dp *dp, int wake_ms)
{
    uint64_t next_check = 0;
    for (;;) {
        tern_cslice *cs = tern_dpq_pop(dp, wake_ms);
        reap_all(dp->e);
        if (wake_ms > 0 && tern_now_ms() >= next_check) { /* the reaper: stalled NIC pairs */
            tern_stall_check(dp->e);
            next_check = tern_now_ms() + WORKER_WAKE_MS;
        }
        if (cs)
            work(dp->e, cs);
        else if (tern_dpq_stopped(dp))
            break;
    }
}

/* One worker also wakes every WORKER_WAKE_MS to reap; the others sleep
 * until there is work or a kick.  An idle engine then wakes 10 times a
 * second instead of 40: with a thousand engines on a host (one per peer, or
 * many in one process) those wake-ups were most of its idle CPU. */
static void *worker_main(void *arg)
{
    worker_loop(arg, -1);
    return NULL;
}

static void *reaper_main(void *arg)
{
    worker_loop(arg, WORKER_WAKE_MS);
    return NULL;
}

int tern_dp_start(tern_engine *e, char *err, size_t errlen)
{
    struct tern_dp *dp = calloc(1, sizeof *dp);
    if (!dp || tern_dpq_init(dp, e) != 0) {
        free(dp);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory for the data path");
    }
    e->dp = dp;
    dp->stage = tern_stage_create(e, stage_submit, tern_cslice_done_staged);
    if (!dp->stage)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory for the data path");
    for (int i = 0; i < TERN_DP_WORKERS; i++) {
        if (pthread_create(&dp->workers[i], NULL, i ? worker_main : reaper_main, dp) != 0)
            return tern_errf(err, errlen, TERN_ERR_IO, "cannot start data path worker %d", i);
        dp->nworkers++;
    }
    return tern_complete_pollers_start(dp, err, errlen);
}

void tern_dp_stop(tern_engine *e)
{
    struct tern_dp *dp = e->dp;
    if (!dp)
        return;
    tern_cslice *list = tern_dpq_stop(dp);
    for (int i = 0; i < dp->nworkers; i++)
        pthread_join(dp->workers[i], NULL);
    dp->nworkers = 0;
    tern_stage_stop(dp->stage); /* what it holds fails: the transports are still up */
    tern_complete_pollers_stop(dp);
    while (list) { /* engine going away: their requests fail */
        tern_cslice *cs = list;
        list = cs->next;
        tern_cslice_fail(cs, TERN_ERR_CLOSED, "engine destroyed");
    }
}

void tern_dp_free(tern_engine *e)
{
    if (!e->dp)
        return;
    tern_stage_free(e->dp->stage);
    tern_dpq_fini(e->dp);
    free(e->dp);
    e->dp = NULL;
}
