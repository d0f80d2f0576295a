/* core/host/topology.h: NUMA-aware device choice (docs/architecture.md).
 * A matrix maps a location ("cpu:0") to two ordered
 * lists of device names: preferred (same NUMA node) and available (the
 * rest), plus the wildcard "*" (all devices).  JSON form:
 *   {"cpu:0": [["mlx5_0","mlx5_1"], ["mlx5_2"]], "*": [[...], []]} */
#ifndef TERN_CORE_TOPOLOGY_H
#define TERN_CORE_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "tern/transport.h"

typedef struct tern_topology tern_topology;

/* Discover from sysfs: NUMA nodes under <root>/devices/system/node, each
 * device's numa_node under <root>/<sysfs_path>/numa_node (-1: unknown ->
 * available everywhere).  allow (NULL or empty = all) filters device names.
 * Device indices follow devs[] order (after filtering, indices still refer
 * to devs[]). */
int tern_topology_discover(const char *sysfs_root, const tern_device_info *devs, int ndev,
                           const char *const *allow, size_t nallow, int policy,
                           tern_topology **out, char *err, size_t errlen);
/* From a JSON matrix (file contents or a descriptor's priority_matrix);
 * device indices follow devs[] order by name (NULL devs: order of first
 * appearance in the JSON). */
int tern_topology_from_json(const char *json, const tern_device_info *devs, int ndev,
                            int policy, tern_topology **out, char *err, size_t errlen);
char *tern_topology_to_json(const tern_topology *t);          /* malloc()ed */
void tern_topology_free(tern_topology *t);

int tern_topology_device_count(const tern_topology *t);
const char *tern_topology_device_name(const tern_topology *t, int dev);
int tern_topology_device_index(const tern_topology *t, const char *name);

/* select_device: returns a device index or TERN_ERR_NOT_FOUND.
 * retry 0: random (or round-robin) among preferred, else available;
 * retry k>=1: ordered walk (k-1) mod (|pref|+|avail|), preferred first;
 * unknown location -> "*"; a hint naming a listed device wins; devices
 * marked down are skipped without renumbering. Thread-safe.
 * Details (topology.c): at retry 0 the pick is uniform among the preferred
 * devices that are up, else among the available ones that are up; the hint
 * wins at retry 0 only (and only when that device is up), so retries still
 * walk every device; at retry k a down device's turn goes to the next device
 * up in the order; when the location's lists have no device up, "*" is
 * tried.  Lock-free: the matrix is immutable, down flags are atomics. */
int tern_topology_select(tern_topology *t, const char *location, int retry,
                         const char *hint);
void tern_topology_mark_down(tern_topology *t, int dev, int down);

/* Memory location of addr via libnuma ("cpu:N"), or "*" if unknown.  Uses
 * move_pages() with no target nodes, which only queries: a page never
 * touched is not faulted in and reports "*" (so does a machine without
 * NUMA support). */
void tern_memory_location(const void *addr, char *out, size_t outlen);

/* A path for one slice: local device, peer device, their keys and NIC
 * paths ("host:port@device").  Chosen by datapath/route.c; the indices are
 * those of the descriptors' device lists for the transport. */
typedef struct tern_path {
    int local_dev;
    int peer_dev;
    uint64_t lkey, rkey;
    char peer_nic_path[320];
    char local_nic_path[320];
} tern_path;

/* ---- appended by topology.c's owner ---- */
/* Reseed the random pick (tests and benchmarks make it repeatable). */
void tern_topology_seed(tern_topology *t, uint64_t seed);
/* 1 when dev is marked down, 0 when up, TERN_ERR_INVAL for a bad index. */
int tern_topology_is_down(const tern_topology *t, int dev);
/* One line per location ("cpu:0    preferred: a b  available: c"), for
 * tern-info's text form; malloc()ed. */
char *tern_topology_to_text(const tern_topology *t);
/* Apply a device allow-list to a built topology (e.g. one read from a JSON
 * file): unlisted devices leave every location.  Call before the topology
 * is shared (it edits in place).  TERN_ERR_NOT_FOUND when nothing is left. */
int tern_topology_restrict(tern_topology *t, const char *const *allow, size_t nallow,
                           char *err, size_t errlen);
/* The devices a retry-0 pick for location chooses among: the preferred
 * ones that are up, else the available ones that are up, else those of
 * "*" that are up (the order of the matrix).  Writes up to max indices;
 * returns how many. */
int tern_topology_candidates(tern_topology *t, const char *location, int *out, int max);

#endif
