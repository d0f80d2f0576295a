/* core/datapath/heal.c: the one decision on a slice that failed, whoever
 * saw it fail (dispatch.c, a route or a submit that failed; complete.c, a
 * transport that handed it back failed): what its error class says
 * (request.c, tern_heal_class; docs/architecture.md, Healing).  Below
 * dispatch and completion, above the queue. */
#include "datapath/heal.h"

#include "engine/engine_state.h"
#include "datapath/queue.h"
#include "peer/segments.h"
#include "obs/stats.h"
#include "base/util.h"

uint64_t tern_heal_peer_failed(tern_engine *e, tern_segment *seg, int code, const char *why)
{
    uint64_t before = atomic_load(&seg->fail_epoch);
    uint64_t epoch = tern_segment_failed(seg, code, why);
    if (epoch > before) /* once per backoff window, not once per slice */
        tern_log(&e->log, TERN_LOG_DEBUG, "segment %s: attempt failed (%s); the next one "
                 "after a backoff and a descriptor refetch", seg->name, why);
    return epoch;
}

tern_heal tern_heal_next(tern_engine *e, tern_cslice *cs, int code, const char *why)
{
    tern_heal h = tern_heal_class(code);
    if (h == TERN_HEAL_FALLBACK || h == TERN_HEAL_RANGE)
        return h; /* the caller moves the peer or rechecks the range */
    if (h == TERN_HEAL_FATAL) {
        tern_cslice_fail(cs, code, why);
        return h;
    }
    if (h == TERN_HEAL_PEER) /* an attempt on the peer failed: back off, share it */
        cs->epoch = tern_heal_peer_failed(e, cs->seg, code, why);
    if (cs->attempt >= e->cfg->retries) {
        tern_cslice_fail(cs, code, why);
        return h;
    }
    cs->attempt++;
    tern_stats_event(e->stats, cs->b->reqs[cs->idx].st, cs->x ? cs->x->index : -1,
                     TERN_STAT_RETRY);
    cs->failed_ns = tern_now_ns();
    uint64_t due = tern_now_ms();
    if (h == TERN_HEAL_PEER) {
        cs->refetch = 1;
        cs->probe = code == TERN_ERR_TIMEOUT; /* silent, not refused: stalled? */
        due = atomic_load(&cs->seg->retry_at_ms);
    }
    tern_dpq_push(e->dp, cs, due);
    return h;
}
