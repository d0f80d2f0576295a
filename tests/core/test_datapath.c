#define _GNU_SOURCE
/* The data path in one process: the plugin ABI's two completion styles
 * (a 1.0 plugin built against the old header, polled; a 1.1 plugin using
 * complete()), and the healing rules that need no second process: a range
 * error is not retried, a failing peer costs a bounded number of attempts,
 * an unreachable transport gives way to the next common one, a device
 * marked down comes back, a request times out while its slice is held.
 * The transports are builds of tests/support/plugins/hsloop.c (see
 * tests/support/CMakeLists.txt) and plugins/memcpy. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "tern/tern.h"
#include "base/util.h"

#define LEN (1u << 20)

typedef struct node {
    tern_engine *e;
    uint8_t *buf;
    tern_segment_id peer;
} node;

/* transports: the YAML list body (each line "  - name: ..." etc.) */
static void node_up(node *n, const char *transports, int retries)
{
    char yaml[4096], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\n"
             "transports:\n%s"
             "slice_size: 64K\n"
             "retries: %d\n"
             "log_level: error\n",
             transports, retries);
    n->e = tern_engine_create_from_yaml(yaml, "test_datapath", err, sizeof err);
    cr_assert_not_null(n->e, "%s", err);
    n->buf = calloc(1, LEN);
    cr_assert_eq(tern_register_memory(n->e, n->buf, LEN, NULL), 0, "%s",
                 tern_engine_last_error(n->e));
}

static void node_down(node *n)
{
    tern_engine_destroy(n->e);
    free(n->buf);
}

static void link_to(node *a, node *b)
{
    a->peer = tern_segment_open(a->e, tern_engine_server_name(b->e));
    cr_assert_geq(a->peer, 0, "%s", tern_engine_last_error(a->e));
}

/* One request of len bytes at offset off, waited for. */
static tern_request_state run(node *a, node *b, int op, size_t off, size_t len, char *why,
                              size_t whylen)
{
    tern_request r = {.opcode = op, .local = a->buf + off, .segment = a->peer,
                      .remote = (uintptr_t)(b->buf + off), .length = len};
    tern_batch *bt = tern_batch_alloc(a->e, 1);
    cr_assert_not_null(bt);
    cr_assert_eq(tern_batch_submit(bt, &r, 1), 1);
    cr_assert_neq(tern_batch_wait(bt, 30000), TERN_ERR_TIMEOUT, "a request hung");
    tern_request_state st;
    cr_assert_eq(tern_batch_state(bt, 0, &st), 0);
    if (why)
        snprintf(why, whylen, "%s", tern_batch_error(bt, 0));
    cr_assert_eq(tern_batch_free(bt), 0, "%s", tern_engine_last_error(a->e));
    return st;
}

/* WRITE then READ back len bytes through the data path, byte-exact. */
static void move_and_check(node *a, node *b, size_t len)
{
    for (size_t i = 0; i < len; i++)
        a->buf[i] = (uint8_t)(i * 31 + 7);
    char why[1024] = "";
    cr_assert_eq(run(a, b, TERN_WRITE, 0, len, why, sizeof why).status, TERN_COMPLETED, "%s",
                 why);
    cr_assert_eq(memcmp(a->buf, b->buf, len), 0, "WRITE moved the bytes");
    memset(a->buf, 0, len);
    cr_assert_eq(run(a, b, TERN_READ, 0, len, why, sizeof why).status, TERN_COMPLETED, "%s",
                 why);
    cr_assert_eq(memcmp(a->buf, b->buf, len), 0, "READ moved the bytes");
}

/* A counter from the hsloop builds' query() text ("... name=N ..."). */
static long plugin_count(node *n, size_t xport, const char *name)
{
    tern_xport *x = &n->e->xports[xport];
    char out[256] = "", key[64];
    x->ops->query(x->pl->ctx, "stats", out, sizeof out);
    snprintf(key, sizeof key, "%s=", name);
    const char *p = strstr(out, key);
    cr_assert_not_null(p, "no %s in '%s'", name, out);
    return atol(p + strlen(key));
}

static char *entry(char *out, size_t len, const char *name, const char *path, const char *extra)
{
    snprintf(out, len, "  - name: %s\n    path: %s\n%s", name, path, extra ? extra : "");
    return out;
}

/* ---- the plugin ABI: 1.0 through poll(), 1.1 through complete() ------------- */

