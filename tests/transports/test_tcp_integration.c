/* tests/transports/test_tcp_integration.c: two engines in separate processes on
 * loopback, through the public API, over the TCP transport.  The target is
 * tests/support/helpers/tcp_peer.c (its memory: guard | A | B | guard, A and B
 * registered, guards full of canaries it checks on request); this process
 * is the initiator. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

/* this file's fill() pattern */
#define IT_FILL_MUL 2654435761u
#define IT_FILL_SHIFT 13
#include "integration_common.h"

#define PEER_PATH TERN_BUILD_DIR "/bin/tern-test-tcp-peer"

static const char *yaml =
    "server_name: 127.0.0.1:0\n"
    "metadata: p2p\n"
    "transports:\n"
    "  - name: tcp\n"
    "slice_size: 64K\n"
    "retries: 2\n"
    "io_timeout_ms: 3000\n"
    "log_level: warn\n";

static tern_engine *engine_new(void)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "test_tcp_integration", err, sizeof err);
    cr_assert(e, "engine: %s", err);
    return e;
}

/* tern_batch_free refuses (BUSY) while the engine still holds slices of
 * requests that already ended (e.g. siblings of a failed slice on their way
 * back from the transport); they come back within a bounded time. */
TestSuite(tcp_integration, .timeout = 180);

Test(tcp_integration, write_then_read_back_byte_exact)
{
    it_peer p;
    peer_start(&p, PEER_PATH, NULL);
    tern_engine *e = engine_new();
    tern_segment_id seg = tern_segment_open(e, p.name);
    cr_assert_geq(seg, 0, "open %s: %s", p.name, tern_engine_last_error(e));
    char xp[32] = "";
    cr_assert_eq(tern_segment_transport(e, seg, xp, sizeof xp), 0);
    cr_assert_str_eq(xp, "tcp");
    size_t cap = (16u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 4096, 65536, 65537, (16u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uint64_t n = sizes[i], at = p.a + 4096 * i + (i & 1) * 3;
        fill(src, n, (unsigned)i + 11);
        memset(dst, 0, n);
        char msg[512];
        cr_assert_eq(one(e, seg, TERN_WRITE, src, at, n, msg, sizeof msg), TERN_COMPLETED,
                     "WRITE %" PRIu64 " B: %s", n, msg);
        cr_assert_eq(one(e, seg, TERN_READ, dst, at, n, msg, sizeof msg), TERN_COMPLETED,
                     "READ %" PRIu64 " B: %s", n, msg);
        cr_assert_eq(memcmp(src, dst, n), 0, "READ back of %" PRIu64 " B differs", n);
    }
    /* One request across the boundary between the two registered buffers. */
    uint64_t span = 200000, at = p.b - 100000;
    fill(src, span, 99);
    memset(dst, 0, span);
    write_read_back(e, seg, src, dst, at, span, "the request spanning A and B");
    peer_check_canaries(&p);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(tcp_integration, unregistered_remote_addresses_refused)
{
    it_peer p;
    peer_start(&p, PEER_PATH, NULL);
    tern_engine *e = engine_new();
    tern_segment_id seg = tern_segment_open(e, p.name);
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(e));
    uint8_t *buf = local_buf(e, 1 << 20);
    memset(buf, 0x5A, 1 << 20);
    struct { uint64_t addr, len; const char *what; } bad[] = {
        {p.a - 4096, 4096, "in the guard below A"},
        {p.a - 1, 2, "straddling A's start"},
        {p.b + p.lb - 1, 2, "straddling B's end"},
        {p.b + p.lb, 65536, "in the guard above B"},
        {UINT64_MAX - 100, 4096, "addr + len overflows"},
        {4096, 4096, "a low address"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        for (int op = TERN_READ; op <= TERN_WRITE; op++) {
            char msg[512] = "";
            tern_status st = one(e, seg, op, buf, bad[i].addr, bad[i].len, msg, sizeof msg);
            cr_assert(st == TERN_INVALID || st == TERN_FAILED, "%s %s ended %d",
                      op == TERN_READ ? "READ" : "WRITE", bad[i].what, st);
            cr_assert(msg[0], "a refused request says why (%s)", bad[i].what);
        }
    }
    for (size_t i = 0; i < 1 << 20; i++)
        cr_assert_eq(buf[i], 0x5A, "a refused READ wrote local memory");
    peer_check_canaries(&p);
    /* and the connection still works for a good request */
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.a, 4096, NULL, 0), TERN_COMPLETED);

    /* The same refusals from the target itself: B shrinks to half there,
     * after this engine read its descriptor, so this side's range check
     * still passes requests into B's released half.  Only the target's own
     * check stands between them and its memory (canaries, checked below). */
    char line[128];
    fprintf(p.in, "SHRINK\n");
    fflush(p.in);
    peer_line(&p, line, sizeof line, 10000);
    uint64_t half = p.lb / 2;
    cr_assert_eq(strtoull(line + 7, NULL, 10), half, "%s", line);
    struct { uint64_t addr, len; const char *what; } gone[] = {
        {p.b + half - 1, 2, "straddling B's new end"},
        {p.b + half - 4096, 8192, "4 KiB on each side of B's new end"},
        {p.b + half, 4096, "just past B's new end"},
        {p.b + p.lb - 4096, 4096, "at B's old end"},
    };
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
        for (int op = TERN_READ; op <= TERN_WRITE; op++) {
            char msg[512] = "";
            memset(buf, 0x5A, gone[i].len);
            tern_status st = one(e, seg, op, buf, gone[i].addr, gone[i].len, msg, sizeof msg);
            cr_log_info("%s %s: status %d: %s", op == TERN_READ ? "READ" : "WRITE", gone[i].what,
                        st, msg);
            cr_assert(st == TERN_INVALID || st == TERN_FAILED, "%s %s (target-side) ended %d",
                      op == TERN_READ ? "READ" : "WRITE", gone[i].what, st);
            cr_assert(strstr(msg, "TERN_ERR_RANGE"), "%s: the target's range refusal: %s",
                      gone[i].what, msg);
        }
        peer_check_canaries(&p);
    }
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.b, 4096, NULL, 0), TERN_COMPLETED,
                 "B's remaining half is still served");
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(tcp_integration, target_killed_mid_batch_fails_in_bounded_time)
{
    it_peer p;
    peer_start(&p, PEER_PATH, NULL);
    tern_engine *e = engine_new();
    tern_segment_id seg = tern_segment_open(e, p.name);
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(e));
    const size_t n = 64, len = 16u << 20;
    uint8_t *src = local_buf(e, len);
    fill(src, len, 1);
    tern_batch *b = tern_batch_alloc(e, n);
    tern_request r[64];
    for (size_t i = 0; i < n; i++)
        r[i] = (tern_request){.opcode = TERN_WRITE, .local = src, .segment = seg,
                              .remote = p.a, .length = len};
    cr_assert_eq(tern_batch_submit(b, r, n), (int)n);
    usleep(100000);
    kill(p.pid, SIGKILL);
    uint64_t t0 = now_ms();
    int rc = tern_batch_wait(b, 30000);
    uint64_t waited = now_ms() - t0;
    cr_assert_neq(rc, TERN_ERR_TIMEOUT, "requests still pending 30 s after the target died");
    size_t failed = count_failed(b, n);
    cr_assert_gt(failed, 0, "1 GiB was not written within 100 ms, so some must fail");
    cr_log_info("target killed: %zu of %zu requests FAILED after %" PRIu64 " ms", failed, n,
                waited);
    /* A request ends only when none of its slices is still in a transport's
     * hands, so once wait returned the batch frees at once. */
    cr_assert_eq(tern_batch_free(b), 0, "%s", tern_engine_last_error(e));
    peer_reap(&p);
    tern_segment_close(e, seg);
    /* The same engine works with another target. */
    it_peer q;
    peer_start(&q, PEER_PATH, NULL);
    tern_segment_id seg2 = tern_segment_open(e, q.name);
    cr_assert_geq(seg2, 0, "%s", tern_engine_last_error(e));
    uint8_t *dst = local_buf(e, 1 << 20);
    write_read_back(e, seg2, src, dst, q.a, 1 << 20, NULL);
    tern_segment_close(e, seg2);
    tern_engine_destroy(e);
    peer_stop(&q);
}

