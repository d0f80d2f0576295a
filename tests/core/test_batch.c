#define _GNU_SOURCE /* engine.h needs pthread_rwlock_t */
/* Batches: byte-exact WRITE then READ between two engines in one process
 * over the memcpy transport, the cut into slices (tail rule, buffer
 * boundaries), INVALID requests, stale descriptors, a refused range
 * failing at once.  Timeouts with slices in flight: test_datapath.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datapath/batch.h"
#include "engine.h"
#include "base/util.h"
#include "tern/tern.h"

#define MiB (1024u * 1024u)
#define BUF (17u * MiB)

static const char *yaml_memcpy = "server_name: 127.0.0.1:0\n"
                                 "transports:\n"
                                 "  - name: memcpy\n"
                                 "retries: 2\n"
                                 "log_level: warn\n";

static tern_engine *A, *B; /* A initiates, B is the target */
static uint8_t *la, *rb;   /* A's local buffer, B's target buffer */
static tern_segment_id seg;

static void setup(void)
{
    char err[1024] = "";
    A = tern_engine_create_from_yaml(yaml_memcpy, "A", err, sizeof err);
    cr_assert_not_null(A, "%s", err);
    B = tern_engine_create_from_yaml(yaml_memcpy, "B", err, sizeof err);
    cr_assert_not_null(B, "%s", err);
    la = malloc(BUF);
    rb = malloc(BUF);
    cr_assert_eq(tern_register_memory(A, la, BUF, NULL), 0, "%s", tern_engine_last_error(A));
    cr_assert_eq(tern_register_memory(B, rb, BUF, NULL), 0, "%s", tern_engine_last_error(B));
    seg = tern_segment_open(A, tern_engine_server_name(B));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(A));
}

static void teardown(void)
{
    tern_engine_destroy(A);
    tern_engine_destroy(B);
    free(la);
    free(rb);
}

TestSuite(batch, .init = setup, .fini = teardown);

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed * 7u + (i >> 8));
}

static tern_request req(tern_opcode op, void *local, uint64_t remote, uint64_t len)
{
    tern_request r = {.opcode = op, .local = local, .segment = seg, .remote = remote,
                      .length = len, .timeout_ms = 0};
    return r;
}

/* Run one request to the end; returns its final state. */
static tern_request_state run1(tern_request r, int *slices)
{
    tern_batch *b = tern_batch_alloc(A, 4);
    cr_assert_not_null(b);
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1, "%s", tern_engine_last_error(A));
    tern_batch_wait(b, 20000);
    tern_request_state st;
    cr_assert_eq(tern_batch_state(b, 0, &st), 0);
    if (st.status != TERN_COMPLETED)
        cr_log_info("request ended %d: %s", st.status, tern_batch_error(b, 0));
    if (slices)
        *slices = tern_batch_slice_count(b, 0);
    cr_assert_eq(tern_batch_free(b), 0, "%s", tern_engine_last_error(A));
    return st;
}

static void write_read(size_t len, size_t loff, size_t roff)
{
    fill(la + loff, len, (unsigned)len);
    memset(rb + roff, 0, len);
    tern_request_state st = run1(req(TERN_WRITE, la + loff, (uintptr_t)(rb + roff), len), NULL);
    cr_assert_eq(st.status, TERN_COMPLETED, "write %zu", len);
    cr_assert_eq(st.transferred, len);
    cr_assert_eq(memcmp(la + loff, rb + roff, len), 0, "write %zu byte-exact", len);
    fill(rb + roff, len, (unsigned)len + 1);
    memset(la + loff, 0, len);
    st = run1(req(TERN_READ, la + loff, (uintptr_t)(rb + roff), len), NULL);
    cr_assert_eq(st.status, TERN_COMPLETED, "read %zu", len);
    cr_assert_eq(memcmp(la + loff, rb + roff, len), 0, "read %zu byte-exact", len);
}

