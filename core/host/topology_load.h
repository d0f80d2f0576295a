/* core/host/topology_load.h: a transport's topology as the configuration asks
 * for it; the one place the engine and tern_config_describe() build it. */
#ifndef TERN_CORE_TOPOLOGY_LOAD_H
#define TERN_CORE_TOPOLOGY_LOAD_H

#include "config/config.h"
#include "host/topology.h"

/* Largest topology JSON file read (a matrix is a few KiB). */
#define TERN_TOPOLOGY_FILE_MAX (4u << 20)

/* `topology: auto` discovers from sysfs under topology_sysfs_root; a path
 * reads that JSON matrix (a regular file of at most TERN_TOPOLOGY_FILE_MAX
 * bytes, opened without blocking).  The `devices:` allow-list applies to
 * both.  Errors name the file and what to check. */
int tern_topology_load(const tern_config *cfg, const tern_device_info *devs, int ndev,
                       tern_topology **out, char *err, size_t errlen);

#endif
