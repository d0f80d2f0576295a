/* core/datapath/heal.h: everything done with a slice that failed (heal.c):
 * the error's class, the decision, what is done with it, and the attempts
 * it spends (docs/architecture.md, Healing).  Dispatch and completion hand
 * a failure here once, saying where it was seen; a worker hands a queued
 * slice here before routing it again. */
#ifndef TERN_DATAPATH_HEAL_H
#define TERN_DATAPATH_HEAL_H

#include "datapath/request.h"

/* Where a failure was seen, which decides whether healing may act at once
 * or must leave the act to a worker: moving a peer to its next transport
 * takes the segment's write lock, which a worker's connect holds for
 * reading while it lasts. */
typedef enum tern_heal_seen {
    TERN_HEAL_SEEN_SUBMIT,   /* a route on the application thread: queues */
    TERN_HEAL_SEEN_WORKER,   /* a route on a worker: acts at once */
    TERN_HEAL_SEEN_COMPLETE, /* a transport handed the slice back failed: queues */
} tern_heal_seen;

/* cs failed with code (why), seen where; its endpoint is already given
 * back.  cs is handed on: failed, queued for another attempt (after the
 * peer's shared backoff, with a refetch, and a probe after a timeout), or
 * queued for a worker to move the peer or recheck the range. */
void tern_heal_failed(tern_engine *e, tern_cslice *cs, int code, const char *why,
                      tern_heal_seen where);

/* A worker took queued cs (not a whole request): count the attempts on its
 * peer that failed while it waited, probe, refetch, recheck the range,
 * move the peer to its next transport, as its failure asked.  0: route it;
 * else cs was handed on (failed, or queued again). */
int tern_heal_resume(tern_engine *e, tern_cslice *cs);

/* A worker's connect to seg failed with rc (why): when the peer is to
 * blame, its shared backoff starts before the connect is seen to end. */
void tern_heal_connect_failed(tern_engine *e, tern_segment *seg, int rc, const char *why);

/* The endpoint is broken: drop it so the next attempt builds a new one. */
int tern_heal_drops_endpoint(int code);

#endif
