/* tests/system/vm/rdma_vm_xfabric_peer.c: one host of rdma_vm_xfabric.sh
 * (public API only).
 *
 *   tern-test-xfabric-peer CONFIG SERVER_NAME INDEX GO_FILE CHECK_FILE HOST...
 *
 * HOST... are the server names of every host, this one at INDEX.  The
 * engine (CONFIG, named SERVER_NAME) registers one buffer, "xfabric":
 *   slot 0 .. n-1   written by host i (slot i), checked here at the end
 *   slot n          this host's own pattern, read by every peer
 *   slot n+1, n+2   the source and the destination of this host's requests
 * and prints "READY <server name>".  When GO_FILE exists, for each other
 * host p: open its segment, name the transport, WRITE this host's pattern
 * into p's slot INDEX, READ it back and READ p's own slot, each compared
 * byte by byte (the segment stays open until the engine is destroyed;
 * TERN_XFABRIC_CLOSE_EACH=1 closes it after its pair); one line per peer:
 *   PAIR <p> <transport> ok
 *   PAIR <p> <transport or -> FAIL <why>
 * The requests start at an odd offset and are cut into odd-sized blocks, so
 * each ends in a short slice.  When CHECK_FILE exists (every host is done),
 * the slots the other hosts wrote are checked here:
 *   CHECK ok | CHECK FAIL slot <i> offset <o>
 * then the engine is destroyed.  Exit 0 when every line said ok. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

#define SLOT ((size_t)2 << 20)  /* bytes per slot */
#define START 3                 /* requests start at this offset in a slot */
#define LEN (SLOT - START - 5)  /* and move this many bytes */
#define BLOCK 262147u           /* bytes per request (a prime) */
#define MAX_HOSTS 16

/* The byte at offset o of what host w writes to host t (w == t: t's own). */
static uint8_t pattern(int w, int t, size_t o)
{
    uint32_t x = (uint32_t)o * 2654435761u + (uint32_t)w * 97u + (uint32_t)t * 13u;
    return (uint8_t)(x >> 24 ^ x >> 7 ^ (uint32_t)o);
}

static void fill(uint8_t *p, int w, int t)
{
    for (size_t o = 0; o < LEN; o++)
        p[o] = pattern(w, t, o);
}

/* Offset of the first byte that differs, or -1. */
static long compare(const uint8_t *p, int w, int t)
{
    for (size_t o = 0; o < LEN; o++)
        if (p[o] != pattern(w, t, o))
            return (long)o;
    return -1;
}

static void wait_file(const char *path)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    while (access(path, F_OK) != 0)
        nanosleep(&ts, NULL);
}

/* One batch: LEN bytes between local and remote, in BLOCK-sized requests. */
static int move(tern_engine *e, tern_segment_id seg, tern_opcode op, uint8_t *local,
                uint64_t remote, char *why, size_t whylen)
{
    tern_request r[LEN / BLOCK + 1];
    size_t n = 0;
    for (size_t o = 0; o < LEN; o += BLOCK, n++)
        r[n] = (tern_request){.opcode = op, .local = local + o, .segment = seg,
                              .remote = remote + o,
                              .length = LEN - o < BLOCK ? LEN - o : BLOCK,
                              .timeout_ms = 60000};
    tern_batch *b = tern_batch_alloc(e, n);
    if (!b) {
        snprintf(why, whylen, "tern_batch_alloc: %s", tern_engine_last_error(e));
        return -1;
    }
    int rc = tern_batch_submit(b, r, n);
    if (rc == (int)n)
        rc = tern_batch_wait(b, 90000);
    else if (rc >= 0)
        rc = -1;
    if (rc != 0) {
        const char *m = "";
        for (size_t i = 0; i < n && !*m; i++)
            m = tern_batch_error(b, i);
        snprintf(why, whylen, "%s %d: %s", op == TERN_WRITE ? "WRITE" : "READ", rc,
                 *m ? m : tern_engine_last_error(e));
    }
    tern_batch_free(b);
    return rc ? -1 : 0;
}

/* WRITE into p's slot `me`, READ it back, READ p's own slot. */
/* TERN_XFABRIC_CLOSE_EACH set, and not empty or 0. */
static int close_each(void)
{
    const char *v = getenv("TERN_XFABRIC_CLOSE_EACH");
    return v && *v && strcmp(v, "0") != 0;
}

