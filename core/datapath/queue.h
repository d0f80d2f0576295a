/* core/datapath/queue.h: the data path's work queue, ordered by due time.
 *
 * Slices that need work off the application thread wait here: a request
 * whose remote range the cached descriptor does not cover (refetch, then
 * cut), a slice whose endpoint must be connected, and a failed slice
 * waiting for its retry (not before its peer's backoff time).  The
 * workers (dispatch.c) take slices whose time has come.  Completion
 * (complete.c) only pushes, so the pipeline flows one way:
 * cut -> route -> dispatch -> complete -> queue -> (worker) route. */
#ifndef TERN_CORE_DATAPATH_QUEUE_H
#define TERN_CORE_DATAPATH_QUEUE_H

#include <pthread.h>

#include "datapath/request.h"

#define TERN_DP_WORKERS 4     /* connects to slow peers run side by side */

struct tern_dp {
    tern_engine *e;
    pthread_mutex_t lock;
    pthread_cond_t cond;      /* CLOCK_MONOTONIC */
    tern_cslice *ready, *ready_tail; /* due: FIFO */
    tern_cslice *later, *later_tail; /* not yet due: sorted by due_ms, doubly
                                        linked (most pushes land at the tail) */
    int stop;
    int kicked;               /* a worker should reap released endpoints now */
    int nworkers;
    pthread_t workers[TERN_DP_WORKERS];
    /* 1.0 plugins: one thread per transport calls poll() */
    pthread_t pollers[TERN_DESC_MAX_TRANSPORTS];
    int polling[TERN_DESC_MAX_TRANSPORTS];
    atomic_int poll_stop;
    struct tern_stage *stage; /* GPU memory staging (stage.c) */
};

int tern_dpq_init(struct tern_dp *dp, tern_engine *e);
void tern_dpq_fini(struct tern_dp *dp);
/* Queue cs, not to be taken before due_ms (0: now). */
void tern_dpq_push(struct tern_dp *dp, tern_cslice *cs, uint64_t due_ms);
/* The next slice whose time has come; waits at most wait_ms (< 0: until
 * there is work, a kick or the stop).  NULL on timeout, after a kick, or
 * once stopped. */
tern_cslice *tern_dpq_pop(struct tern_dp *dp, int wait_ms);
int tern_dpq_stopped(struct tern_dp *dp);
/* Wake one worker to reap endpoints released inside complete(). */
void tern_dpq_kick(struct tern_dp *dp);
/* Stop: wakes every waiter; returns what was still queued (a list). */
tern_cslice *tern_dpq_stop(struct tern_dp *dp);

#endif
