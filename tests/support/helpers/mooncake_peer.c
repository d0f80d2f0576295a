/* tests/support/helpers/mooncake_peer.c: the tern side of the Mooncake
 * compatibility tests (tests/system/mooncake/), public API only.
 *
 *   tern-test-mooncake-peer target [--config FILE]
 *     An engine whose tcp transport serves Mooncake's format; maps
 *     GUARD | BUF (64 MiB) | GUARD with canary guards, fills BUF with a
 *     pattern, registers it, prints "READY <server name> <addr> <len>" and
 *     answers on stdin:
 *       CHECK          -> "CANARY ok" | "CANARY bad <offset>"
 *       EXPECT <n> <b> -> "EXPECT ok" when BUF[0,n) is all byte b and the
 *                         rest still holds the pattern, else "EXPECT bad <off>"
 *       PATTERN        -> "PATTERN ok" | "PATTERN bad <off>" (BUF untouched)
 *       NOTES          -> "NOTE <name> <msg>" per notification received, then "NOTES end"
 *       EXIT
 *   (TERN_MC_PEER_CONFIG names another engine YAML for either mode, e.g.
 *   rdma in the Soft-RoCE VM)
 *   tern-test-mooncake-peer initiator <segment> <block> <count> [notify]
 *     Opens the segment (a Mooncake engine's server name), WRITEs <count>
 *     blocks of a pattern at the start of its first buffer, READs them back
 *     into zeroed memory and compares every byte; then READs the same range
 *     again through a second local buffer.  With "notify", sends a
 *     notification named "tern" with message "hello-from-tern".  Prints
 *     "PASS ..." and exits 0, or names what failed and exits 1. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tern/tern.h"

#define GUARD (64u << 10)
#define BUF_LEN (64u << 20)

static uint8_t pat(size_t i, unsigned seed) { return (uint8_t)((i * 131u + seed * 7u + 11u) >> 1); }

static const char *target_yaml =
    "server_name: 127.0.0.1:0\n"
    "metadata: p2p\n"
    "transports:\n"
    "  - name: tcp\n"
    "    mooncake_port: 0\n"
    "log_level: warn\n";

static const char *initiator_yaml =
    "server_name: 127.0.0.1:0\n"
    "metadata: p2p\n"
    "transports:\n"
    "  - name: tcp\n"
    "log_level: warn\n";

static tern_engine *make_engine(const char *yaml, const char *file)
{
    char err[1024] = "";
    tern_engine *e = file ? tern_engine_create(file, err, sizeof err)
                          : tern_engine_create_from_yaml(yaml, "mooncake_peer", err, sizeof err);
    if (!e)
        fprintf(stderr, "mooncake_peer: engine: %s\n", err);
    return e;
}

static long first_diff(const uint8_t *buf, size_t from, size_t to, int byte, unsigned seed)
{
    for (size_t i = from; i < to; i++)
        if (buf[i] != (byte >= 0 ? (uint8_t)byte : pat(i, seed)))
            return (long)i;
    return -1;
}

static void print_notes(tern_engine *e)
{
    char from[256], name[256], msg[4200];
    while (tern_notify_recv(e, from, sizeof from, name, sizeof name, msg, sizeof msg) == 1)
        printf("NOTE %s %s\n", name, msg);
    printf("NOTES end\n");
}

static int run_target(const char *file)
{
    tern_engine *e = make_engine(target_yaml, file);
    if (!e)
        return 1;
    size_t total = 2 * GUARD + BUF_LEN;
    uint8_t *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return 1;
    memset(map, 0xA5, total);
    uint8_t *buf = map + GUARD;
    for (size_t i = 0; i < BUF_LEN; i++)
        buf[i] = pat(i, 0);
    if (tern_register_memory(e, buf, BUF_LEN, NULL)) {
        fprintf(stderr, "mooncake_peer: register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    printf("READY %s %" PRIuPTR " %u\n", tern_engine_server_name(e), (uintptr_t)buf, BUF_LEN);
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        unsigned long n = 0;
        int b = 0;
        if (!strncmp(line, "CHECK", 5)) {
            long bad = first_diff(map, 0, GUARD, 0xA5, 0);
            if (bad < 0)
                bad = first_diff(map, GUARD + BUF_LEN, total, 0xA5, 0);
            printf(bad < 0 ? "CANARY ok\n" : "CANARY bad %ld\n", bad);
        } else if (sscanf(line, "EXPECT %lu %d", &n, &b) == 2 && n <= BUF_LEN) {
            long bad = first_diff(buf, 0, n, b, 0);
            if (bad < 0)
                bad = first_diff(buf, n, BUF_LEN, -1, 0);
            printf(bad < 0 ? "EXPECT ok\n" : "EXPECT bad %ld\n", bad);
        } else if (!strncmp(line, "PATTERN", 7)) {
            long bad = first_diff(buf, 0, BUF_LEN, -1, 0);
            printf(bad < 0 ? "PATTERN ok\n" : "PATTERN bad %ld\n", bad);
        } else if (!strncmp(line, "NOTES", 5)) {
            print_notes(e);
        } else if (!strncmp(line, "EXIT", 4)) {
            break;
        }
        fflush(stdout);
    }
    tern_unregister_memory(e, buf);
    tern_engine_destroy(e);
    munmap(map, total);
    return 0;
}

/* The address of the segment's first buffer, from its descriptor. */
static int remote_base(tern_engine *e, tern_segment_id id, uint64_t *addr, uint64_t *len)
{
    char *json = NULL;
    if (tern_segment_descriptor(e, id, &json) < 0 || !json)
        return -1;
    json_object *o = json_tokener_parse(json), *bufs, *b0, *a, *l;
    free(json);
    int ok = o && json_object_object_get_ex(o, "buffers", &bufs) &&
             json_object_array_length(bufs) > 0 && (b0 = json_object_array_get_idx(bufs, 0)) &&
             json_object_object_get_ex(b0, "addr", &a) &&
             json_object_object_get_ex(b0, "length", &l);
    if (ok) {
        *addr = (uint64_t)json_object_get_int64(a);
        *len = (uint64_t)json_object_get_int64(l);
    }
    json_object_put(o);
    return ok ? 0 : -1;
}

