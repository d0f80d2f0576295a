/* tests/support/helpers/shm_peer.c: a target engine in its own process for the
 * same-host transport's tests (public API only).
 *
 *   tern-test-shm-peer [TRANSPORTS [SERVER_NAME [fixed]]]
 *
 * TRANSPORTS is "shm,tcp" (default), "shm" or "tcp"; SERVER_NAME defaults
 * to 127.0.0.1:0 (a restarted peer passes its old name to come back at the
 * same address; with "fixed" its buffers also come back at the same
 * addresses, so only the process behind them changes).  Memory: GUARD | A | B | GUARD as in peer_common.h, but A
 * is SHM_LEN_A (64 MiB + 64 KiB, so one request of 64 MiB + 3 fits); A and
 * B registered; it prints
 *   READY <server name> <addr A> <len A> <addr B> <len B>
 * and answers on stdin:
 *   CHECK   -> "CANARY ok" / "CANARY bad <offset>" (guards untouched?)
 *   UNREG_B -> unregisters B, fills it with 0x3C, answers "UNREG ok"
 *   REREG_B -> registers B again (holding what it holds), answers "REREG ok"
 *   REREG_A -> fills A with 0x3C, registers it again, answers "REREG ok"
 *   UNREG_A_LIVE -> once a copy began writing A (its first byte is no longer
 *              0x3C; 10 s at most), unregisters A and fills it with 0x3C:
 *              "UNREG ok", or "UNREG idle" when nothing began
 *   CHECK_A -> "A ok" while A holds only 0x3C, else "A bad <offset>"
 *   CHECK_B -> "B ok" while B still holds only 0x3C, else "B bad <offset>"
 *   PID     -> "PID <getpid()>"
 *   EXIT    -> unregisters, destroys the engine, exits 0 (EOF does the same).
 * $TERN_TEST_SHM_MEM picks the memory: unset, private anonymous memory;
 * "memfd", the same layout in one shared-memory file sealed against
 * shrinking (a peer maps it, docs/protocol.md); "alloc", A and B from
 * tern_alloc_memory (no guards: CHECK answers "CANARY none"). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "peer_common.h"

#define SHM_LEN_A ((64u << 20) + (64u << 10))

static long check_fill(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (b[i] != 0x3C)
            return (long)i;
    return -1;
}

/* A's first byte changes when a copy into A begins (process_vm_writev
 * writes upwards from there). */
static int wait_written(const volatile uint8_t *a)
{
    for (int i = 0; i < 10 * 1000 * 100; i++) {
        if (*a != 0x3C)
            return 1;
        usleep(10);
    }
    return 0;
}

static void serve_a(tern_engine *e, const char *line, uint8_t *a, int *a_registered)
{
    if (!strncmp(line, "REREG_A", 7)) {
        memset(a, 0x3C, SHM_LEN_A);
        int rc = *a_registered ? 0 : tern_register_memory(e, a, SHM_LEN_A, NULL);
        *a_registered = rc == 0;
        printf("REREG %s\n", rc == 0 ? "ok" : tern_engine_last_error(e));
    } else if (!strncmp(line, "UNREG_A_LIVE", 12)) {
        int live = wait_written(a);
        int rc = tern_unregister_memory(e, a);
        *a_registered = 0;
        memset(a, 0x3C, SHM_LEN_A);
        printf("UNREG %s\n", rc ? tern_engine_last_error(e) : live ? "ok" : "idle");
    } else if (!strncmp(line, "CHECK_A", 7)) {
        long bad = check_fill(a, SHM_LEN_A);
        if (bad < 0)
            printf("A ok\n");
        else
            printf("A bad %ld\n", bad);
    }
}

