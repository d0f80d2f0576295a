/* tests/helpers/efa_peer.c: a target engine in its own process for
 * tests/test_efa_integration.c (public API only).
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
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tern/tern.h"

#define GUARD (64u << 10)
#define LEN_A ((17u << 20) + 4096)
#define LEN_B (1u << 20)

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
        else if (!strcmp(t, "tcp"))
            entry = "  - name: tcp\n";
        else
            return NULL;
        used += (size_t)snprintf(yaml + used, sizeof yaml - used, "%s", entry);
    }
    return yaml;
}

static long check_guards(const uint8_t *map, size_t total)
{
    for (size_t i = 0; i < GUARD; i++) {
        if (map[i] != 0xA5)
            return (long)i;
        if (map[total - GUARD + i] != 0xA5)
            return (long)(total - GUARD + i);
    }
    return -1;
}

int main(int argc, char **argv)
{
    char err[1024] = "";
    const char *yaml = efa_peer_yaml(argc > 1 ? argv[1] : "efa-tcp");
    if (!yaml) {
        fprintf(stderr, "efa_peer: unknown transport list %s\n", argv[1]);
        return 2;
    }
    tern_engine *e = tern_engine_create_from_yaml(yaml, "efa_peer", err, sizeof err);
    if (!e) {
        fprintf(stderr, "efa_peer: engine: %s\n", err);
        return 1;
    }
    size_t total = 2 * GUARD + LEN_A + LEN_B;
    uint8_t *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return 1;
    memset(map, 0xA5, total);
    uint8_t *a = map + GUARD, *b = a + LEN_A;
    memset(a, 0, LEN_A + LEN_B);
    if (tern_register_memory(e, a, LEN_A, NULL) || tern_register_memory(e, b, LEN_B, NULL)) {
        fprintf(stderr, "efa_peer: register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    printf("READY %s %" PRIuPTR " %u %" PRIuPTR " %u\n", tern_engine_server_name(e),
           (uintptr_t)a, LEN_A, (uintptr_t)b, LEN_B);
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "CHECK", 5)) {
            long bad = check_guards(map, total);
            if (bad < 0)
                printf("CANARY ok\n");
            else
                printf("CANARY bad %ld\n", bad);
            fflush(stdout);
        } else if (!strncmp(line, "EXIT", 4)) {
            break;
        }
    }
    tern_unregister_memory(e, a);
    tern_unregister_memory(e, b);
    tern_engine_destroy(e);
    munmap(map, total);
    return 0;
}
