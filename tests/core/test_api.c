#define _GNU_SOURCE
/* The application API groups added on top of submit/wait: named buffers
 * and a peer's buffer list, the batch eventfd, reset, cancel, transfer_sync,
 * notifications with a timeout, an eventfd, 64 KiB messages and a
 * notification riding on a batch.  Two engines in one process over TCP on
 * loopback (ephemeral ports); the two-process cases are in
 * test_api_twoproc.c. */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tern/tern.h"

static const char *yaml_tcp = "server_name: 127.0.0.1:0\n"
                              "metadata: p2p\n"
                              "transports:\n"
                              "  - name: tcp\n"
                              "    slice_size: 64K\n"
                              "log_level: warn\n";

static tern_engine *mk(void)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml_tcp, "test_api", err, sizeof err);
    cr_assert_not_null(e, "engine: %s", err);
    return e;
}

static void *xalloc(size_t n)
{
    void *p = NULL;
    cr_assert_eq(posix_memalign(&p, 4096, n), 0);
    memset(p, 0, n);
    return p;
}

/* ---- named buffers ------------------------------------------------------------- */

Test(api, named_buffers_listed_and_found_by_the_peer)
{
    tern_engine *a = mk(), *b = mk();
    char *k0 = xalloc(1 << 20), *k1 = xalloc(1 << 20), *late = xalloc(4096);
    cr_assert_eq(tern_register_memory_named(b, k0, 1 << 20, "cpu:0", "kv/layer0"), 0,
                 "%s", tern_engine_last_error(b));
    cr_assert_eq(tern_register_memory(b, k1, 1 << 20, NULL), 0); /* unnamed */
    tern_segment_id s = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(s, 0, "%s", tern_engine_last_error(a));

    tern_buffer_info info[8];
    int n = tern_segment_buffers(a, s, info, 8);
    cr_assert_eq(n, 2, "%d: %s", n, tern_engine_last_error(a));
    int named = info[0].addr == (uintptr_t)k0 ? 0 : 1;
    cr_assert_str_eq(info[named].name, "kv/layer0");
    cr_assert_eq(info[named].addr, (uintptr_t)k0);
    cr_assert_eq(info[named].length, 1u << 20);
    cr_assert_str_eq(info[named].location, "cpu:0");
    cr_assert_str_eq(info[1 - named].name, "");
    cr_assert_eq(tern_segment_buffers(a, s, NULL, 0), 2, "count only");

    /* Registered after the peer opened the segment: seen without a failure. */
    cr_assert_eq(tern_register_memory_named(b, late, 4096, NULL, "late"), 0);
    tern_buffer_info f;
    cr_assert_eq(tern_segment_buffer_find(a, s, "late", &f), 0, "%s", tern_engine_last_error(a));
    cr_assert_eq(f.addr, (uintptr_t)late);
    cr_assert_eq(tern_segment_buffers(a, s, info, 8), 3);
    /* ...and dropped again. */
    cr_assert_eq(tern_unregister_memory(b, late), 0);
    cr_assert_eq(tern_segment_buffers(a, s, info, 8), 2);
    cr_assert_eq(tern_segment_buffer_find(a, s, "late", &f), TERN_ERR_NOT_FOUND);
    cr_assert(strstr(tern_engine_last_error(a), "\"late\""), "%s", tern_engine_last_error(a));

    /* The address found is usable as is. */
    cr_assert_eq(tern_segment_buffer_find(a, s, "kv/layer0", &f), 0);
    char *src = xalloc(8192);
    memset(src, 0x5a, 8192);
    cr_assert_eq(tern_register_memory(a, src, 8192, NULL), 0);
    cr_assert_eq(tern_transfer_sync(a, TERN_WRITE, src, s, f.addr + 4096, 8192, 10000), 0,
                 "%s", tern_engine_last_error(a));
    cr_assert_eq(k0[4096], 0x5a);
    cr_assert_eq(k0[4096 + 8191], 0x5a);
    cr_assert_eq(k0[4095], 0);

    /* Our own list. */
    cr_assert_eq(tern_segment_buffers(b, TERN_LOCAL_SEGMENT, info, 8), 2);
    cr_assert_eq(tern_segment_buffer_find(b, TERN_LOCAL_SEGMENT, "kv/layer0", &f), 0);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    free(k0), free(k1), free(late), free(src);
}