Test(batch, sizes_byte_exact)
{
    size_t sizes[] = {1, 4096, 65536, 65537, 16 * MiB + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        write_read(sizes[i], 5, 11);
}

Test(batch, many_requests_in_one_batch)
{
    enum { N = 64 };
    tern_batch *b = tern_batch_alloc(A, N);
    tern_request r[N];
    fill(la, N * 8192, 3);
    for (int i = 0; i < N; i++)
        r[i] = req(TERN_WRITE, la + i * 8192, (uintptr_t)(rb + i * 8192), 8192);
    cr_assert_eq(tern_batch_submit(b, r, N / 2), N / 2);
    cr_assert_eq(tern_batch_submit(b, r + N / 2, N / 2), N / 2);
    cr_assert_eq(tern_batch_size(b), N);
    cr_assert_eq(tern_batch_submit(b, r, 1), TERN_ERR_INVAL, "full");
    cr_assert(strstr(tern_engine_last_error(A), "full"), "%s", tern_engine_last_error(A));
    cr_assert_eq(tern_batch_wait(b, 20000), 0, "%s", tern_engine_last_error(A));
    cr_assert_eq(memcmp(la, rb, N * 8192), 0);
    cr_assert_eq(tern_batch_free(b), 0);
}

/* Both sides made of two adjacent registrations, with different seams. */
Test(batch, request_spans_adjacent_buffers)
{
    uint8_t *l2 = malloc(2 * MiB), *r2 = malloc(2 * MiB);
    cr_assert_eq(tern_register_memory(A, l2, MiB, NULL), 0);
    cr_assert_eq(tern_register_memory(A, l2 + MiB, MiB, NULL), 0);
    cr_assert_eq(tern_register_memory(B, r2, MiB + 1000, NULL), 0);
    cr_assert_eq(tern_register_memory(B, r2 + MiB + 1000, MiB - 1000, NULL), 0);
    size_t len = MiB + 70000;
    fill(l2 + 300000, len, 9);
    memset(r2 + 200000, 0, len);
    int slices = 0;
    tern_request_state st =
        run1(req(TERN_WRITE, l2 + 300000, (uintptr_t)(r2 + 200000), len), &slices);
    cr_assert_eq(st.status, TERN_COMPLETED);
    cr_assert_eq(memcmp(l2 + 300000, r2 + 200000, len), 0);
    /* No slice crosses either seam: more slices than a plain cut (17). */
    cr_assert_gt(slices, 17, "%d slices", slices);
    memset(l2 + 300000, 0, len);
    st = run1(req(TERN_READ, l2 + 300000, (uintptr_t)(r2 + 200000), len), NULL);
    cr_assert_eq(st.status, TERN_COMPLETED);
    cr_assert_eq(memcmp(l2 + 300000, r2 + 200000, len), 0);
    /* A hole between two local buffers is not registered memory. */
    cr_assert_eq(tern_unregister_memory(A, l2 + MiB), 0);
    st = run1(req(TERN_WRITE, l2 + MiB - 10, (uintptr_t)r2, 20), NULL);
    cr_assert_eq(st.status, TERN_INVALID);
    free(l2);
    free(r2);
}

Test(batch, slicing_and_tail_rule)
{
    cr_assert_eq(tern_slice_next(10, 65536), 10);
    cr_assert_eq(tern_slice_next(65536 + 16384, 65536), 65536 + 16384, "tail stays one");
    cr_assert_eq(tern_slice_next(65536 + 16385, 65536), 65536);
    struct { uint64_t len; int slices; } cases[] = {
        {1, 1}, {4096, 1}, {65536, 1}, {65537, 1}, {65536 + 16384, 1},
        {65536 + 16385, 2}, {200 * 1024, 3}, {16 * MiB + 3, 256}, {16 * MiB + 16385, 257}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        tern_request_state st = run1(req(TERN_WRITE, la, (uintptr_t)rb, cases[i].len), &n);
        cr_assert_eq(st.status, TERN_COMPLETED);
        cr_assert_eq(n, cases[i].slices, "%llu bytes: %d slices, expected %d",
                     (unsigned long long)cases[i].len, n, cases[i].slices);
    }
}

Test(batch, invalid_requests)
{
    uint8_t *stray = malloc(4096);
    tern_batch *b = tern_batch_alloc(A, 8);
    tern_request r[5] = {
        req(TERN_WRITE, stray, (uintptr_t)rb, 100),           /* unregistered local */
        req(TERN_WRITE, la, (uintptr_t)(rb + BUF - 10), 100), /* past the peer's buffer */
        req(TERN_WRITE, la, (uintptr_t)rb, 0),                /* zero length */
        req(TERN_WRITE, la, (uintptr_t)rb, 100),              /* unknown segment */
        req(TERN_READ, la, (uintptr_t)rb, 100),               /* fine */
    };
    r[3].segment = 77;
    cr_assert_eq(tern_batch_submit(b, r, 5), 5);
    int rc = tern_batch_wait(b, 10000);
    cr_assert_lt(rc, 0);
    tern_request_state st;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(tern_batch_state(b, i, &st), 0);
        cr_assert_eq(st.status, TERN_INVALID, "request %d", i);
        cr_assert_neq(tern_batch_error(b, i)[0], '\0');
    }
    cr_assert(strstr(tern_batch_error(b, 0), "not registered"), "%s", tern_batch_error(b, 0));
    char addr[32];
    snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)(uintptr_t)(rb + BUF - 10));
    cr_assert(strstr(tern_batch_error(b, 1), addr), "%s", tern_batch_error(b, 1));
    cr_assert_eq(tern_batch_state(b, 4, &st), 0);
    cr_assert_eq(st.status, TERN_COMPLETED);
    cr_assert_eq(tern_batch_state(b, 5, &st), TERN_ERR_INVAL);
    cr_assert_str_eq(tern_batch_error(b, 4), "");
    cr_assert_eq(tern_batch_free(b), 0);
    free(stray);
}

