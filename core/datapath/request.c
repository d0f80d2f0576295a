/* core/datapath/request.c: request state changes shared by the stages
 * (see request.h). */
#include "datapath/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

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
    /* A TIMEOUT is published at once: the caller asked for a deadline;
     * tern_batch_free stays refused until the slices are back. */
    if (q->live > 0 && st == TERN_FAILED) {
        q->ending = st; /* published by the last slice's tern_cslice_free_locked */
        return;
    }
    q->status = st;
    tern_req_publish_locked(b, idx);
}

void tern_req_publish_locked(tern_batch *b, size_t idx)
{
    tern_req *q = &b->reqs[idx];
    int code = q->status == TERN_COMPLETED ? 0 : q->error ? q->error : TERN_ERR_INVAL;
    tern_stats_obj *s = b->e->stats;
    if (code == 0 && q->start_ns && atomic_load_explicit(&b->submitting, memory_order_relaxed) &&
        q->start_ns == b->submit_t0 &&
        pthread_equal(b->submitter, pthread_self())) /* inside its own submit call */
        tern_stats_defer(s, &b->pend, &b->acc, q->st, q->xport, (int)q->r.opcode,
                         q->transferred, b->submit_t0);
    else if (code == 0) /* the hot path: added up in the batch, see tern_stat_acc */
        tern_stats_acc_add(s, &b->acc, q->st, q->xport, (int)q->r.opcode,
                           q->start_ns ? tern_now_ns() - q->start_ns : 0, q->transferred);
    else
        tern_stats_end(s, q->st, q->xport, (int)q->r.opcode, q->started, code,
                       q->start_ns ? tern_now_ns() - q->start_ns : 0, q->transferred);
    if (b->open && --b->open == 0 && !b->pend.n) /* else when the submit returns */
        tern_stats_flush(s, &b->acc);
    tern_batch_note_req_locked(b, idx);
    tern_batch_signal_locked(b);
}

int tern_req_active_locked(const tern_req *q)
{
    return q->status == TERN_PENDING && !q->ending;
}

void tern_cslice_unpair(tern_cslice *cs, int ok)
{
    if (cs->pair < 0)
        return;
    tern_spread_done(&cs->seg->spread, cs->pair, cs->s.length, cs->sent_ns, ok);
    cs->pair = -1;
}

int tern_cslice_free_locked(tern_cslice *cs)
{
    tern_cslice_unpair(cs, -1);
    tern_batch *b = cs->b;
    size_t idx = cs->idx;
    tern_req *q = &b->reqs[idx];
    int deferred = cs->ref ? tern_epstore_release_deferred(cs->x->eps, cs->ref) : 0;
    free(cs);
    if (--q->live == 0 && q->ending) {
        q->status = q->ending;
        q->ending = 0;
        tern_req_publish_locked(b, idx);
    }
    if (--b->inflight == 0)
        tern_batch_signal_locked(b);
    return deferred;
}

void tern_cslice_fail(tern_cslice *cs, int code, const char *why)
{
    tern_batch *b = cs->b;
    pthread_mutex_lock(&b->lock);
    if (cs->x)
        b->reqs[cs->idx].xport = cs->x->index;
    tern_req_fail_locked(b, cs->idx, TERN_FAILED, code,
                         "slice at offset %llu (%llu bytes) failed after %d attempt(s): %s (%s)",
                         (unsigned long long)cs->offset, (unsigned long long)cs->s.length,
                         cs->attempt + 1, why, tern_strerror(code));
    tern_cslice_free_locked(cs);
    pthread_mutex_unlock(&b->lock);
}

int tern_cslice_drop_if_ended(tern_cslice *cs)
{
    tern_batch *b = cs->b;
    pthread_mutex_lock(&b->lock);
    int ended = !tern_req_active_locked(&b->reqs[cs->idx]);
    if (ended)
        tern_cslice_free_locked(cs);
    pthread_mutex_unlock(&b->lock);
    return ended;
}