Test(datapath, abi10_plugin_built_against_the_old_header_moves_data)
{
    char t[512];
    node a, b;
    node_up(&a, entry(t, sizeof t, "loop10", TERN_LOOP10_PATH, NULL), 2);
    node_up(&b, t, 2);
    link_to(&a, &b);
    const tern_transport *ops = a.e->xports[0].ops;
    cr_assert_eq(ops->abi_minor, 0, "built against the 1.0 header");
    cr_assert_eq(ops->struct_size, TERN_TRANSPORT_V1_0_SIZE + 2 * sizeof(void *),
                 "the 1.0 layout (up to query)");
    cr_assert_not_null(ops->poll);
    cr_assert_eq(a.e->dp->polling[0], 1, "a poll thread serves the 1.0 plugin");
    cr_assert_eq(ops->caps & (TERN_CAP_READ | TERN_CAP_WRITE), TERN_CAP_READ | TERN_CAP_WRITE,
                 "a 1.0 plugin that declares no operation is taken to do both");
    move_and_check(&a, &b, LEN);
    node_down(&a);
    node_down(&b);
}

/* The core sends a transport only the operations its caps carry: loopro
 * (READ only) listed first carries the READs; the first WRITE moves the peer
 * to loopx, the next transport both list, and loopro is never sent one. */
Test(datapath, transport_without_write_is_never_sent_a_write)
{
    char t[1024], t2[512];
    node a, b;
    entry(t, sizeof t, "loopro", TERN_LOOPRO_PATH, NULL);
    strcat(t, entry(t2, sizeof t2, "loopx", TERN_LOOPX_PATH, NULL));
    node_up(&a, t, 2);
    node_up(&b, t, 2);
    link_to(&a, &b);
    memset(b.buf, 0x5A, 4096);
    char why[1024] = "";
    cr_assert_eq(run(&a, &b, TERN_READ, 0, 4096, why, sizeof why).status, TERN_COMPLETED, "%s",
                 why);
    cr_assert_eq(plugin_count(&a, 0, "reads"), 1, "the READ went over loopro");
    for (int i = 0; i < 3; i++)
        move_and_check(&a, &b, 65536);
    cr_assert_eq(plugin_count(&a, 0, "writes"), 0, "loopro was sent a WRITE");
    cr_assert_geq(plugin_count(&a, 1, "writes"), 3, "the WRITEs went over loopx");
    node_down(&a);
    node_down(&b);
}

/* Query hsloop build number xport of n ("open_gate", ...). */
static void plugin_query(node *n, size_t xport, const char *what)
{
    tern_xport *x = &n->e->xports[xport];
    char out[256];
    x->ops->query(x->pl->ctx, what, out, sizeof out);
}

static void *open_gate_later(void *arg)
{
    sleep(3); /* a safety net: the test opens it itself long before */
    plugin_query(arg, 0, "open_gate");
    return NULL;
}

/* A WRITE the first transport cannot do moves the peer to the next one;
 * the submit that finds this returns at once, even while a worker's
 * connect to that peer (a READ's, over loopro, held at its gate) holds
 * the segment: the move waits for that connect on a worker, not on the
 * application thread. */