Test(tcp_integration, burst_of_1024_after_10s_idle)
{
    it_peer p;
    peer_start(&p, PEER_PATH, NULL);
    tern_engine *e = engine_new();
    tern_segment_id seg = tern_segment_open(e, p.name);
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(e));
    const size_t n = 1024, bs = 4096;
    uint8_t *src = local_buf(e, n * bs), *dst = local_buf(e, n * bs);
    fill(src, n * bs, 7);
    cr_assert_eq(one(e, seg, TERN_WRITE, src, p.a, bs, NULL, 0), TERN_COMPLETED);
    sleep(10);
    tern_batch *b = tern_batch_alloc(e, n);
    tern_request *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = (tern_request){.opcode = TERN_WRITE, .local = src + i * bs, .segment = seg,
                              .remote = p.a + i * bs, .length = bs};
    cr_assert_eq(tern_batch_submit(b, r, n), (int)n);
    int rc = tern_batch_wait(b, 60000);
    for (size_t i = 0; i < n; i++) {
        tern_request_state st;
        tern_batch_state(b, i, &st);
        cr_assert_eq(st.status, TERN_COMPLETED, "request %zu after idle: %s", i,
                     tern_batch_error(b, i));
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq(tern_batch_free(b), 0);
    cr_assert_eq(one(e, seg, TERN_READ, dst, p.a, n * bs, NULL, 0), TERN_COMPLETED);
    cr_assert_eq(memcmp(src, dst, n * bs), 0);
    free(r);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}