Test(api, named_buffer_errors)
{
    tern_engine *e = mk();
    char *p = xalloc(3 * 4096);
    cr_assert_eq(tern_register_memory_named(e, p, 4096, NULL, "x"), 0);
    cr_assert_eq(tern_register_memory_named(e, p + 4096, 4096, NULL, "x"), TERN_ERR_EXISTS);
    cr_assert(strstr(tern_engine_last_error(e), "\"x\""), "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_register_memory_named(e, p + 4096, 4096, NULL, "bad name"), TERN_ERR_INVAL);
    cr_assert(strstr(tern_engine_last_error(e), "0x20"), "%s", tern_engine_last_error(e));
    const char *devs[] = {"cuda:0", "gpu:0", "npu:1", "cpu:", "cpu:x"};
    for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) {
        cr_assert_eq(tern_register_memory(e, p + 4096, 4096, devs[i]), TERN_ERR_NOT_SUPPORTED,
                     "%s", devs[i]);
        cr_assert(strstr(tern_engine_last_error(e), devs[i]), "%s", tern_engine_last_error(e));
    }
    cr_assert_eq(tern_register_memory_named(e, p + 4096, 4096, "cuda:0", "y"),
                 TERN_ERR_NOT_SUPPORTED);
    tern_buffer_info info[4];
    cr_assert_eq(tern_segment_buffers(e, TERN_LOCAL_SEGMENT, info, 4), 1, "nothing half-done");
    cr_assert_eq(tern_segment_buffers(e, 77, info, 4), TERN_ERR_NOT_FOUND);
    tern_engine_destroy(e);
    free(p);
}

Test(api, register_batch_is_all_or_nothing)
{
    tern_engine *e = mk();
    char *p = xalloc(8 * 4096);
    tern_memory_region r[4] = {
        {p, 4096, NULL, "r0"},
        {p + 4096, 4096, "cpu:0", "r1"},
        {p + 8192, 4096, NULL, NULL},
        {p + 4096, 100, NULL, "overlap"}, /* overlaps r1 */
    };
    cr_assert_eq(tern_register_memory_batch(e, r, 4), TERN_ERR_EXISTS);
    cr_assert(strstr(tern_engine_last_error(e), "region 3 of 4"), "%s",
              tern_engine_last_error(e));
    cr_assert_eq(tern_segment_buffers(e, TERN_LOCAL_SEGMENT, NULL, 0), 0, "all rolled back");
    cr_assert_eq(tern_register_memory_batch(e, r, 3), 0, "%s", tern_engine_last_error(e));
    tern_buffer_info info[4];
    cr_assert_eq(tern_segment_buffers(e, TERN_LOCAL_SEGMENT, info, 4), 3);
    cr_assert_str_eq(info[1].name, "r1");
    void *addrs[3] = {p, p + 4096, p + 8192};
    cr_assert_eq(tern_unregister_memory_batch(e, addrs, 3), 0);
    cr_assert_eq(tern_segment_buffers(e, TERN_LOCAL_SEGMENT, NULL, 0), 0);
    cr_assert_eq(tern_unregister_memory_batch(e, addrs, 1), TERN_ERR_NOT_FOUND);
    tern_engine_destroy(e);
    free(p);
}

/* ---- batches: fd, reset, cancel, sync ------------------------------------------- */

typedef struct pair {
    tern_engine *a, *b;
    tern_segment_id s;
    char *src, *dst;
    size_t len;
} pair;

static void pair_up(pair *p, size_t len)
{
    p->a = mk();
    p->b = mk();
    p->len = len;
    p->src = xalloc(len);
    p->dst = xalloc(len);
    cr_assert_eq(tern_register_memory(p->a, p->src, len, NULL), 0);
    cr_assert_eq(tern_register_memory_named(p->b, p->dst, len, NULL, "dst"), 0);
    p->s = tern_segment_open(p->a, tern_engine_server_name(p->b));
    cr_assert_geq(p->s, 0);
}

static void pair_down(pair *p)
{
    tern_engine_destroy(p->a);
    tern_engine_destroy(p->b);
    free(p->src);
    free(p->dst);
}

static int poll_fd(int fd, int ms)
{
    struct pollfd pf = {fd, POLLIN, 0};
    return poll(&pf, 1, ms);
}

