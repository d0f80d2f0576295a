/* core/datapath/heal.c: everything done with a slice that failed, whoever
 * saw it fail (dispatch.c, a route that failed; complete.c, a transport
 * that handed it back failed): the error's class, the one decision, what
 * is done with it, the attempts it spends, and the worker's half of it
 * when the slice comes out of the queue (docs/architecture.md, Healing).
 * Below dispatch and completion, above the queue: it never calls back up,
 * it is told where the failure was seen. */
#include "datapath/heal.h"

#include <stdio.h>

#include "engine/engine_state.h"
#include "datapath/queue.h"
#include "peer/segments.h"
#include "obs/stats.h"
#include "base/util.h"

/* What a failure code means for healing. */
typedef enum tern_heal {
    TERN_HEAL_FATAL,       /* retrying cannot fix it: fail at once */
    TERN_HEAL_RETRY,       /* try again, maybe on another path */
    TERN_HEAL_PEER,        /* the peer may have moved: refetch, back off, retry */
    TERN_HEAL_RANGE,       /* retry only against a newer descriptor covering it */
    TERN_HEAL_FALLBACK,    /* this transport cannot reach the peer: next one */
} tern_heal;

static tern_heal heal_class(int code)
{
    switch (code) {
    case TERN_ERR_CONNECT:
    case TERN_ERR_CLOSED:
    case TERN_ERR_IO:
    case TERN_ERR_TIMEOUT:
    case TERN_ERR_REFUSED:
    case TERN_ERR_PROTOCOL:
        return TERN_HEAL_PEER;
    case TERN_ERR_RANGE:
        return TERN_HEAL_RANGE;
    case TERN_ERR_UNREACHABLE:
        return TERN_HEAL_FALLBACK;
    case TERN_ERR_INVAL:
    case TERN_ERR_AUTH:
    case TERN_ERR_NO_TRANSPORT:
    case TERN_ERR_NOT_SUPPORTED:
    case TERN_ERR_ABI:
    case TERN_ERR_CANCELED:
    case TERN_ERR_CONFIG:
        return TERN_HEAL_FATAL;
    default: /* DEVICE, NOT_FOUND (no device up), BUSY, NOMEM, ... */
        return TERN_HEAL_RETRY;
    }
}

int tern_heal_drops_endpoint(int code)
{
    return code == TERN_ERR_DEVICE || code == TERN_ERR_CONNECT || code == TERN_ERR_CLOSED ||
           code == TERN_ERR_IO || code == TERN_ERR_TIMEOUT;
}

/* An attempt on seg failed (a PEER-class code): its shared backoff starts,
 * logged once per backoff window.  The failure epoch it belongs to. */
static uint64_t peer_failed(tern_engine *e, tern_segment *seg, int code, const char *why)
{
    uint64_t before = atomic_load(&seg->fail_epoch);
    uint64_t epoch = tern_segment_failed(seg, code, why);
    if (epoch > before) /* once per backoff window, not once per slice */
        tern_log(&e->log, TERN_LOG_DEBUG, "segment %s: attempt failed (%s); the next one "
                 "after a backoff and a descriptor refetch", seg->name, why);
    return epoch;
}

void tern_heal_connect_failed(tern_engine *e, tern_segment *seg, int rc, const char *why)
{
    if (rc < 0 && heal_class(rc) == TERN_HEAL_PEER)
        peer_failed(e, seg, rc, why);
}

/* The one place an attempt is spent: 0 and counted as a retry, or -1 when
 * cs has none left. */
static int spend_attempt(tern_engine *e, tern_cslice *cs)
{
    if (cs->attempt >= e->cfg->retries)
        return -1;
    cs->attempt++;
    tern_stats_event(e->stats, cs->b->reqs[cs->idx].st, cs->x ? cs->x->index : -1,
                     TERN_STAT_RETRY);
    return 0;
}

/* The transport cannot reach cs's peer (msg: its reason): move the peer to
 * the next common transport.  0, or cs was failed with that reason when
 * none is left. */
