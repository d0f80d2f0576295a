/* core/datapath/queue.c: see queue.h. */
#include "datapath/queue.h"

#include <time.h>

#include "base/util.h"
#include "tern/plugin_kit.h"

int tern_dpq_init(struct tern_dp *dp, tern_engine *e)
{
    dp->e = e;
    pthread_mutex_init(&dp->lock, NULL);
    int rc = tern_kit_cond_init_mono(&dp->cond);
    return rc ? TERN_ERR_NOMEM : 0;
}

void tern_dpq_fini(struct tern_dp *dp)
{
    pthread_mutex_destroy(&dp->lock);
    pthread_cond_destroy(&dp->cond);
}

static void ready_append(struct tern_dp *dp, tern_cslice *cs)
{
    cs->next = NULL;
    if (dp->ready_tail)
        dp->ready_tail->next = cs;
    else
        dp->ready = cs;
    dp->ready_tail = cs;
}

/* Into the sorted `later` list, searching from the tail. */
static void later_insert(struct tern_dp *dp, tern_cslice *cs)
{
    tern_cslice *after = dp->later_tail;
    while (after && after->due_ms > cs->due_ms)
        after = after->prev;
    cs->prev = after;
    cs->next = after ? after->next : dp->later;
    if (cs->next)
        cs->next->prev = cs;
    else
        dp->later_tail = cs;
    if (after)
        after->next = cs;
    else
        dp->later = cs;
}

/* Move what came due from `later` to `ready` (lock held). */
static void later_due(struct tern_dp *dp, uint64_t now)
{
    while (dp->later && dp->later->due_ms <= now) {
        tern_cslice *cs = dp->later;
        dp->later = cs->next;
        if (dp->later)
            dp->later->prev = NULL;
        else
            dp->later_tail = NULL;
        ready_append(dp, cs);
    }
}

void tern_dpq_push(struct tern_dp *dp, tern_cslice *cs, uint64_t due_ms)
{
    cs->due_ms = due_ms;
    pthread_mutex_lock(&dp->lock);
    if (dp->stop) { /* the engine is going: nobody would take it */
        pthread_mutex_unlock(&dp->lock);
        tern_cslice_fail(cs, TERN_ERR_CLOSED, "engine destroyed");
        return;
    }
    int wake = 1;
    if (due_ms <= tern_now_ms()) {
        ready_append(dp, cs);
    } else {
        later_insert(dp, cs);
        wake = dp->later == cs; /* a new earliest: a waiter re-arms its timer */
    }
    if (wake)
        pthread_cond_signal(&dp->cond);
    pthread_mutex_unlock(&dp->lock);
}

tern_cslice *tern_dpq_pop(struct tern_dp *dp, int wait_ms)
{
    uint64_t until = wait_ms < 0 ? UINT64_MAX : tern_now_ms() + (uint64_t)wait_ms;
    pthread_mutex_lock(&dp->lock);
    tern_cslice *cs = NULL;
    while (!dp->stop) {
        uint64_t now = tern_now_ms();
        later_due(dp, now);
        if (dp->ready) {
            cs = dp->ready;
            dp->ready = cs->next;
            if (!dp->ready)
                dp->ready_tail = NULL;
            cs->next = NULL;
            if (dp->ready)
                pthread_cond_signal(&dp->cond); /* more ready: another worker */
            break;
        }
        if (now >= until || dp->kicked) {
            dp->kicked = 0; /* the caller reaps before it waits again */
            break;
        }
        uint64_t wake = until;
        if (dp->later && dp->later->due_ms < wake)
            wake = dp->later->due_ms;
        if (wake == UINT64_MAX) { /* nothing timed to wait for */
            pthread_cond_wait(&dp->cond, &dp->lock);
            continue;
        }
        struct timespec ts = tern_kit_deadline_mono((int64_t)(wake - now));
        pthread_cond_timedwait(&dp->cond, &dp->lock, &ts);
    }
    pthread_mutex_unlock(&dp->lock);
    return cs;
}

tern_cslice *tern_dpq_stop(struct tern_dp *dp)
{
    pthread_mutex_lock(&dp->lock);
    dp->stop = 1;
    if (dp->ready_tail) { /* one list: ready, then later */
        dp->ready_tail->next = dp->later;
        dp->later = dp->ready;
    }
    tern_cslice *list = dp->later;
    dp->ready = dp->ready_tail = dp->later = dp->later_tail = NULL;
    pthread_cond_broadcast(&dp->cond);
    pthread_mutex_unlock(&dp->lock);
    return list;
}

int tern_dpq_stopped(struct tern_dp *dp)
{
    pthread_mutex_lock(&dp->lock);
    int stop = dp->stop;
    pthread_mutex_unlock(&dp->lock);
    return stop;
}

void tern_dpq_kick(struct tern_dp *dp)
{
    pthread_mutex_lock(&dp->lock);
    dp->kicked = 1;
    pthread_cond_signal(&dp->cond);
    pthread_mutex_unlock(&dp->lock);
}
