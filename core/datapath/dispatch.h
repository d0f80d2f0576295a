/* core/datapath/dispatch.h: handing routed slices to transports, and the
 * workers that do what the application thread must not wait for.
 *
 * The application thread routes each slice with the endpoints already in
 * the store and submits them, grouped per endpoint; a slice that needs a
 * connect, a refetch or a retry goes to the work queue.  The workers take
 * queued slices when their time comes: refetch the peer's descriptor when
 * asked (rate-limited per peer), move a peer to its next transport after
 * TERN_ERR_UNREACHABLE, connect, and submit.  A failing peer costs at most
 * one attempt per backoff period (segments.h), however many slices wait. */
#ifndef TERN_CORE_DATAPATH_DISPATCH_H
#define TERN_CORE_DATAPATH_DISPATCH_H

#include "datapath/queue.h"

/* Route and submit v[0..n) (application thread: connect 0; a worker: 1).
 * Every slice is handed on: to a transport, the queue, or failed. */
void tern_dispatch(tern_engine *e, tern_cslice **v, size_t n, int connect);

/* The workers and pollers of e (e->dp). */
int tern_dp_start(tern_engine *e, char *err, size_t errlen);
/* Stop them; slices still queued fail with TERN_ERR_CLOSED.  e->dp stays
 * until tern_dp_free so late completions find it. */
void tern_dp_stop(tern_engine *e);
void tern_dp_free(tern_engine *e);

#endif
