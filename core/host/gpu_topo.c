/* core/host/gpu_topo.c: the NIC closest to a GPU (see gpu_topo.h). */
#include "host/gpu_topo.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Shared leading path components of two resolved sysfs paths below
 * ".../devices/": the PCI root counts 1, each bridge in common 1 more. */
static int common_depth(const char *a, const char *b)
{
    const char *da = strstr(a, "/devices/pci"), *db = strstr(b, "/devices/pci");
    if (!da || !db)
        return 0;
    da += 9; /* past "/devices/" */
    db += 9;
    int depth = 0;
    for (;;) {
        size_t la = strcspn(da, "/"), lb = strcspn(db, "/");
        if (la == 0 || la != lb || strncmp(da, db, la) != 0)
            return depth;
        depth++;
        da += la;
        db += lb;
        if (*da != '/' || *db != '/')
            return depth;
        da++;
        db++;
    }
}

static int read_int(const char *dir, const char *file, int dflt)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    int v = dflt;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = dflt;
        fclose(f);
    }
    return v;
}

int tern_gpu_nearest(const char *sysfs_root, const char *gpu_pci, const tern_device_info *devs,
                     int ndev, char *out, size_t outlen)
{
    char p[PATH_MAX], gpu[PATH_MAX], nic[PATH_MAX];
    if (out && outlen)
        out[0] = '\0';
    const char *root = sysfs_root && *sysfs_root ? sysfs_root : "/sys";
    snprintf(p, sizeof p, "%s/bus/pci/devices/%s", root, gpu_pci ? gpu_pci : "");
    if (!gpu_pci || !realpath(p, gpu))
        return TERN_ERR_NOT_FOUND;
    int gnuma = read_int(gpu, "numa_node", -1);
    int best = -1, best_depth = 0, best_numa = 0;
    for (int i = 0; i < ndev; i++) {
        if (!devs[i].sysfs_path[0])
            continue;
        snprintf(p, sizeof p, "%s/%s", root, devs[i].sysfs_path);
        if (!realpath(p, nic))
            continue;
        int depth = common_depth(gpu, nic);
        int numa = gnuma >= 0 && read_int(nic, "numa_node", -1) == gnuma;
        if (depth > best_depth || (depth == best_depth && numa > best_numa)) {
            best = i;
            best_depth = depth;
            best_numa = numa;
        }
    }
    if (best < 0 || (best_depth == 0 && !best_numa))
        return TERN_ERR_NOT_FOUND;
    tern_strlcpy(out, devs[best].name, outlen);
    return best;
}
