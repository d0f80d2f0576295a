/* tests/transports/test_tcp_integration.c: two engines in separate processes on
 * loopback, through the public API, over the TCP transport.  The target is
 * tests/support/helpers/tcp_peer.c (its memory: guard | A | B | guard, A and B
 * registered, guards full of canaries it checks on request); this process
 * is the initiator. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <unistd.h>

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
    tern_segment_id seg = open_expect(e, &p, "tcp");
    size_t cap = (16u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 4096, 65536, 65537, (16u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 11,
                        IT_PATTERN, "");
    /* One request across the boundary between the two registered buffers. */
    it_span_both_buffers(e, seg, &p, src, dst, 200000, 100000, 99, IT_PATTERN);
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
    it_refuse_outside_buffers(e, seg, &p, buf, "");
    /* and the connection still works for a good request */
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.a, 4096, NULL, 0), TERN_COMPLETED);

    /* The same refusals from the target itself: B shrinks to half there,
     * after this engine read its descriptor, so this side's range check
     * still passes requests into B's released half.  Only the target's own
     * check stands between them and its memory (canaries, checked below). */
    char line[128];
    peer_ask(&p, "SHRINK", line, sizeof line);
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
    /* 4 GiB: loopback tcp moves 6-8 GB/s here, so even a sleep of 100 ms
     * that overshoots on a loaded machine ends before the batch does (1 GiB
     * once completed before the kill). */
    const size_t n = 256, len = 16u << 20;
    uint8_t *src = local_buf(e, len);
    fill(src, len, 1);
    uint64_t waited;
    size_t failed = it_kill_mid_batch(e, seg, &p, src, len, n, 100000, &waited);
    cr_assert_gt(failed, 0, "4 GiB were not written within 100 ms, so some must fail");
    cr_log_info("target killed: %zu of %zu requests FAILED after %" PRIu64 " ms", failed, n,
                waited);
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

/* zerocopy_min: WRITE payloads from this side go out with MSG_ZEROCOPY;
 * byte-exact both ways, and the kernel's completion reports are read (the
 * transport logs the first one). */
static atomic_int zc_lines;

static int count_zc(void *user, int level, const char *engine, const char *msg)
{
    (void)user;
    (void)level;
    (void)engine;
    if (strstr(msg, "MSG_ZEROCOPY completion reports arrive"))
        atomic_fetch_add(&zc_lines, 1);
    return 0;
}

Test(tcp_integration, zerocopy_sends_byte_exact)
{
    it_peer p;
    peer_start(&p, PEER_PATH, NULL);
    char err[1024] = "";
    tern_engine_options o = {
        .size = sizeof o,
        .config_yaml = "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: tcp\n"
                       "    zerocopy_min: 16K\nslice_size: 1M\nretries: 0\nlog_level: debug\n",
        .origin = "test_tcp_integration",
        .log_hook = count_zc};
    tern_engine *e = tern_engine_create_with(&o, err, sizeof err);
    cr_assert(e, "engine: %s", err);
    tern_segment_id seg = open_expect(e, &p, "tcp");
    size_t cap = (16u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 16384, 65537, (4u << 20) + 1, (16u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 21,
                        IT_PATTERN, "zerocopy");
    for (int i = 0; i < 200 && !atomic_load(&zc_lines); i++)
        usleep(10000); /* the reports come after the replies */
    cr_assert_gt(atomic_load(&zc_lines), 0, "no MSG_ZEROCOPY completion report was read");
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}
