/* tests/helpers/tcp_peer.c: a target engine in its own process for
 * tests/test_tcp_integration.c (public API only).
 *
 * It maps GUARD | A | B | GUARD, fills the guards with canary bytes,
 * registers A and B as two adjacent buffers, prints
 *   READY <server name> <addr A> <len A> <addr B> <len B>
 * and then answers commands on stdin:
 *   CHECK  -> "CANARY ok" or "CANARY bad <offset>" (guards untouched?)
 *   EXIT   -> unregisters, destroys the engine, exits 0 (EOF does the same). */
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

static const char *yaml =
    "server_name: 127.0.0.1:0\n"
    "metadata: p2p\n"
    "transports:\n"
    "  - name: tcp\n"
    "slice_size: 64K\n"
    "log_level: warn\n";

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

int main(void)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "tcp_peer", err, sizeof err);
    if (!e) {
        fprintf(stderr, "tcp_peer: engine: %s\n", err);
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
        fprintf(stderr, "tcp_peer: register: %s\n", tern_engine_last_error(e));
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
