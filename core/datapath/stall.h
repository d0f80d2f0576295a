/* core/datapath/stall.h: NIC pairs that stopped moving while the peer's
 * other pairs move (spread.h, Stalls): found by the data path's reaper,
 * paused, and their slices sent again over the other pairs. */
#ifndef TERN_CORE_DATAPATH_STALL_H
#define TERN_CORE_DATAPATH_STALL_H

#include "datapath/request.h"

/* Check every open peer's pairs (the reaper, every WORKER_WAKE_MS): a
 * stalled pair is paused and its endpoint reset (the transport's ep_reset),
 * which hands its slices back; complete.c sends them again elsewhere. */
void tern_stall_check(tern_engine *e);

#endif
