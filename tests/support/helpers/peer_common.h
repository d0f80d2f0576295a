/* tests/support/helpers/peer_common.h: the body shared by the integration tests'
 * target programs (tcp_peer.c, efa_peer.c; public API only).
 *
 * peer_serve() creates an engine from the caller's YAML, maps
 * GUARD | A | B | GUARD, fills the guards with canary bytes, registers A and
 * B as two adjacent buffers, prints
 *   READY <server name> <addr A> <len A> <addr B> <len B>
 * and then answers commands on stdin:
 *   CHECK  -> "CANARY ok" or "CANARY bad <offset>" (guards untouched?)
 *   SHRINK -> B is unregistered and its first half registered again; the
 *             second half is filled with canaries and checked by CHECK from
 *             then on; answers "SHRUNK <new len B>".  An initiator that
 *             opened the segment before still believes B is whole, so its
 *             own range check passes and only this target's can refuse.
 *   EXIT   -> unregisters, destroys the engine, exits 0 (EOF does the same).
 * The harness on the other side is tests/support/integration_common.h. */
#ifndef TERN_TESTS_PEER_COMMON_H
#define TERN_TESTS_PEER_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tern/tern.h"

#define GUARD (64u << 10)
#define LEN_A ((17u << 20) + 4096)
#define LEN_B (1u << 20)

/* Offset of the first changed canary byte, or -1 if the guards are intact. */
static inline long peer_check_guards(const uint8_t *map, size_t total)
{
    for (size_t i = 0; i < GUARD; i++) {
        if (map[i] != 0xA5)
            return (long)i;
        if (map[total - GUARD + i] != 0xA5)
            return (long)(total - GUARD + i);
    }
    return -1;
}

/* Offset in map of the first changed canary in B's released half, or -1. */
static inline long peer_check_released(const uint8_t *map, const uint8_t *b, int shrunk)
{
    for (size_t i = LEN_B / 2; shrunk && i < LEN_B; i++)
        if (b[i] != 0xA5)
            return (long)(b + i - map);
    return -1;
}

/* Answers CHECK and SHRINK until EXIT or EOF on stdin. */
static inline void peer_command_loop(tern_engine *e, const uint8_t *map, size_t total,
                                     uint8_t *b)
{
    char line[128];
    int shrunk = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "CHECK", 5)) {
            long bad = peer_check_guards(map, total);
            if (bad < 0)
                bad = peer_check_released(map, b, shrunk);
            if (bad < 0)
                printf("CANARY ok\n");
            else
                printf("CANARY bad %ld\n", bad);
            fflush(stdout);
        } else if (!strncmp(line, "SHRINK", 6) && !shrunk) {
            int rc = tern_unregister_memory(e, b);
            memset(b + LEN_B / 2, 0xA5, LEN_B / 2);
            if (rc == 0)
                rc = tern_register_memory(e, b, LEN_B / 2, NULL);
            shrunk = 1;
            if (rc)
                printf("SHRINK failed: %s\n", tern_engine_last_error(e));
            else
                printf("SHRUNK %u\n", LEN_B / 2);
            fflush(stdout);
        } else if (!strncmp(line, "EXIT", 4)) {
            break;
        }
    }
}

/* The whole target program; who names it in messages and as the app name.
 * Returns the process exit code. */
static inline int peer_serve(const char *yaml, const char *who)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, who, err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s: engine: %s\n", who, err);
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
        fprintf(stderr, "%s: register: %s\n", who, tern_engine_last_error(e));
        return 1;
    }
    printf("READY %s %" PRIuPTR " %u %" PRIuPTR " %u\n", tern_engine_server_name(e),
           (uintptr_t)a, LEN_A, (uintptr_t)b, LEN_B);
    fflush(stdout);
    peer_command_loop(e, map, total, b);
    tern_unregister_memory(e, a);
    tern_unregister_memory(e, b);
    tern_engine_destroy(e);
    munmap(map, total);
    return 0;
}

#endif
