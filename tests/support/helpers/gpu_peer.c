/* tests/support/helpers/gpu_peer.c: two processes moving GPU (or host) memory over
 * tcp, byte for byte, for scripts/gpu-check.sh (public API only).
 *
 *   tern-test-gpu-peer target GPU LEN
 *     GPU -1: host memory.  Registers LEN bytes, prints
 *       READY <server name> <addr> <len> <location>
 *     then answers on stdin: SUM -> "SUM <fnv1a-64 of the buffer>", EXIT.
 *   tern-test-gpu-peer initiator GPU LEN SEGMENT ADDR
 *     Writes a pattern from its buffer into the target's at sizes and
 *     offsets that cross slice and staging-buffer boundaries, then the whole
 *     buffer; reads each range back into a second buffer and compares;
 *     prints "EXPECT <fnv1a-64>" (what the target must now hold) and
 *     "RESULT ok" or "RESULT bad ..." (exit 0 / 1).
 *   tern-test-gpu-peer refusals GPU
 *     Registers device memory of GPU under contradicting locations and host
 *     memory as cuda:GPU; prints one "REFUSED <case>: <message>" per refusal
 *     and "RESULT ok" when every one was refused and the right one accepted.
 * The engine: tcp only, slice_size 64K (so many slices per request). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern/tern.h"

static const char *yaml = "server_name: 127.0.0.1:0\n"
                          "transports:\n"
                          "  - name: tcp\n"
                          "    slice_size: 64K\n"
                          "log_level: warn\n";

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void *buffer(tern_engine *e, int gpu, size_t len)
{
    void *p = NULL;
    if (gpu < 0)
        p = calloc(1, len);
    else if (tern_gpu_alloc(e, gpu, len, &p) != 0)
        fprintf(stderr, "gpu_peer: allocating %zu B on GPU %d: %s\n", len, gpu,
                tern_engine_last_error(e));
    return p;
}

/* Host <-> buffer copies. */
static int put(tern_engine *e, int gpu, void *dst, const void *src, size_t n)
{
    if (gpu < 0) {
        memcpy(dst, src, n);
        return 0;
    }
    int rc = tern_gpu_copy(e, dst, src, n);
    if (rc)
        fprintf(stderr, "gpu_peer: copy: %s\n", tern_engine_last_error(e));
    return rc;
}

static tern_engine *engine(void)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "gpu_peer", err, sizeof err);
    if (!e)
        fprintf(stderr, "gpu_peer: engine: %s\n", err);
    return e;
}

static int target(int gpu, size_t len)
{
    tern_engine *e = engine();
    void *buf = e ? buffer(e, gpu, len) : NULL;
    if (!buf)
        return 2;
    if (tern_register_memory(e, buf, len, NULL) != 0) {
        fprintf(stderr, "gpu_peer: register: %s\n", tern_engine_last_error(e));
        return 2;
    }
    char loc[32];
    snprintf(loc, sizeof loc, gpu < 0 ? "host" : "cuda:%d", gpu);
    printf("READY %s %" PRIuPTR " %zu %s\n", tern_engine_server_name(e), (uintptr_t)buf, len,
           loc);
    fflush(stdout);
    char line[128];
    uint8_t *h = malloc(len);
    while (h && fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "SUM", 3) == 0) {
            if (put(e, gpu, h, buf, len) != 0)
                printf("SUM error\n");
            else
                printf("SUM %016" PRIx64 "\n", fnv(h, len));
            fflush(stdout);
        } else if (strncmp(line, "EXIT", 4) == 0) {
            break;
        }
    }
    free(h);
    tern_unregister_memory(e, buf);
    if (gpu >= 0)
        tern_gpu_free(e, buf);
    else
        free(buf);
    tern_engine_destroy(e);
    return 0;
}

static int move(tern_engine *e, tern_segment_id seg, tern_opcode op, void *local,
                uint64_t remote, size_t n)
{
    tern_batch *b = tern_batch_alloc(e, 1);
    tern_request r = {.opcode = op, .local = local, .segment = seg, .remote = remote,
                      .length = n, .timeout_ms = 60000};
    int rc = b ? tern_batch_submit(b, &r, 1) : -1;
    rc = rc == 1 ? tern_batch_wait(b, 120000) : -1;
    if (rc)
        fprintf(stderr, "gpu_peer: %s of %zu B: %s\n", op == TERN_READ ? "READ" : "WRITE", n,
                b ? tern_batch_error(b, 0) : "no batch");
    if (b)
        tern_batch_free(b);
    return rc;
}