Test(datapath, submit_does_not_wait_for_a_connect_in_flight, .timeout = 60)
{
    char t[1024], t2[512];
    node a, b;
    entry(t, sizeof t, "loopro", TERN_LOOPRO_PATH, "    gate: true\n");
    strcat(t, entry(t2, sizeof t2, "loopx", TERN_LOOPX_PATH, NULL));
    node_up(&a, t, 2);
    entry(t, sizeof t, "loopro", TERN_LOOPRO_PATH, NULL);
    strcat(t, entry(t2, sizeof t2, "loopx", TERN_LOOPX_PATH, NULL));
    node_up(&b, t, 2);
    link_to(&a, &b);
    memset(b.buf, 0x5A, 4096);
    memset(a.buf + 65536, 0xC3, 4096);
    tern_request r[2] = {
        {.opcode = TERN_READ, .local = a.buf, .segment = a.peer, .remote = (uintptr_t)b.buf,
         .length = 4096},
        {.opcode = TERN_WRITE, .local = a.buf + 65536, .segment = a.peer,
         .remote = (uintptr_t)(b.buf + 65536), .length = 4096},
    };
    tern_batch *bt[2] = {tern_batch_alloc(a.e, 1), tern_batch_alloc(a.e, 1)};
    cr_assert(bt[0] && bt[1]);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, open_gate_later, &a), 0);
    cr_assert_eq(tern_batch_submit(bt[0], &r[0], 1), 1);
    for (int i = 0; i < 200 && plugin_count(&a, 0, "gated") < 1; i++)
        usleep(10000);
    cr_assert_eq(plugin_count(&a, 0, "gated"), 1, "the READ's connect over loopro is held");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(tern_batch_submit(bt[1], &r[1], 1), 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    plugin_query(&a, 0, "open_gate");
    cr_assert_lt(ms, 1000, "the WRITE's submit waited %ld ms for the READ's connect", ms);
    for (int i = 0; i < 2; i++) {
        cr_assert_neq(tern_batch_wait(bt[i], 30000), TERN_ERR_TIMEOUT, "a request hung");
        tern_request_state st;
        cr_assert_eq(tern_batch_state(bt[i], 0, &st), 0);
        cr_assert_eq(st.status, TERN_COMPLETED, "%s: %s", i ? "WRITE" : "READ",
                     tern_batch_error(bt[i], 0));
        cr_assert_eq(tern_batch_free(bt[i]), 0);
    }
    pthread_join(th, NULL);
    cr_assert_eq(memcmp(a.buf, b.buf, 4096), 0, "the READ moved the bytes");
    cr_assert_eq(memcmp(a.buf + 65536, b.buf + 65536, 4096), 0, "the WRITE moved the bytes");
    cr_assert_eq(plugin_count(&a, 0, "writes"), 0, "loopro was sent a WRITE");
    char name[32];
    cr_assert_eq(tern_segment_transport(a.e, a.peer, name, sizeof name), 0);
    cr_assert_str_eq(name, "loopx");
    node_down(&a);
    node_down(&b);
}

Test(datapath, abi11_plugin_using_complete_moves_data)
{
    char t[512];
    node a, b;
    node_up(&a, entry(t, sizeof t, "loopx", TERN_LOOPX_PATH, NULL), 2);
    node_up(&b, t, 2);
    link_to(&a, &b);
    const tern_transport *ops = a.e->xports[0].ops;
    cr_assert_geq(ops->abi_minor, 1, "built for ABI 1.1 or later");
    cr_assert_not(a.e->xports[0].pl->polls, "no poll: completions come through complete()");
    cr_assert_eq(ops->poll(NULL, NULL, 0, 0), TERN_ERR_NOT_SUPPORTED, "the core's default poll");
    cr_assert_eq(a.e->dp->polling[0], 0, "no thread polls it");
    move_and_check(&a, &b, LEN);
    cr_assert_eq(plugin_count(&a, 0, "submitted"), 2 * LEN / 65536, "16 + 16 slices");
    node_down(&a);
    node_down(&b);
}

/* ---- healing rules ------------------------------------------------------------ */

/* The transport refuses the range and the peer's descriptor is unchanged:
 * one attempt, FAILED at once, although retries allow 3 more. */
Test(datapath, range_error_is_not_retried)
{
    char t[512], u[512];
    node a, b;
    node_up(&a, entry(t, sizeof t, "loopx", TERN_LOOPX_PATH,
                      "    fail_first: 1000\n    fail_code: -19\n"), 3);
    node_up(&b, entry(u, sizeof u, "loopx", TERN_LOOPX_PATH, NULL), 3);
    link_to(&a, &b);
    char why[1024] = "";
    tern_request_state st = run(&a, &b, TERN_WRITE, 0, 4096, why, sizeof why);
    cr_assert_eq(st.status, TERN_FAILED);
    cr_assert_eq(st.error, TERN_ERR_RANGE);
    cr_assert_eq(plugin_count(&a, 0, "submitted"), 1, "attempts: %ld (%s)",
                 plugin_count(&a, 0, "submitted"), why);
    cr_assert(strstr(why, "not retried") && strstr(why, "1 attempt"), "%s", why);
    /* and an error a retry can fix is retried: CONNECT, then success */
    node_down(&a);
    node_up(&a, entry(t, sizeof t, "loopx", TERN_LOOPX_PATH,
                      "    fail_first: 2\n    fail_code: -12\n"), 3);
    link_to(&a, &b);
    st = run(&a, &b, TERN_WRITE, 0, 4096, why, sizeof why);
    cr_assert_eq(st.status, TERN_COMPLETED, "%s", why);
    cr_assert_eq(plugin_count(&a, 0, "submitted"), 3);
    node_down(&a);
    node_down(&b);
}

