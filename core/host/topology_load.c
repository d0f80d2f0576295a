/* core/host/topology_load.c: see topology_load.h. */
#include "host/topology_load.h"

#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/util.h"

static int topology_from_file(const tern_config *c, const tern_device_info *devs, int ndev,
                              tern_topology **out, char *err, size_t errlen)
{
    char *json = NULL, msg[512];
    int rc = tern_file_read_capped(c->topology, TERN_TOPOLOGY_FILE_MAX, &json, NULL, msg,
                                   sizeof msg);
    if (rc)
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "topology: %s", msg);
    rc = tern_topology_from_json(json, devs, ndev, c->select_policy, out, msg, sizeof msg);
    free(json);
    if (rc)
        return tern_errf(err, errlen, rc, "topology %s: %s", c->topology, msg);
    rc = tern_topology_restrict(*out, (const char *const *)c->device_allow, c->ndevice_allow,
                                err, errlen);
    if (rc) {
        tern_topology_free(*out);
        *out = NULL;
    }
    return rc;
}

int tern_topology_load(const tern_config *c, const tern_device_info *devs, int ndev,
                       tern_topology **out, char *err, size_t errlen)
{
    *out = NULL;
    if (c->topology && *c->topology && strcmp(c->topology, "auto") != 0)
        return topology_from_file(c, devs, ndev, out, err, errlen);
    return tern_topology_discover(c->topology_sysfs_root ? c->topology_sysfs_root : "/sys",
                                  devs, ndev, (const char *const *)c->device_allow,
                                  c->ndevice_allow, c->select_policy, out, err, errlen);
}