static void serve(tern_engine *e, uint8_t *map, size_t total, uint8_t *a, int *a_registered,
                  uint8_t *b, int *b_registered)
{
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "REREG_A", 7) || !strncmp(line, "UNREG_A", 7) ||
            !strncmp(line, "CHECK_A", 7)) {
            serve_a(e, line, a, a_registered);
        } else if (!strncmp(line, "CHECK_B", 7)) {
            long bad = check_fill(b, LEN_B);
            if (bad < 0)
                printf("B ok\n");
            else
                printf("B bad %ld\n", bad);
        } else if (!strncmp(line, "CHECK", 5)) {
            long bad = map ? peer_check_guards(map, total) : -1;
            if (!map)
                printf("CANARY none\n");
            else if (bad < 0)
                printf("CANARY ok\n");
            else
                printf("CANARY bad %ld\n", bad);
        } else if (!strncmp(line, "UNREG_B", 7)) {
            int rc = tern_unregister_memory(e, b);
            *b_registered = 0;
            memset(b, 0x3C, LEN_B);
            printf("UNREG %s\n", rc == 0 ? "ok" : tern_engine_last_error(e));
        } else if (!strncmp(line, "REREG_B", 7)) {
            int rc = *b_registered ? 0 : tern_register_memory(e, b, LEN_B, NULL);
            *b_registered = rc == 0;
            printf("REREG %s\n", rc == 0 ? "ok" : tern_engine_last_error(e));
        } else if (!strncmp(line, "PID", 3)) {
            printf("PID %ld\n", (long)getpid());
        } else if (!strncmp(line, "EXIT", 4)) {
            break;
        }
        fflush(stdout);
    }
}

/* GUARD | A | B | GUARD, filled with canaries: private memory, or one
 * shared-memory file sealed against shrinking (memfd). */
static uint8_t *peer_map(size_t total, int fixed, int memfd)
{
    void *at = fixed ? (void *)(uintptr_t)0x6e0000000000ull : NULL;
    int fd = -1;
    if (memfd) { /* kept open for the process's life: the transport publishes it */
        fd = memfd_create("shm-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, (off_t)total) != 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
            return NULL;
    }
    uint8_t *map = mmap(at, total, PROT_READ | PROT_WRITE,
                        (memfd ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS) |
                            (fixed ? MAP_FIXED_NOREPLACE : 0),
                        fd, 0);
    if (map == MAP_FAILED)
        return NULL;
    memset(map, 0xA5, total);
    return map;
}

int main(int argc, char **argv)
{
    const char *xp = argc > 1 ? argv[1] : "shm,tcp";
    const char *name = argc > 2 ? argv[2] : "127.0.0.1:0";
    char yaml[512], list[128] = "";
    char copy[64];
    snprintf(copy, sizeof copy, "%s", xp);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        snprintf(list + strlen(list), sizeof list - strlen(list), "  - name: %s\n", t);
    snprintf(yaml, sizeof yaml,
             "server_name: %s\nmetadata: p2p\ntransports:\n%sslice_size: 64K\nlog_level: warn\n",
             name, list);
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "shm_peer", err, sizeof err);
    if (!e) {
        fprintf(stderr, "shm_peer: engine: %s\n", err);
        return 1;
    }
    size_t total = 2 * GUARD + SHM_LEN_A + LEN_B;
    const char *mem = getenv("TERN_TEST_SHM_MEM");
    int alloc = mem && !strcmp(mem, "alloc");
    uint8_t *map = NULL, *a, *b;
    if (alloc) {
        if (tern_alloc_memory(e, SHM_LEN_A, NULL, NULL, (void **)&a) ||
            tern_alloc_memory(e, LEN_B, NULL, NULL, (void **)&b)) {
            fprintf(stderr, "shm_peer: alloc: %s\n", tern_engine_last_error(e));
            return 1;
        }
    } else {
        map = peer_map(total, argc > 3 && !strcmp(argv[3], "fixed"), mem && !strcmp(mem, "memfd"));
        if (!map)
            return 1;
        a = map + GUARD;
        b = a + SHM_LEN_A;
        memset(a, 0, SHM_LEN_A + LEN_B);
        if (tern_register_memory(e, a, SHM_LEN_A, NULL) ||
            tern_register_memory(e, b, LEN_B, NULL)) {
            fprintf(stderr, "shm_peer: register: %s\n", tern_engine_last_error(e));
            return 1;
        }
    }
    int a_registered = 1, b_registered = 1;
    printf("READY %s %" PRIuPTR " %u %" PRIuPTR " %u\n", tern_engine_server_name(e),
           (uintptr_t)a, SHM_LEN_A, (uintptr_t)b, LEN_B);
    fflush(stdout);
    serve(e, map, total, a, &a_registered, b, &b_registered);
    if (a_registered)
        tern_unregister_memory(e, a);
    if (b_registered)
        tern_unregister_memory(e, b);
    tern_engine_destroy(e); /* frees tern_alloc_memory's */
    if (map)
        munmap(map, total);
    return 0;
}