/* Every connect to the peer fails.  Requests keep coming for 1.5 s; they
 * all end FAILED, and the peer costs a bounded number of connect attempts
 * per second (backoff per peer, one connect at a time), not one per
 * request or slice. */
Test(datapath, failing_peer_costs_bounded_attempts_per_second)
{
    char t[512], u[512];
    node a, b;
    node_up(&a, entry(t, sizeof t, "loopx", TERN_LOOPX_PATH, "    connect_fail: -12\n"), 3);
    node_up(&b, entry(u, sizeof u, "loopx", TERN_LOOPX_PATH, NULL), 3);
    link_to(&a, &b);
    uint64_t start = tern_now_ms();
    long requests = 0;
    while (tern_now_ms() - start < 1500) {
        enum { N = 64 };
        tern_request r[N];
        for (int i = 0; i < N; i++)
            r[i] = (tern_request){.opcode = TERN_WRITE, .local = a.buf + i * 1024,
                                  .segment = a.peer, .remote = (uintptr_t)(b.buf + i * 1024),
                                  .length = 1024};
        tern_batch *bt = tern_batch_alloc(a.e, N);
        cr_assert_eq(tern_batch_submit(bt, r, N), N);
        cr_assert_neq(tern_batch_wait(bt, 30000), TERN_ERR_TIMEOUT, "requests hung");
        for (int i = 0; i < N; i++) {
            tern_request_state st;
            tern_batch_state(bt, (size_t)i, &st);
            cr_assert_eq(st.status, TERN_FAILED);
            cr_assert_eq(st.error, TERN_ERR_CONNECT, "%s", tern_batch_error(bt, (size_t)i));
        }
        cr_assert_eq(tern_batch_free(bt), 0);
        requests += N;
    }
    uint64_t ms = tern_now_ms() - start;
    long connects = plugin_count(&a, 0, "connects");
    cr_log_info("%ld requests, %ld connect attempts in %llu ms", requests, connects,
                (unsigned long long)ms);
    cr_assert_geq(connects, 2, "it did try");
    /* backoff starts at 20 ms: at most 50 per second even without doubling */
    cr_assert_leq(connects, (long)(ms / 20) + 2, "%ld connect attempts in %llu ms", connects,
                  (unsigned long long)ms);
    cr_assert_gt(requests, connects, "fewer attempts than requests");
    node_down(&a);
    node_down(&b);
}

/* [loopx, memcpy] on both sides, loopx unable to reach the peer: the
 * request completes over memcpy, the segment stays on memcpy, loopx is
 * not asked again. */
Test(datapath, unreachable_transport_falls_back_to_the_next_common_one)
{
    char t[1024], lx[512];
    snprintf(t, sizeof t, "%s  - name: memcpy\n",
             entry(lx, sizeof lx, "loopx", TERN_LOOPX_PATH, "    unreachable: true\n"));
    node a, b;
    node_up(&a, t, 2);
    node_up(&b, t, 2);
    link_to(&a, &b);
    char name[32];
    cr_assert_eq(tern_segment_transport(a.e, a.peer, name, sizeof name), 0);
    cr_assert_str_eq(name, "loopx", "negotiated first");
    move_and_check(&a, &b, LEN);
    cr_assert_eq(tern_segment_transport(a.e, a.peer, name, sizeof name), 0);
    cr_assert_str_eq(name, "memcpy", "moved to the next common transport");
    move_and_check(&a, &b, 4096);
    cr_assert_eq(plugin_count(&a, 0, "opened"), 1, "loopx asked once");
    node_down(&a);
    node_down(&b);
}

/* Slices wait behind the one connect to their peer and share its outcome,
 * but a slice routed to the next transport after the peer moved is not
 * failed by a connect on the transport it left.  A race: a slice fails its
 * loopx connect and moves the peer to memcpy; another slice's connect,
 * begun on loopx just before the move, ends with loopx's verdict, which
 * must not fail the first one, now on memcpy and waiting behind it.  Each
 * round opens the segment afresh (loopx is asked again) and sends 16
 * slices from 16 batches at once; every one must complete.  Without the
 * reroute about one round in 10,000 lost (one in 1,000 under ASan), so the
 * rounds go on for 10 seconds. */