static int pair(tern_engine *e, uint8_t *buf, int me, int n, int p, const char *name)
{
    char transport[64] = "-", why[512] = "";
    uint8_t *src = buf + (size_t)(n + 1) * SLOT, *dst = buf + (size_t)(n + 2) * SLOT;
    tern_segment_id seg = tern_segment_open(e, name);
    tern_buffer_info bi;
    long bad;
    if (seg < 0) {
        snprintf(why, sizeof why, "open: %s", tern_engine_last_error(e));
        goto out;
    }
    if (tern_segment_transport(e, seg, transport, sizeof transport) < 0)
        snprintf(transport, sizeof transport, "-");
    if (tern_segment_buffer_find(e, seg, "xfabric", &bi) < 0) {
        snprintf(why, sizeof why, "no buffer xfabric: %s", tern_engine_last_error(e));
        goto out;
    }
    fill(src + START, me, p);
    if (move(e, seg, TERN_WRITE, src + START, bi.addr + (uint64_t)me * SLOT + START, why,
             sizeof why))
        goto out;
    memset(dst, 0, SLOT);
    if (move(e, seg, TERN_READ, dst + START, bi.addr + (uint64_t)me * SLOT + START, why,
             sizeof why))
        goto out;
    if ((bad = compare(dst + START, me, p)) >= 0) {
        snprintf(why, sizeof why, "WRITE then READ back: byte %ld differs", bad);
        goto out;
    }
    memset(dst, 0, SLOT);
    if (move(e, seg, TERN_READ, dst + START, bi.addr + (uint64_t)n * SLOT + START, why,
             sizeof why))
        goto out;
    if ((bad = compare(dst + START, p, p)) >= 0)
        snprintf(why, sizeof why, "READ of the peer's own slot: byte %ld differs", bad);
out:
    /* The segment stays open (tern_engine_destroy closes it) unless
     * TERN_XFABRIC_CLOSE_EACH is set and not 0: then the peer finds the
     * endpoints it had to this engine closed on our side when it opens
     * this engine in turn (README.md, rdma_vm_xfabric). */
    if (seg >= 0 && close_each())
        tern_segment_close(e, seg);
    if (*why)
        printf("PAIR %s %s FAIL %s\n", name, transport, why);
    else
        printf("PAIR %s %s ok\n", name, transport);
    fflush(stdout);
    return *why ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 7 || argc - 6 > MAX_HOSTS) {
        fprintf(stderr, "usage: %s CONFIG SERVER_NAME INDEX GO_FILE CHECK_FILE HOST...\n",
                argv[0]);
        return 2;
    }
    const char *config = argv[1], *server_name = argv[2], *go = argv[4], *check = argv[5];
    int me = atoi(argv[3]), n = argc - 6, fails = 0;
    char **hosts = argv + 6;
    if (me < 0 || me >= n) {
        fprintf(stderr, "INDEX %d is not one of the %d hosts\n", me, n);
        return 2;
    }
    char err[1024] = "";
    tern_engine *e = tern_engine_create_as(config, server_name, err, sizeof err);
    if (!e) {
        printf("FAIL engine: %s\n", err);
        return 1;
    }
    size_t total = (size_t)(n + 3) * SLOT;
    uint8_t *buf = malloc(total);
    if (!buf) {
        printf("FAIL out of memory\n");
        return 1;
    }
    memset(buf, 0, total);
    fill(buf + (size_t)n * SLOT + START, me, me);
    if (tern_register_memory_named(e, buf, total, NULL, "xfabric") < 0) {
        printf("FAIL register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    printf("READY %s\n", tern_engine_server_name(e));
    fflush(stdout);

    wait_file(go);
    for (int p = 0; p < n; p++)
        if (p != me)
            fails += pair(e, buf, me, n, p, hosts[p]) != 0;

    wait_file(check);
    long bad = -1;
    int slot = 0;
    for (; slot < n && bad < 0; slot++)
        if (slot != me)
            bad = compare(buf + (size_t)slot * SLOT + START, slot, me);
    if (bad >= 0) {
        printf("CHECK FAIL slot %d offset %ld\n", slot - 1, bad);
        fails++;
    } else {
        printf("CHECK ok\n");
    }
    fflush(stdout);
    tern_unregister_memory(e, buf);
    tern_engine_destroy(e);
    free(buf);
    return fails ? 1 : 0;
}
