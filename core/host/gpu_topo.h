/* core/host/gpu_topo.h: which NIC is closest to a GPU (see docs/gpu.md, Topology).
 *
 * Pure: reads sysfs below a root (tests point it at fake trees).  The PCI
 * distance is the depth of the deepest PCI bridge the GPU and the NIC share
 * (their sysfs device paths, symlinks resolved): a NIC behind the GPU's own
 * PCIe switch beats one on the same root complex, which beats one on
 * another; ties go to a NIC on the GPU's NUMA node, then to device order. */
#ifndef TERN_CORE_GPU_TOPO_H
#define TERN_CORE_GPU_TOPO_H

#include <stddef.h>

#include "tern/transport.h"

/* gpu_pci: "0000:3b:00.0".  Writes the closest device's name into out and
 * returns its index, or TERN_ERR_NOT_FOUND (out "") when no device shares
 * a PCI root with the GPU or NUMA node either. */
int tern_gpu_nearest(const char *sysfs_root, const char *gpu_pci, const tern_device_info *devs,
                     int ndev, char *out, size_t outlen);

#endif