Test(api, batch_fd_wakes_poll_and_reset_reuses)
{
    pair p;
    pair_up(&p, 4 << 20);
    tern_batch *b = tern_batch_alloc(p.a, 4);
    int fd = tern_batch_fd(b);
    cr_assert_geq(fd, 0);
    cr_assert_eq(tern_batch_fd(b), fd, "one fd per batch");
    cr_assert_eq(poll_fd(fd, 0), 0, "not readable before anything ends");
    for (int round = 0; round < 20; round++) {
        memset(p.src, round + 1, p.len);
        tern_request r[4];
        for (int i = 0; i < 4; i++)
            r[i] = (tern_request){TERN_WRITE, p.src + i * (p.len / 4), p.s,
                                  (uintptr_t)p.dst + i * (p.len / 4), p.len / 4, 0};
        cr_assert_eq(tern_batch_submit(b, r, 4), 4, "round %d: %s", round,
                     tern_engine_last_error(p.a));
        /* An event loop: poll the fd, check, until every request ended. */
        int done = 0;
        for (int spins = 0; done < 4; spins++) {
            cr_assert_lt(spins, 10000);
            cr_assert_gt(poll_fd(fd, 20000), 0, "round %d: the fd never woke", round);
            uint64_t v;
            cr_assert_eq(read(fd, &v, sizeof v), (ssize_t)sizeof v);
            done = 0;
            for (int i = 0; i < 4; i++) {
                tern_request_state st;
                cr_assert_eq(tern_batch_state(b, (size_t)i, &st), 0);
                done += st.status == TERN_COMPLETED;
            }
        }
        cr_assert_eq(p.dst[0], round + 1);
        cr_assert_eq(p.dst[p.len - 1], round + 1);
        cr_assert_eq(tern_batch_reset(b), 0, "round %d: %s", round, tern_engine_last_error(p.a));
        cr_assert_eq(tern_batch_size(b), 0);
    }
    cr_assert_eq(tern_batch_free(b), 0);
    pair_down(&p);
}

Test(api, reset_refused_while_pending)
{
    pair p;
    pair_up(&p, 64 << 20);
    tern_batch *b = tern_batch_alloc(p.a, 1);
    tern_request r = {TERN_WRITE, p.src, p.s, (uintptr_t)p.dst, p.len, 0};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    int rc = tern_batch_reset(b);
    if (rc == TERN_ERR_BUSY) /* 64 MiB rarely finishes before this line */
        cr_assert(strstr(tern_engine_last_error(p.a), "not finished"), "%s",
                  tern_engine_last_error(p.a));
    else
        cr_assert_eq(rc, 0);
    cr_assert_eq(tern_batch_wait(b, 60000), 0);
    cr_assert_eq(tern_batch_reset(b), 0);
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1, "reusable after reset");
    cr_assert_eq(tern_batch_wait(b, 60000), 0);
    cr_assert_eq(tern_batch_free(b), 0);
    pair_down(&p);
}

/* Cancel under load: many requests in flight, cancel, and every slice
 * comes back (counted by tern_batch_inflight) before reset succeeds. */
Test(api, cancel_under_load_leaves_no_slice)
{
    pair p;
    pair_up(&p, 32 << 20);
    enum { N = 256 };
    tern_batch *b = tern_batch_alloc(p.a, N);
    int fd = tern_batch_fd(b);
    int canceled_total = 0, completed_total = 0;
    for (int round = 0; round < 10; round++) {
        tern_request r[N];
        size_t each = p.len / N;
        for (int i = 0; i < N; i++)
            r[i] = (tern_request){i % 2 ? TERN_READ : TERN_WRITE, p.src + i * each, p.s,
                                  (uintptr_t)p.dst + i * each, each, 0};
        cr_assert_eq(tern_batch_submit(b, r, N), N);
        int c = tern_batch_cancel(b);
        cr_assert_geq(c, 0);
        canceled_total += c;
        int canceled = 0, completed = 0;
        for (int i = 0; i < N; i++) {
            tern_request_state st;
            cr_assert_eq(tern_batch_state(b, (size_t)i, &st), 0);
            cr_assert(st.status == TERN_CANCELED || st.status == TERN_COMPLETED,
                      "request %d: status %d after cancel", i, st.status);
            canceled += st.status == TERN_CANCELED;
            completed += st.status == TERN_COMPLETED;
            if (st.status == TERN_CANCELED)
                cr_assert_eq(st.error, TERN_ERR_CANCELED);
        }
        cr_assert_eq(canceled, c);
        completed_total += completed;
        int w = tern_batch_wait(b, 0);
        cr_assert(c ? w == TERN_ERR_CANCELED : w == 0, "wait: %d", w);
        /* Slices still in the transport's hands come back; count them down
         * with the fd (it fires when the last one is back). */
        long left = tern_batch_inflight(b);
        for (int spins = 0; left > 0; spins++) {
            cr_assert_lt(spins, 10000, "%ld slices never came back", left);
            if (tern_batch_reset(b) == 0)
                break;
            poll_fd(fd, 1000);
            uint64_t v;
            if (read(fd, &v, sizeof v) < 0) {
            }
            left = tern_batch_inflight(b);
        }
        cr_assert_eq(tern_batch_inflight(b), 0);
        if (tern_batch_size(b))
            cr_assert_eq(tern_batch_reset(b), 0, "%s", tern_engine_last_error(p.a));
    }
    cr_log_info("cancel under load: %d canceled, %d completed", canceled_total, completed_total);
    cr_assert_gt(canceled_total, 0, "cancel never caught a request in flight");
    /* The engine still works after all that. */
    memset(p.src, 0x77, p.len);
    cr_assert_eq(tern_transfer_sync(p.a, TERN_WRITE, p.src, p.s, (uintptr_t)p.dst, p.len, 60000),
                 0, "%s", tern_engine_last_error(p.a));
    cr_assert_eq(p.dst[p.len - 1], 0x77);
    cr_assert_eq(tern_batch_free(b), 0);
    pair_down(&p);
}

