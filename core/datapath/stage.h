/* core/datapath/stage.h: GPU memory through pinned host staging buffers
 * (see docs/gpu.md, Staging).
 *
 * A transport without TERN_CAP_GPU_DIRECT never sees a device address:
 * dispatch hands a routed slice whose local memory is on a GPU to the
 * stager, which copies it (WRITE) into a pinned host buffer of that GPU's
 * pool with an asynchronous device copy and submits the slice with the
 * buffer as its local address; a READ lands in the buffer and is copied to
 * the GPU before the slice completes.  The stager starts the device copies
 * of every slice it has a buffer for, then submits them in order as each
 * copy ends, so the copy of slice k+1 runs while slice k is on the network.
 *
 * Pools are per GPU and bounded (gpu_staging_buffers buffers of the
 * largest slice); a slice waits for a buffer, never allocates past the
 * bound.  The stager owns its lock, its queues and one thread, started on
 * the first GPU slice. */
#ifndef TERN_CORE_DATAPATH_STAGE_H
#define TERN_CORE_DATAPATH_STAGE_H

#include "datapath/request.h"

struct tern_stage;

/* submit: hand a staged slice to its transport (dispatch);
 * finish: complete a slice whose data is back on the GPU (complete). */
struct tern_stage *tern_stage_create(tern_engine *e, void (*submit)(tern_cslice *),
                                     void (*finish)(tern_cslice *));
/* Stop the thread; queued and in-flight slices fail with CLOSED. */
void tern_stage_stop(struct tern_stage *st);
/* Deregister and free the buffers (after the transports are down). */
void tern_stage_free(struct tern_stage *st);

/* 1 when cs must go through the stager (GPU local memory, transport
 * without TERN_CAP_GPU_DIRECT). */
int tern_stage_needed(const tern_cslice *cs);
/* Take a routed slice (its endpoint held). */
void tern_stage_out(struct tern_stage *st, tern_cslice *cs);
/* A slice came back from its transport.  Returns 1 when the stager took it
 * (a READ whose bytes go to the GPU first: finish() is called later), 0
 * when the caller goes on (buffer released, local address restored). */
int tern_stage_back(struct tern_stage *st, tern_cslice *cs);

/* Buffers allocated so far on gpu (tests check the bound). */
int tern_stage_allocated(struct tern_stage *st, int gpu);

#endif
