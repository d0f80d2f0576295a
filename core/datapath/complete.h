/* core/datapath/complete.h: the one place a slice comes back.
 *
 * Transports call the host service complete() from any thread (ABI 1.1);
 * for a 1.0 plugin a poller thread calls poll() and hands each slice here.
 * Success adds the bytes to the request and wakes its waiter at once
 * (condition broadcast, no thread in between).  Failure is handed to
 * healing (heal.h) as seen here: fatal errors fail the request, others go
 * to the work queue for a worker to heal and retry (complete never blocks,
 * never connects, never closes an endpoint). */
#ifndef TERN_CORE_DATAPATH_COMPLETE_H
#define TERN_CORE_DATAPATH_COMPLETE_H

#include "datapath/queue.h"

/* The host service complete(). */
void tern_slice_complete(tern_slice *s);
/* Finish a slice a transport returned (status set) or could not take. */
void tern_cslice_done(tern_cslice *cs);
/* A staged READ whose bytes reached the GPU (stage.c's finish). */
void tern_cslice_done_staged(tern_cslice *cs);

/* Poller threads for the loaded transports that have poll(). */
int tern_complete_pollers_start(struct tern_dp *dp, char *err, size_t errlen);
void tern_complete_pollers_stop(struct tern_dp *dp);

#endif