static int fall_back(tern_engine *e, tern_cslice *cs, const char *msg)
{
    char why[768], text[1024];
    if (tern_segment_unreachable(&e->segs, cs->seg, cs->x->index, why, sizeof why) == 0)
        return 0;
    snprintf(text, sizeof text, "%s; no other transport to fall back to (%s)", msg, why);
    tern_cslice_fail(cs, TERN_ERR_UNREACHABLE, text);
    return -1;
}

/* PEER or RETRY: one more attempt, queued when due (PEER: after the peer's
 * shared backoff, with a refetch, and a probe after a timeout), or the
 * request fails when the attempts are spent. */
static void retry(tern_engine *e, tern_cslice *cs, tern_heal h, int code, const char *why)
{
    if (h == TERN_HEAL_PEER) /* an attempt on the peer failed: back off, share it */
        cs->epoch = peer_failed(e, cs->seg, code, why);
    if (spend_attempt(e, cs) != 0) {
        tern_cslice_fail(cs, code, why);
        return;
    }
    cs->failed_ns = tern_now_ns();
    uint64_t due = tern_now_ms();
    if (h == TERN_HEAL_PEER) {
        cs->refetch = 1;
        cs->probe = code == TERN_ERR_TIMEOUT; /* silent, not refused: stalled? */
        due = atomic_load(&cs->seg->retry_at_ms);
    }
    tern_dpq_push(e->dp, cs, due);
}

/* The transport cannot reach the peer: a worker moves the peer at once,
 * the slice then retried there without spending an attempt; elsewhere the
 * slice is queued for a worker to do it (work is resumed in
 * tern_heal_resume). */
static void unreachable(tern_engine *e, tern_cslice *cs, const char *why, tern_heal_seen where)
{
    if (where == TERN_HEAL_SEEN_WORKER) {
        if (fall_back(e, cs, why) == 0)
            tern_dpq_push(e->dp, cs, 0); /* the next transport: no attempt spent */
        return;
    }
    if (where == TERN_HEAL_SEEN_SUBMIT) /* a transport's message is there already */
        tern_strlcpy(cs->s.errmsg, why, sizeof cs->s.errmsg);
    cs->unreach = 1;
    tern_dpq_push(e->dp, cs, 0);
}

void tern_heal_failed(tern_engine *e, tern_cslice *cs, int code, const char *why,
                      tern_heal_seen where)
{
    /* A transport's failure dates the slice even when no attempt is spent
     * here (RANGE, FALLBACK): the refetch it leads to must be newer. */
    if (where == TERN_HEAL_SEEN_COMPLETE)
        cs->failed_ns = tern_now_ns();
    tern_heal h = heal_class(code);
    if (h == TERN_HEAL_FATAL) {
        tern_cslice_fail(cs, code, why);
    } else if (h == TERN_HEAL_FALLBACK) {
        unreachable(e, cs, why, where);
    } else if (h == TERN_HEAL_RANGE && where == TERN_HEAL_SEEN_COMPLETE) {
        cs->range = 1; /* the target refused it: a worker refetches and rechecks */
        tern_dpq_push(e->dp, cs, 0);
    } else if (h == TERN_HEAL_RANGE) { /* the route found no buffer covering it */
        tern_cslice_fail(cs, code, why);
    } else {
        retry(e, cs, h, code, why);
    }
}

/* ---- the worker's half: a queued slice before its next route ------------------- */

/* Attempts on the peer failed while cs waited (its backoff): each counts
 * as one of cs's attempts too (not as a retry of its own: the attempt
 * that failed was counted).  0: go on; else cs was failed. */
static int shared_failures(tern_engine *e, tern_cslice *cs)
{
    uint64_t epoch = atomic_load(&cs->seg->fail_epoch);
    if (epoch <= cs->epoch)
        return 0;
    uint64_t missed = epoch - cs->epoch;
    cs->epoch = epoch;
    if ((uint64_t)cs->attempt + missed <= (uint64_t)e->cfg->retries) {
        cs->attempt += (int)missed;
        cs->refetch = 1;
        return 0;
    }
    char why[256], msg[512];
    int code = tern_segment_fail_reason(cs->seg, why, sizeof why);
    snprintf(msg, sizeof msg, "%s (attempts on the peer failed while this slice waited)", why);
    cs->attempt = e->cfg->retries;
    tern_cslice_fail(cs, code, msg);
    return -1;
}