Test(api, transfer_sync_read_write_and_errors)
{
    pair p;
    pair_up(&p, 1 << 20);
    memset(p.dst, 0x31, p.len);
    cr_assert_eq(tern_transfer_sync(p.a, TERN_READ, p.src, p.s, (uintptr_t)p.dst, p.len, -1), 0);
    cr_assert_eq(p.src[p.len - 1], 0x31);
    cr_assert_eq(tern_transfer_sync(p.a, TERN_WRITE, p.src, p.s, (uintptr_t)p.dst + 1, p.len, -1),
                 TERN_ERR_RANGE);
    cr_assert(strstr(tern_engine_last_error(p.a), "transfer_sync"), "%s",
              tern_engine_last_error(p.a));
    cr_assert_lt(tern_transfer_sync(p.a, TERN_WRITE, p.src, 99, 0, 10, -1), 0);
    pair_down(&p);
}

/* ---- notifications ---------------------------------------------------------------- */

Test(api, notify_wait_fd_and_64k_messages)
{
    tern_engine *a = mk(), *b = mk();
    tern_segment_id s = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(s, 0);
    char from[256], name[256];
    char *msg = malloc(TERN_NOTIFY_MAX + 1);
    cr_assert_eq(tern_notify_recv_wait(b, from, sizeof from, name, sizeof name, msg,
                                       TERN_NOTIFY_MAX + 1, 50), 0, "times out empty");
    int fd = tern_notify_fd(b);
    cr_assert_geq(fd, 0);
    cr_assert_eq(poll_fd(fd, 0), 0);
    char *big = malloc(TERN_NOTIFY_MAX + 2);
    for (int i = 0; i < TERN_NOTIFY_MAX; i++)
        big[i] = (char)(i % 7 == 0 ? '"' : i % 5 == 0 ? '\n' : 'a' + i % 26); /* escapes */
    big[TERN_NOTIFY_MAX] = '\0';
    cr_assert_eq(tern_notify_send(a, s, "big", big), 0, "%s", tern_engine_last_error(a));
    cr_assert_gt(poll_fd(fd, 20000), 0, "the fd wakes a poll loop");
    cr_assert_eq(tern_notify_recv(b, from, sizeof from, name, sizeof name, msg,
                                  TERN_NOTIFY_MAX + 1), 1);
    cr_assert_str_eq(name, "big");
    cr_assert_str_eq(from, tern_engine_server_name(a));
    cr_assert_eq(memcmp(msg, big, TERN_NOTIFY_MAX + 1), 0, "64 KiB intact");
    cr_assert_eq(poll_fd(fd, 0), 0, "drained with the last one");
    big[TERN_NOTIFY_MAX] = 'x';
    big[TERN_NOTIFY_MAX + 1] = '\0';
    cr_assert_eq(tern_notify_send(a, s, "big", big), TERN_ERR_INVAL);
    free(big);
    free(msg);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
}