static int transfer(tern_engine *e, tern_segment_id id, int op, uint8_t *local, uint64_t remote,
                    size_t block, size_t count)
{
    tern_batch *b = tern_batch_alloc(e, count);
    if (!b)
        return -1;
    tern_request *r = calloc(count, sizeof *r);
    for (size_t i = 0; i < count; i++)
        r[i] = (tern_request){op, local + i * block, id, remote + i * block, block, 0};
    int rc = tern_batch_submit(b, r, count); /* n when all were taken */
    if (rc == (int)count)
        rc = tern_batch_wait(b, 60000);
    else if (rc >= 0)
        rc = TERN_ERR_INVAL;
    if (rc < 0)
        fprintf(stderr, "mooncake_peer: %s of %zu x %zu B: %s\n", op == TERN_WRITE ? "WRITE" : "READ",
                count, block, tern_batch_error(b, 0) ? tern_batch_error(b, 0)
                                                     : tern_engine_last_error(e));
    tern_batch_free(b);
    free(r);
    return rc < 0 ? -1 : 0;
}

static int run_initiator(const char *seg, size_t block, size_t count, int notify)
{
    tern_engine *e = make_engine(initiator_yaml, getenv("TERN_MC_PEER_CONFIG"));
    if (!e)
        return 1;
    size_t len = block * count;
    uint8_t *src = malloc(len), *dst = calloc(1, len);
    if (!src || !dst || tern_register_memory(e, src, len, NULL) ||
        tern_register_memory(e, dst, len, NULL)) {
        fprintf(stderr, "mooncake_peer: register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    unsigned seed = (unsigned)block ^ (unsigned)getpid();
    for (size_t i = 0; i < len; i++)
        src[i] = pat(i, seed);
    tern_segment_id id = tern_segment_open(e, seg);
    uint64_t base = 0, rlen = 0;
    if (id < 0 || remote_base(e, id, &base, &rlen) != 0) {
        fprintf(stderr, "mooncake_peer: open %s: %s\n", seg, tern_engine_last_error(e));
        return 1;
    }
    if (rlen < len) {
        fprintf(stderr, "mooncake_peer: %s's first buffer has %" PRIu64 " B, need %zu\n", seg,
                rlen, len);
        return 1;
    }
    if (transfer(e, id, TERN_WRITE, src, base, block, count) ||
        transfer(e, id, TERN_READ, dst, base, block, count))
        return 1;
    long bad = first_diff(dst, 0, len, -1, seed);
    if (bad >= 0) {
        fprintf(stderr, "mooncake_peer: byte %ld read back is 0x%02x, wrote 0x%02x\n", bad,
                dst[bad], pat((size_t)bad, seed));
        return 1;
    }
    if (notify && tern_notify_send(e, id, "tern", "hello-from-tern") != 0) {
        fprintf(stderr, "mooncake_peer: notify: %s\n", tern_engine_last_error(e));
        return 1;
    }
    printf("PASS write+read %zu x %zu B byte-exact%s\n", count, block,
           notify ? ", notification sent" : "");
    tern_unregister_memory(e, src);
    tern_unregister_memory(e, dst);
    tern_engine_destroy(e);
    free(src);
    free(dst);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "target"))
        return run_target(argc >= 4 && !strcmp(argv[2], "--config") ? argv[3]
                                                                     : getenv("TERN_MC_PEER_CONFIG"));
    if (argc >= 5 && !strcmp(argv[1], "initiator"))
        return run_initiator(argv[2], strtoul(argv[3], NULL, 0), strtoul(argv[4], NULL, 0),
                             argc >= 6 && !strcmp(argv[5], "notify"));
    fprintf(stderr, "usage: %s target [--config FILE] | initiator <segment> <block> <count> "
                    "[notify]\n", argv[0]);
    return 2;
}
