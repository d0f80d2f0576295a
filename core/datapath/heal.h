/* core/datapath/heal.h: what happens to a slice that failed (heal.c). */
#ifndef TERN_DATAPATH_HEAL_H
#define TERN_DATAPATH_HEAL_H

#include "datapath/request.h"

/* cs failed with code (why).  FATAL: fails its request.  PEER and RETRY:
 * one more attempt, queued when due (PEER: after the peer's shared backoff,
 * with a descriptor refetch, and a probe after a timeout), or its request
 * fails when the attempts are spent.  FALLBACK and RANGE: nothing done,
 * returned to the caller, which alone knows whether it may act at once (a
 * worker) or must queue the slice (the completion path). */
tern_heal tern_heal_next(tern_engine *e, tern_cslice *cs, int code, const char *why);

/* An attempt on seg failed (a PEER-class code): its shared backoff starts,
 * logged once per backoff window.  The failure epoch it belongs to. */
uint64_t tern_heal_peer_failed(tern_engine *e, tern_segment *seg, int code, const char *why);

#endif