/* A slice that timed out is retried only when the peer's daemon answers a
 * probe: a stopped or hung peer answers neither, and retrying it would
 * cost io_timeout_ms per attempt (and as much per refetch).  This bounds
 * the time a stalled peer holds a request (docs/configuration.md, Stalled
 * peers).  0: go on; else cs was failed. */
static int resume_probe(tern_engine *e, tern_cslice *cs)
{
    if (!cs->probe)
        return 0;
    cs->probe = 0;
    char why[512] = "", msg[1024];
    if (tern_segment_alive(&e->segs, cs->seg, cs->failed_ns, why, sizeof why) == 0)
        return 0;
    snprintf(msg, sizeof msg, "%s; %s: the peer is stalled or gone (not retried)",
             cs->s.errmsg[0] ? tern_xport_msg(cs->x, cs->s.errmsg) : "timed out", why);
    tern_cslice_fail(cs, TERN_ERR_TIMEOUT, msg);
    return -1;
}

/* Refetch when a failure asked for it.  0: go on; else cs was queued until
 * the refetch rate limit lets a range refusal fetch. */
static int resume_refetch(tern_engine *e, tern_cslice *cs)
{
    if (!cs->refetch && !cs->range)
        return 0;
    char why[768] = "";
    uint64_t later = 0;
    int rc = tern_segment_refetch(&e->segs, cs->seg, cs->failed_ns, &later, why, sizeof why);
    if (rc == TERN_REFETCH_LATER && cs->range) { /* a fetch after the refusal is needed */
        tern_dpq_push(e->dp, cs, later);
        return -1;
    }
    cs->refetch = 0; /* LATER: the descriptor is younger than the rate limit: go on */
    if (rc < 0 && rc != TERN_ERR_CLOSED)
        tern_log(&e->log, TERN_LOG_DEBUG, "%s", why);
    return 0;
}

/* A range refusal is retried only against a newer descriptor that covers
 * it, spending an attempt.  0: go on; else cs was failed. */
static int resume_range(tern_engine *e, tern_cslice *cs)
{
    if (!cs->range)
        return 0;
    cs->range = 0;
    pthread_rwlock_rdlock(&cs->seg->lock);
    int newer = cs->seg->desc_gen != cs->desc_gen;
    int covered = cs->seg->desc &&
                  tern_segment_find_buffer(cs->seg->desc, cs->s.remote, cs->s.length);
    unsigned long long gen = (unsigned long long)cs->seg->desc_gen;
    pthread_rwlock_unlock(&cs->seg->lock);
    /* the peer re-registered it elsewhere: try the new one */
    if (newer && covered && spend_attempt(e, cs) == 0)
        return 0;
    char msg[768];
    snprintf(msg, sizeof msg, "%s (not retried: the peer's descriptor, generation %llu, %s)",
             cs->s.errmsg[0] ? tern_xport_msg(cs->x, cs->s.errmsg) : "out of range", gen,
             !newer ? "is unchanged" : !covered ? "does not cover it either"
                                                : "changed too often");
    tern_cslice_fail(cs, TERN_ERR_RANGE, msg);
    return -1;
}

/* The transport said it cannot reach the peer: move the peer on.  0: go
 * on; else cs was failed. */
static int resume_fallback(tern_engine *e, tern_cslice *cs)
{
    if (!cs->unreach)
        return 0;
    cs->unreach = 0;
    if (fall_back(e, cs, cs->s.errmsg[0] ? tern_xport_msg(cs->x, cs->s.errmsg)
                                          : "the transport cannot reach the peer") != 0)
        return -1;
    cs->s.errmsg[0] = '\0'; /* said of the transport it left */
    return 0;
}

int tern_heal_resume(tern_engine *e, tern_cslice *cs)
{
    if (shared_failures(e, cs) != 0 || resume_probe(e, cs) != 0 ||
        resume_refetch(e, cs) != 0 || resume_range(e, cs) != 0)
        return -1;
    return resume_fallback(e, cs);
}
