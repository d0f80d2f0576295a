/* core/datapath/complete.c: completions (see complete.h). */
#include "datapath/complete.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/endpoint.h"
#include "datapath/heal.h"
#include "datapath/stage.h"
#include "base/util.h"

#define POLL_MAX 64
#define POLL_TIMEOUT_MS 20

static void done_ok(tern_cslice *cs)
{
    tern_batch *b = cs->b;
    struct tern_dp *dp = b->e->dp; /* b may be freed once its lock is released */
    tern_cslice_unpair(cs, 1);
    tern_segment_ok(cs->seg);
    tern_xport_device_ok(cs->x, cs->local_dev);
    tern_req *q = &b->reqs[cs->idx];
    pthread_mutex_lock(&b->lock);
    if (tern_req_active_locked(q)) {
        q->transferred += cs->s.length;
        if (q->transferred >= q->r.length) {
            q->status = TERN_COMPLETED;
            q->xport = cs->x->index;
            tern_req_publish_locked(b, cs->idx);
        }
    }
    int reap = tern_cslice_free_locked(cs);
    pthread_mutex_unlock(&b->lock);
    if (reap)
        tern_dpq_kick(dp);
}

static void done_failed(tern_cslice *cs)
{
    tern_engine *e = cs->b->e;
    tern_dpq_kick(e->dp); /* a worker reaps what this releases */
    /* A failure of the NIC pair itself (connect, connection) pauses the
     * pair; when it was paused already (it stalled and was reset,
     * datapath/stall.c, or another slice's failure paused it), the slice
     * goes over another pair at once, without spending an attempt. */
    int pairfail = tern_heal_drops_endpoint(cs->s.status);
    int moved = pairfail && cs->pair >= 0 && cs->moves < TERN_SPREAD_MOVES_MAX &&
                tern_spread_paused(&cs->seg->spread, cs->pair, tern_now_ns());
    tern_cslice_unpair(cs, pairfail ? 0 : -1);
    if (tern_cslice_drop_if_ended(cs))
        return;
    tern_xport *x = cs->x;
    int code = cs->s.status;
    if (code == TERN_ERR_DEVICE)
        tern_xport_device_failed(x, cs->local_dev);
    if (tern_heal_drops_endpoint(code) && cs->s.ep)
        tern_endpoint_drop(x, cs->local_dev, cs->peer_nic_path, cs->s.ep);
    if (cs->ref) {
        tern_epstore_release_deferred(x->eps, cs->ref);
        cs->ref = NULL;
    }
    cs->s.ep = NULL; /* the retry chooses a path and an endpoint again */
    if (moved) {
        cs->moves++;
        tern_dpq_push(e->dp, cs, 0);
        return;
    }
    const char *why = cs->s.errmsg[0] ? tern_xport_msg(x, cs->s.errmsg) : "transport error";
    tern_heal_failed(e, cs, code, why, TERN_HEAL_SEEN_COMPLETE); /* queued or failed */
}

void tern_cslice_done(tern_cslice *cs)
{
    if (cs->stage && tern_stage_back(cs->b->e->dp->stage, cs))
        return; /* a READ into a staging buffer: the stager copies it to the GPU first */
    if (cs->s.status == 0)
        done_ok(cs);
    else
        done_failed(cs);
}

void tern_cslice_done_staged(tern_cslice *cs)
{
    done_ok(cs);
}

void tern_slice_complete(tern_slice *s)
{
    tern_cslice_done(s->core);
}

/* ---- 1.0 plugins: poll() ------------------------------------------------------- */

typedef struct poller_arg {
    struct tern_dp *dp;
    tern_xport *x;
} poller_arg;

static void *poller_main(void *arg)
{
    tern_xport *x = ((poller_arg *)arg)->x;
    struct tern_dp *dp = ((poller_arg *)arg)->dp;
    free(arg);
    tern_slice *done[POLL_MAX];
    while (!atomic_load(&dp->poll_stop)) {
        int n = x->ops->poll(x->pl->ctx, done, POLL_MAX, POLL_TIMEOUT_MS);
        for (int i = 0; i < n; i++)
            tern_cslice_done(done[i]->core);
        if (n < 0) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

int tern_complete_pollers_start(struct tern_dp *dp, char *err, size_t errlen)
{
    tern_engine *e = dp->e;
    atomic_store(&dp->poll_stop, 0);
    for (size_t i = 0; i < e->nxports; i++) {
        tern_xport *x = &e->xports[i];
        if (!x->pl->polls) /* 1.1: completions come through complete() */
            continue;
        poller_arg *a = malloc(sizeof *a);
        if (a) {
            a->dp = dp;
            a->x = x;
        }
        if (!a || pthread_create(&dp->pollers[i], NULL, poller_main, a) != 0) {
            free(a);
            tern_complete_pollers_stop(dp);
            return tern_errf(err, errlen, TERN_ERR_IO, "cannot start the %s poll thread",
                             x->pl->name);
        }
        dp->polling[i] = 1;
    }
    return 0;
}

void tern_complete_pollers_stop(struct tern_dp *dp)
{
    atomic_store(&dp->poll_stop, 1);
    for (size_t i = 0; i < TERN_DESC_MAX_TRANSPORTS; i++)
        if (dp->polling[i]) {
            pthread_join(dp->pollers[i], NULL);
            dp->polling[i] = 0;
        }
}