static int initiator(int gpu, size_t len, const char *name, uint64_t raddr)
{
    static const size_t sizes[] = {1, 4095, 65535, 65536, 65537, 81921, 196615, 1048576 + 12345,
                                   5 * 1048576 - 3};
    tern_engine *e = engine();
    uint8_t *l = e ? buffer(e, gpu, len) : NULL, *back = e ? buffer(e, gpu, len) : NULL;
    uint8_t *pat = malloc(len), *got = malloc(len);
    if (!l || !back || !pat || !got) { /* e.g. no driver: said by buffer() */
        free(pat);
        free(got);
        if (gpu < 0) {
            free(l);
            free(back);
        }
        tern_engine_destroy(e);
        return 2;
    }
    for (size_t i = 0; i < len; i++)
        pat[i] = (uint8_t)(i * 131u + (i >> 11) + 7u);
    if (put(e, gpu, l, pat, len) || tern_register_memory(e, l, len, NULL) ||
        tern_register_memory(e, back, len, NULL)) {
        fprintf(stderr, "gpu_peer: setup: %s\n", tern_engine_last_error(e));
        return 2;
    }
    tern_segment_id seg = tern_segment_open(e, name);
    if (seg < 0) {
        fprintf(stderr, "gpu_peer: open %s: %s\n", name, tern_engine_last_error(e));
        return 2;
    }
    int bad = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !bad; i++) {
        size_t n = sizes[i], off = i * 97;
        if (off + n > len)
            continue;
        bad = move(e, seg, TERN_WRITE, l + off, raddr + off, n) ||
              move(e, seg, TERN_READ, back + off, raddr + off, n) ||
              put(e, gpu, got, back, len);
        if (!bad && memcmp(got + off, pat + off, n) != 0) {
            printf("RESULT bad: %zu bytes at offset %zu came back different\n", n, off);
            bad = 1;
        }
    }
    if (!bad)
        bad = move(e, seg, TERN_WRITE, l, raddr, len) || move(e, seg, TERN_READ, back, raddr, len)
              || put(e, gpu, got, back, len);
    if (!bad && memcmp(got, pat, len) != 0) {
        printf("RESULT bad: the whole buffer came back different\n");
        bad = 1;
    }
    printf("EXPECT %016" PRIx64 "\n", fnv(pat, len));
    if (!bad)
        printf("RESULT ok: %zu sizes and the whole %zu B, WRITE then READ, byte-exact\n",
               sizeof sizes / sizeof sizes[0], len);
    fflush(stdout);
    tern_unregister_memory(e, l);
    tern_unregister_memory(e, back);
    if (gpu >= 0) {
        tern_gpu_free(e, l);
        tern_gpu_free(e, back);
    } else {
        free(l);
        free(back);
    }
    tern_engine_destroy(e);
    free(pat);
    free(got);
    return bad ? 1 : 0;
}

static int expect_refusal(tern_engine *e, void *p, size_t len, const char *loc,
                          const char *what)
{
    int rc = tern_register_memory(e, p, len, loc);
    if (rc == 0) {
        printf("RESULT bad: %s registered as '%s'\n", what, loc);
        tern_unregister_memory(e, p);
        return 1;
    }
    printf("REFUSED %s as '%s' (%s): %s\n", what, loc, tern_strerror(rc),
           tern_engine_last_error(e));
    return 0;
}

static int refusals(int gpu)
{
    tern_engine *e = engine();
    size_t len = 1 << 20;
    void *d = e ? buffer(e, gpu, len) : NULL;
    void *h = malloc(len);
    if (!d || !h) {
        free(h);
        tern_engine_destroy(e);
        return 2;
    }
    char other[32], own[32];
    snprintf(other, sizeof other, "cuda:%d", gpu + 1);
    snprintf(own, sizeof own, "cuda:%d", gpu);
    int bad = expect_refusal(e, d, len, "cpu:0", "GPU memory") |
              expect_refusal(e, d, len, other, "GPU memory") |
              expect_refusal(e, h, len, own, "host memory");
    if (tern_register_memory(e, d, len, NULL) != 0) {
        printf("RESULT bad: GPU memory without a location refused: %s\n",
               tern_engine_last_error(e));
        bad = 1;
    } else {
        char *json = NULL;
        tern_segment_descriptor(e, TERN_LOCAL_SEGMENT, &json);
        int found = json && strstr(json, own) != NULL;
        printf("%s GPU memory published as %s\n", found ? "ACCEPTED" : "RESULT bad:", own);
        bad |= !found;
        free(json);
        tern_unregister_memory(e, d);
    }
    if (!bad)
        printf("RESULT ok: contradicted locations refused, the pointer's own accepted\n");
    tern_gpu_free(e, d);
    free(h);
    tern_engine_destroy(e);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "refusals") == 0)
        return refusals(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "target") == 0)
        return target(atoi(argv[2]), strtoull(argv[3], NULL, 0));
    if (argc == 6 && strcmp(argv[1], "initiator") == 0)
        return initiator(atoi(argv[2]), strtoull(argv[3], NULL, 0), argv[4],
                         strtoull(argv[5], NULL, 0));
    fprintf(stderr, "usage: %s target GPU LEN | initiator GPU LEN SEGMENT ADDR\n", argv[0]);
    return 64;
}
