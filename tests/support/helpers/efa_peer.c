/* tests/support/helpers/efa_peer.c: a target engine in its own process for
 * tests/transports/test_efa_integration.c (public API only).
 *
 *   tern-test-efa-peer <transports>
 *
 * <transports> is a comma-separated preference list: "efa-tcp" (efa with
 * provider tcp on lo), "efa-shm", "tcp".  The peer maps
 * GUARD | A | B | GUARD, fills the guards with canaries, registers A and B,
 * prints  READY <server name> <addr A> <len A> <addr B> <len B>  and then
 * answers on stdin:  CHECK -> "CANARY ok" / "CANARY bad <offset>",
 * EXIT (or EOF) -> cleans up and exits 0. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "peer_common.h"

/* YAML for a preference list like "efa-tcp,tcp"; NULL if a name is unknown. */
static char *efa_peer_yaml(const char *list)
{
    static char yaml[2048];
    char copy[256];
    size_t used = (size_t)snprintf(yaml, sizeof yaml,
                                   "server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                   "slice_size: 64K\nio_timeout_ms: 3000\n"
                                   "log_level: warn\ntransports:\n");
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const char *entry;
        if (!strcmp(t, "efa-tcp"))
            entry = "  - name: efa\n    provider: tcp\n    iface: lo\n";
        else if (!strcmp(t, "efa-shm"))
            entry = "  - name: efa\n    provider: shm\n";
        else if (!strcmp(t, "efa-shm-rails3"))
            entry = "  - name: efa\n    provider: shm\n    rails: 3\n";
        else if (!strcmp(t, "tcp"))
            entry = "  - name: tcp\n";
        else
            return NULL;
        used += (size_t)snprintf(yaml + used, sizeof yaml - used, "%s", entry);
    }
    return yaml;
}

int main(int argc, char **argv)
{
    const char *yaml = efa_peer_yaml(argc > 1 ? argv[1] : "efa-tcp");
    if (!yaml) {
        fprintf(stderr, "efa_peer: unknown transport list %s\n", argv[1]);
        return 2;
    }
    return peer_serve(yaml, "efa_peer");
}