Test(datapath, slices_racing_a_fallback_all_complete, .timeout = 120)
{
    char t[1024], lx[512];
    snprintf(t, sizeof t, "%s  - name: memcpy\n",
             entry(lx, sizeof lx, "loopx", TERN_LOOPX_PATH, "    unreachable: true\n"));
    enum { BATCHES = 16, PART = LEN / BATCHES };
    node a, b;
    node_up(&a, t, 2);
    node_up(&b, t, 2);
    tern_batch *bt[BATCHES];
    for (int i = 0; i < BATCHES; i++)
        cr_assert_not_null(bt[i] = tern_batch_alloc(a.e, 1));
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int round = 0;
    for (;; round++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= 10)
            break;
        link_to(&a, &b);
        for (int i = 0; i < BATCHES; i++) {
            memset(a.buf + i * PART, (round + i) & 0xFF, PART);
            tern_request r = {.opcode = TERN_WRITE, .local = a.buf + i * PART,
                              .segment = a.peer, .remote = (uintptr_t)(b.buf + i * PART),
                              .length = PART};
            cr_assert_eq(tern_batch_submit(bt[i], &r, 1), 1);
        }
        for (int i = 0; i < BATCHES; i++) {
            cr_assert_neq(tern_batch_wait(bt[i], 30000), TERN_ERR_TIMEOUT, "a request hung");
            tern_request_state st;
            cr_assert_eq(tern_batch_state(bt[i], 0, &st), 0);
            cr_assert_eq(st.status, TERN_COMPLETED, "round %d, batch %d: %s", round, i,
                         tern_batch_error(bt[i], 0));
            cr_assert_eq(tern_batch_reset(bt[i]), 0);
        }
        cr_assert_eq(memcmp(a.buf, b.buf, LEN), 0, "round %d", round);
        cr_assert_eq(tern_segment_close(a.e, a.peer), 0);
    }
    cr_log_info("%d rounds in 10 s", round);
    for (int i = 0; i < BATCHES; i++)
        cr_assert_eq(tern_batch_free(bt[i]), 0);
    node_down(&a);
    node_down(&b);
}

/* TERN_ERR_DEVICE marks a device down; after its hold time it is tried
 * again and, working, stays up. */
Test(datapath, downed_device_comes_back)
{
    char t[512], u[512];
    node a, b;
    node_up(&a, entry(t, sizeof t, "hsloop", TERN_HSLOOP_PATH,
                      "    devices: 2\n    fail_first: 1\n    fail_code: -16\n"), 2);
    node_up(&b, entry(u, sizeof u, "hsloop", TERN_HSLOOP_PATH, "    devices: 2\n"), 2);
    link_to(&a, &b);
    char why[1024] = "";
    cr_assert_eq(run(&a, &b, TERN_WRITE, 0, 1000, why, sizeof why).status, TERN_COMPLETED, "%s",
                 why);
    tern_topology *topo = a.e->xports[0].topo;
    int down = tern_topology_is_down(topo, 0) + tern_topology_is_down(topo, 1);
    cr_assert_eq(down, 1, "the failed device is down");
    uint64_t start = tern_now_ms();
    while (tern_topology_is_down(topo, 0) + tern_topology_is_down(topo, 1) > 0) {
        cr_assert_lt(tern_now_ms() - start, 10000, "the device stayed down for 10 s");
        cr_assert_eq(run(&a, &b, TERN_WRITE, 0, 1000, why, sizeof why).status, TERN_COMPLETED,
                     "%s", why);
        usleep(50000);
    }
    int seen[2] = {0, 0};
    for (int i = 0; i < 200; i++) {
        int d = tern_topology_select(topo, "*", 0, NULL);
        cr_assert(d == 0 || d == 1);
        seen[d] = 1;
    }
    cr_assert(seen[0] && seen[1], "both devices are chosen again");
    node_down(&a);
    node_down(&b);
}

/* Slices of b still in the engine's hands (the count tern_batch_free reads). */
static long in_flight(tern_batch *b)
{
    pthread_mutex_lock(&b->lock);
    long n = b->inflight;
    pthread_mutex_unlock(&b->lock);
    return n;
}

/* The transport holds its completions.  A wait that runs out before the
 * request's own timeout leaves it PENDING; the request's timeout ends it
 * TIMEOUT; the batch cannot be freed while its slice is in flight; and the
 * late completion, once released, is ignored: the request stays TIMEOUT
 * with nothing transferred. */
