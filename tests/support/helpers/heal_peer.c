/* tests/support/helpers/heal_peer.c: a target engine for tests/system/test_heal.c (public
 * API only), restartable under the same name.
 *
 *   tern-test-heal-peer <server name> <tcp data port> <shift MiB> [loopx path]
 *
 * The engine listens on <server name> (port 0: any), its tcp transport on
 * <tcp data port> (0: ephemeral).  <shift MiB> maps that much memory first,
 * so the buffers land at other addresses than a previous run's; "fixed"
 * puts them at the same address in every run instead.  With a
 * loopx path, "loopx" (configured unable to reach any peer) comes first in
 * the transport list, tcp second.  It registers two adjacent buffers A and
 * B and prints
 *   READY <server name> <addr A> <len A> <addr B> <len B>
 * then answers on stdin: UNREG (unregister B -> "UNREG ok"), CHECK (guard
 * canaries), EXIT (or EOF). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <stdlib.h>

#include "peer_common.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s <server name> <tcp port> <shift MiB | fixed> [loopx path]\n",
                argv[0]);
        return 2;
    }
    /* "fixed": the buffers at the same address in every run, so a restarted
     * peer differs from the old one only in its data port. */
    int fixed = strcmp(argv[3], "fixed") == 0;
    size_t shift = fixed ? 0 : (size_t)strtoul(argv[3], NULL, 10) << 20;
    void *pad = shift ? mmap(NULL, shift, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : NULL;
    (void)pad; /* held for the process's life: the buffers go elsewhere */
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "server_name: %s\n"
             "metadata: p2p\n"
             "transports:\n"
             "%s%s%s"
             "  - name: tcp\n"
             "    port: %s\n"
             "slice_size: 64K\n"
             "log_level: error\n",
             argv[1], argc > 4 ? "  - name: loopx\n    path: " : "", argc > 4 ? argv[4] : "",
             argc > 4 ? "\n    unreachable: true\n" : "", argv[2]);
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "heal_peer", err, sizeof err);
    if (!e) {
        fprintf(stderr, "heal_peer: engine: %s\n", err);
        printf("FAIL %s\n", err);
        fflush(stdout);
        return 1;
    }
    size_t total = 2 * GUARD + LEN_A + LEN_B;
    uint8_t *map = mmap(fixed ? (void *)(uintptr_t)0x6e0000000000ull : NULL, total,
                        PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | (fixed ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    if (map == MAP_FAILED) {
        printf("FAIL mmap: %s\n", strerror(errno));
        fflush(stdout);
        return 1;
    }
    memset(map, 0xA5, total);
    uint8_t *a = map + GUARD, *b = a + LEN_A;
    memset(a, 0, LEN_A + LEN_B);
    if (tern_register_memory(e, a, LEN_A, NULL) || tern_register_memory(e, b, LEN_B, NULL)) {
        fprintf(stderr, "heal_peer: register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    printf("READY %s %" PRIuPTR " %u %" PRIuPTR " %u\n", tern_engine_server_name(e),
           (uintptr_t)a, LEN_A, (uintptr_t)b, LEN_B);
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "UNREG", 5)) {
            int rc = tern_unregister_memory(e, b);
            if (rc)
                printf("UNREG failed %d\n", rc);
            else
                printf("UNREG ok\n");
            fflush(stdout);
        } else if (!strncmp(line, "CHECK", 5)) {
            long bad = peer_check_guards(map, total);
            if (bad < 0)
                printf("CANARY ok\n");
            else
                printf("CANARY bad %ld\n", bad);
            fflush(stdout);
        } else if (!strncmp(line, "EXIT", 4)) {
            break;
        }
    }
    tern_engine_destroy(e);
    munmap(map, total);
    return 0;
}