Test(batch, stale_descriptor_is_refetched)
{
    uint8_t *extra = malloc(65536);
    cr_assert_eq(tern_register_memory(B, extra, 65536, NULL), 0); /* after A opened B */
    fill(la, 65536, 4);
    tern_request_state st = run1(req(TERN_WRITE, la, (uintptr_t)extra, 65536), NULL);
    cr_assert_eq(st.status, TERN_COMPLETED);
    cr_assert_eq(memcmp(la, extra, 65536), 0);
    cr_assert_eq(tern_unregister_memory(B, extra), 0);
    free(extra);
}

/* The peer unregistered memory A's (stale) descriptor still lists: the
 * transport refuses the range; A refetches, the fresh descriptor does not
 * list it either, so the request FAILS at once (a range error is not
 * retried) with the transport's reason. */
Test(batch, range_refused_fails_at_once_with_reason)
{
    uint8_t *extra = malloc(65536);
    cr_assert_eq(tern_register_memory(B, extra, 65536, NULL), 0);
    tern_segment *s = tern_segments_get(&A->segs, seg);
    uint64_t later = 0;
    while (tern_segment_refetch(&A->segs, s, 0, &later, NULL, 0) == TERN_REFETCH_LATER)
        usleep(20000);
    cr_assert_eq(tern_unregister_memory(B, extra), 0);
    tern_batch *b = tern_batch_alloc(A, 1);
    tern_request r = req(TERN_WRITE, la, (uintptr_t)extra, 1000);
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    cr_assert_eq(tern_batch_wait(b, 10000), TERN_ERR_RANGE, "%s", tern_engine_last_error(A));
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    cr_assert_eq(st.status, TERN_FAILED);
    const char *why = tern_batch_error(b, 0);
    cr_assert(strstr(why, "1 attempt") && strstr(why, "not registered") &&
              strstr(why, "TERN_ERR_RANGE"), "%s", why);
    cr_assert_eq(tern_batch_free(b), 0);
    free(extra);
}

/* The target engine went away: requests FAIL within bounded time. */
Test(batch, target_gone_fails_not_hangs)
{
    tern_request_state st = run1(req(TERN_WRITE, la, (uintptr_t)rb, 1000), NULL);
    cr_assert_eq(st.status, TERN_COMPLETED, "endpoint cached");
    tern_engine_destroy(B);
    B = NULL;
    st = run1(req(TERN_WRITE, la, (uintptr_t)rb, 1000), NULL);
    cr_assert_eq(st.status, TERN_FAILED);
    cr_assert_neq(st.error, 0);
}

Test(batch, null_and_bad_arguments)
{
    cr_assert_null(tern_batch_alloc(NULL, 4));
    cr_assert_null(tern_batch_alloc(A, 0));
    cr_assert_eq(tern_batch_submit(NULL, NULL, 0), TERN_ERR_INVAL);
    cr_assert_eq(tern_batch_wait(NULL, 0), TERN_ERR_INVAL);
    cr_assert_eq(tern_batch_free(NULL), 0);
    tern_batch *b = tern_batch_alloc(A, 1);
    cr_assert_eq(tern_batch_submit(b, NULL, 1), TERN_ERR_INVAL);
    tern_request r = req((tern_opcode)7, la, (uintptr_t)rb, 10);
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    cr_assert_eq(st.status, TERN_INVALID);
    cr_assert_eq(tern_batch_wait(b, 0), TERN_ERR_INVAL);
    cr_assert_eq(tern_batch_free(b), 0);
}

/* The same data path over the real TCP transport (sockets on loopback),
 * two engines in this process; the two-process suite is
 * tests/transports/test_tcp_integration.c. */
static const char *yaml_tcp = "server_name: 127.0.0.1:0\n"
                              "transports:\n"
                              "  - name: tcp\n"
                              "retries: 2\n"
                              "log_level: warn\n";

Test(batch_tcp, sizes_byte_exact_and_invalid)
{
    char err[1024] = "";
    A = tern_engine_create_from_yaml(yaml_tcp, "A", err, sizeof err);
    cr_assert_not_null(A, "%s", err);
    B = tern_engine_create_from_yaml(yaml_tcp, "B", err, sizeof err);
    cr_assert_not_null(B, "%s", err);
    la = malloc(BUF);
    rb = malloc(BUF);
    cr_assert_eq(tern_register_memory(A, la, BUF, NULL), 0);
    cr_assert_eq(tern_register_memory(B, rb, BUF, NULL), 0);
    seg = tern_segment_open(A, tern_engine_server_name(B));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(A));
    char t[16], *json = NULL;
    cr_assert_eq(tern_segment_transport(A, seg, t, sizeof t), 0);
    cr_assert_str_eq(t, "tcp");
    cr_assert_eq(tern_segment_descriptor(A, seg, &json), 0);
    cr_assert_null(strstr(json, "\"tcp_data_port\":0"), "port advertised: %s", json);
    free(json);
    size_t sizes[] = {1, 4096, 65536, 65537, 16 * MiB + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        write_read(sizes[i], 3, 7);
    tern_request_state st = run1(req(TERN_WRITE, la, (uintptr_t)(rb + BUF - 10), 100), NULL);
    cr_assert_eq(st.status, TERN_INVALID);
    teardown();
}