Test(datapath, timeout_and_free_refused_while_in_flight)
{
    char t[512];
    node a, b;
    node_up(&a, entry(t, sizeof t, "loopx", TERN_LOOPX_PATH, NULL), 2);
    node_up(&b, t, 2);
    link_to(&a, &b);
    tern_xport *x = &a.e->xports[0];
    char out[256];
    x->ops->query(x->pl->ctx, "hold", out, sizeof out);
    /* the wait's own limit: the request (60 s timeout) is still pending */
    tern_batch *w = tern_batch_alloc(a.e, 1);
    tern_request r = {.opcode = TERN_WRITE, .local = a.buf, .segment = a.peer,
                      .remote = (uintptr_t)b.buf, .length = 4096, .timeout_ms = 60000};
    cr_assert_eq(tern_batch_submit(w, &r, 1), 1);
    cr_assert_eq(tern_batch_wait(w, 20), TERN_ERR_TIMEOUT, "wait itself timed out");
    tern_request_state st;
    tern_batch_state(w, 0, &st);
    cr_assert_eq(st.status, TERN_PENDING, "the wait ran out, not the request (%d)", st.status);
    /* the request's own limit */
    tern_batch *bt = tern_batch_alloc(a.e, 2);
    r.timeout_ms = 100;
    cr_assert_eq(tern_batch_submit(bt, &r, 1), 1);
    cr_assert_eq(tern_batch_wait(bt, 30000), TERN_ERR_TIMEOUT, "request timed out");
    tern_batch_state(bt, 0, &st);
    cr_assert_eq(st.status, TERN_TIMEOUT);
    cr_assert_eq(st.transferred, 0);
    cr_assert_eq(tern_batch_free(bt), TERN_ERR_BUSY);
    cr_assert(strstr(tern_engine_last_error(a.e), "in flight"), "%s",
              tern_engine_last_error(a.e));
    cr_assert_eq(in_flight(bt), 1);
    x->ops->query(x->pl->ctx, "release", out, sizeof out);
    cr_assert_eq(in_flight(bt), 0, "the late completion came back (complete() is synchronous)");
    tern_batch_state(bt, 0, &st);
    cr_assert_eq(st.status, TERN_TIMEOUT, "a late completion changed the status to %d",
                 st.status);
    cr_assert_eq(st.transferred, 0, "a late completion counted %llu bytes",
                 (unsigned long long)st.transferred);
    cr_assert(strstr(tern_batch_error(bt, 0), "timed out"), "%s", tern_batch_error(bt, 0));
    cr_assert_eq(tern_batch_free(bt), 0, "freed once the late completion came back");
    /* the first request, still within its timeout, completes normally */
    cr_assert_eq(tern_batch_wait(w, 30000), 0, "%s", tern_batch_error(w, 0));
    cr_assert_eq(tern_batch_free(w), 0);
    node_down(&a);
    node_down(&b);
}

/* The application thread never connects: while a connect to a slow peer
 * runs on a worker (hsloop's ep_open sleeps 3 s here), a request to
 * another peer completes, and the slow one is still pending then. */
Test(datapath, slow_peer_does_not_block_a_submit_to_another)
{
    char t[1024], hs[512], u[512];
    snprintf(t, sizeof t, "%s  - name: memcpy\n",
             entry(hs, sizeof hs, "hsloop", TERN_HSLOOP_PATH, "    open_delay_ms: 3000\n"));
    node a, slow, fast;
    node_up(&a, t, 2);
    node_up(&slow, entry(u, sizeof u, "hsloop", TERN_HSLOOP_PATH, NULL), 2);
    node_up(&fast, "  - name: memcpy\n", 2);
    link_to(&a, &slow);
    tern_segment_id to_slow = a.peer;
    link_to(&a, &fast);
    tern_request rs = {.opcode = TERN_WRITE, .local = a.buf, .segment = to_slow,
                       .remote = (uintptr_t)slow.buf, .length = 4096};
    tern_batch *bs = tern_batch_alloc(a.e, 1);
    cr_assert_eq(tern_batch_submit(bs, &rs, 1), 1);
    char why[1024] = "";
    cr_assert_eq(run(&a, &fast, TERN_WRITE, 8192, 4096, why, sizeof why).status, TERN_COMPLETED,
                 "%s", why);
    tern_request_state st;
    cr_assert_eq(tern_batch_state(bs, 0, &st), 0);
    cr_assert_eq(st.status, TERN_PENDING, "the slow peer's connect is still running");
    cr_assert_eq(tern_batch_wait(bs, 30000), 0, "%s", tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_free(bs), 0);
    node_down(&a);
    node_down(&slow);
    node_down(&fast);
}
