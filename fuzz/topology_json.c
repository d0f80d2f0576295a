/* fuzz/topology_json.c: tern_topology_from_json (a topology file or a
 * peer's priority_matrix) with no device list and with a small one, then a
 * selection for a few locations and retries on what was built. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tern/transport.h"
#include "host/topology.h"

static void exercise(tern_topology *t)
{
    static const char *const locs[] = {"cpu:0", "cpu:1", "*", "gpu:7", ""};
    int n = tern_topology_device_count(t);
    for (int i = 0; i < n; i++)
        if (!tern_topology_device_name(t, i))
            abort();
    for (size_t l = 0; l < sizeof locs / sizeof locs[0]; l++)
        for (int r = 0; r < 4; r++) {
            int dev = tern_topology_select(t, locs[l], r, NULL);
            if (dev >= n)
                abort();
        }
    char *j = tern_topology_to_json(t);
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    char *json = malloc(size + 1);
    memcpy(json, data, size);
    json[size] = 0;
    tern_device_info devs[3] = {{.name = "mlx5_0", .numa_node = 0},
                                {.name = "mlx5_1", .numa_node = 1},
                                {.name = "lo", .numa_node = -1}};
    for (int pass = 0; pass < 2; pass++) {
        tern_topology *t = NULL;
        if (tern_topology_from_json(json, pass ? devs : NULL, pass ? 3 : 0, pass, &t, err,
                                    sizeof err) == 0) {
            exercise(t);
            tern_topology_free(t);
        }
    }
    free(json);
    return 0;
}