Test(api, notification_rides_on_a_batch_after_its_data)
{
    pair p;
    pair_up(&p, 8 << 20);
    tern_batch *b = tern_batch_alloc(p.a, 16);
    int bfd = tern_batch_fd(b), nfd = tern_notify_fd(p.b);
    for (int round = 1; round <= 50; round++) {
        memset(p.src, round, p.len);
        tern_request r[8];
        for (int i = 0; i < 8; i++)
            r[i] = (tern_request){TERN_WRITE, p.src + i * (p.len / 8), p.s,
                                  (uintptr_t)p.dst + i * (p.len / 8), p.len / 8, 0};
        char m[32];
        snprintf(m, sizeof m, "%d", round);
        cr_assert_eq(tern_batch_submit_with_notify(b, r, 8, p.s, "blocks", m), 8);
        /* One poll loop over both fds: the receiver checks at receipt. */
        int got = 0;
        for (int spins = 0; !got; spins++) {
            cr_assert_lt(spins, 100000);
            struct pollfd pf[2] = {{bfd, POLLIN, 0}, {nfd, POLLIN, 0}};
            cr_assert_gt(poll(pf, 2, 20000), 0, "neither fd woke");
            if (pf[0].revents) {
                uint64_t v;
                if (read(bfd, &v, sizeof v) < 0) {
                }
            }
            char name[64], msg[64];
            if (pf[1].revents &&
                tern_notify_recv(p.b, NULL, 0, name, sizeof name, msg, sizeof msg) == 1) {
                cr_assert_eq(atoi(msg), round);
                for (size_t k = 0; k < p.len; k += 4096)
                    cr_assert_eq(p.dst[k], round, "round %d: byte %zu not in yet", round, k);
                cr_assert_eq(p.dst[p.len - 1], round);
                got = 1;
            }
        }
        cr_assert_eq(tern_batch_wait(b, 20000), 0);
        cr_assert_eq(tern_batch_notify_error(b, NULL, 0), 0);
        cr_assert_eq(tern_batch_reset(b), 0);
    }
    /* A failed request: the notification is not sent, and says why. */
    tern_request bad = {TERN_WRITE, p.src, p.s, (uintptr_t)p.dst + p.len - 10, 100, 0};
    cr_assert_eq(tern_batch_submit_with_notify(b, &bad, 1, p.s, "never", "x"), 1);
    cr_assert_lt(tern_batch_wait(b, 20000), 0);
    char why[256];
    cr_assert_lt(tern_batch_notify_error(b, why, sizeof why), 0);
    cr_assert(strstr(why, "not sent"), "%s", why);
    cr_assert_eq(tern_notify_recv_wait(p.b, NULL, 0, NULL, 0, NULL, 0, 300), 0,
                 "a notification of a failed batch never arrives");
    cr_assert_eq(tern_batch_free(b), 0);
    pair_down(&p);
}

/* ---- configuration: a misspelled transport ---------------------------------------- */

Test(api, misspelled_transport_is_an_error_with_did_you_mean)
{
    char err[2048] = "";
    tern_engine *e = tern_engine_create_from_yaml("server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                                  "transports:\n  - name: tpc\n  - name: tcp\n",
                                                  "typo.yaml", err, sizeof err);
    cr_assert_null(e, "a misspelled transport must not run on the next one");
    cr_assert(strstr(err, "did you mean 'tcp'?"), "%s", err);
    cr_assert(strstr(err, "optional: true"), "%s", err);
    e = tern_engine_create_from_yaml("server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                     "transports:\n  - name: tpc\n    optional: true\n"
                                     "  - name: tcp\nlog_level: error\n",
                                     "optional.yaml", err, sizeof err);
    cr_assert_not_null(e, "optional: true skips a missing plugin: %s", err);
    tern_engine_destroy(e);
    e = tern_engine_create_from_yaml("server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                     "transports:\n  - name: tcp\n    optional: maybe\n",
                                     "bad.yaml", err, sizeof err);
    cr_assert_null(e);
    cr_assert(strstr(err, "optional"), "%s", err);
}

/* Sends over the kept connection prove the shared secret once and go on
 * working for every later frame. */
Test(api, notifications_with_a_shared_secret_on_a_kept_connection)
{
    char path[] = "/tmp/tern-api-secret-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
    close(fd);
    char yaml[512], err[1024] = "";
    snprintf(yaml, sizeof yaml, "%sauth_secret_file: %s\n", yaml_tcp, path);
    tern_engine *a = tern_engine_create_from_yaml(yaml, "a", err, sizeof err);
    cr_assert_not_null(a, "%s", err);
    tern_engine *b = tern_engine_create_from_yaml(yaml, "b", err, sizeof err);
    cr_assert_not_null(b, "%s", err);
    tern_segment_id s = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(s, 0, "%s", tern_engine_last_error(a));
    for (int i = 0; i < 20; i++) {
        char m[16];
        snprintf(m, sizeof m, "%d", i);
        cr_assert_eq(tern_notify_send(a, s, "n", m), 0, "%d: %s", i, tern_engine_last_error(a));
    }
    for (int i = 0; i < 20; i++) {
        char m[16];
        cr_assert_eq(tern_notify_recv_wait(b, NULL, 0, NULL, 0, m, sizeof m, 10000), 1);
        cr_assert_eq(atoi(m), i, "in order");
    }
    tern_notify_stats st;
    tern_notify_stats_get(b, &st);
    cr_assert_eq(st.received, 20);
    cr_assert_eq(st.delivered, 20);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    unlink(path);
}
