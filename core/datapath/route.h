/* core/datapath/route.h: path choice for a slice.
 *
 * Two levels, the same for every transport: the local buffer's location
 * and our topology give the local device; the peer buffer's location and
 * the peer's published topology give the peer device, its key and the
 * peer NIC path "host:port@device".  Then the endpoint for the pair: from
 * the store, or (on a worker only) a new one, connected. */
#ifndef TERN_CORE_DATAPATH_ROUTE_H
#define TERN_CORE_DATAPATH_ROUTE_H

#include "datapath/request.h"
#include "host/topology.h"

struct tern_segment_desc;

/* A NULL topology means the descriptor's own ("priority_matrix" of that
 * transport).  local_dev/peer_dev index the descriptor's device list for
 * `transport` (resolved by name, so a matrix in another order still gets
 * the right key).  retry 0 picks at random among the preferred devices;
 * retry k walks the devices in order (tern_topology_select).  Errors:
 * TERN_ERR_RANGE when no buffer covers the range, TERN_ERR_NOT_FOUND for
 * no keys or no device up, TERN_ERR_PROTOCOL when keys and devices
 * disagree. */
int tern_path_choose(const struct tern_segment_desc *local, tern_topology *local_topo,
                     const struct tern_segment_desc *peer, tern_topology *peer_topo,
                     const char *transport, uint64_t local_addr, uint64_t remote_addr,
                     uint64_t len, int retry, tern_path *out, char *err, size_t errlen);
/* The same with a device name the local side prefers at retry 0 (the NIC
 * closest to the GPU holding the local buffer; NULL: none). */
int tern_path_choose_hint(const struct tern_segment_desc *local, tern_topology *local_topo,
                          const struct tern_segment_desc *peer, tern_topology *peer_topo,
                          const char *transport, uint64_t local_addr, uint64_t remote_addr,
                          uint64_t len, int retry, const char *local_hint, tern_path *out,
                          char *err, size_t errlen);

#define TERN_ROUTE_CONNECT 1      /* no endpoint yet: a worker must connect */
#define TERN_ROUTE_SEG_CLOSED 2   /* the segment was closed (or reopened) */

/* Transport (the segment's negotiated one), path (cs->attempt is the retry
 * count) and endpoint for cs.  connect 0: only an endpoint already in the
 * store (TERN_ROUTE_CONNECT otherwise); 1: build and connect one (may take
 * up to the handshake budget).  0 with cs->x, ref, ep, keys set; else one
 * of the codes above or a tern_err with the reason in err. */
int tern_route(tern_cslice *cs, int connect, char *err, size_t errlen);

#endif
