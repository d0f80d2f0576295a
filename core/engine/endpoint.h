/* core/engine/endpoint.h: endpoints, active (a slice needs one) and
 * passive (our daemon got a Connection frame); see engine/endpoint.c. */
#ifndef TERN_CORE_ENGINE_ENDPOINT_H
#define TERN_CORE_ENGINE_ENDPOINT_H

#include <stddef.h>

#include "engine/engine_state.h"
#include "host/topology.h"

/* Endpoint for (local device, peer NIC path) on transport x: from the
 * store, or created (handshake when the transport needs it).  *ref is held;
 * release with tern_epstore_release(x->eps, *ref).  The caller holds seg's
 * lock shared. */
int tern_endpoint_get(tern_xport *x, tern_segment *seg, const tern_path *path, void **ep,
                      tern_ep_ref **ref, char *err, size_t errlen);
/* The endpoint for path if the store has one (held in *ref): 0, else 1.
 * Never connects: what the application thread uses. */
int tern_endpoint_cached(tern_xport *x, const tern_path *path, void **ep, tern_ep_ref **ref);
/* Passive side of a Connection frame: reply JSON (malloc()ed). */
char *tern_endpoint_accept(tern_engine *e, const char *json, size_t len);
/* Drop the failed endpoint `bad` from the store (unless the key already
 * holds a fresh one) so a retry builds a new one. */
void tern_endpoint_drop(tern_xport *x, int local_dev, const char *peer_nic_path, void *bad);

#endif
