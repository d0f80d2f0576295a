#define _GNU_SOURCE /* engine.h needs pthread_rwlock_t */
/* Endpoints over a transport that needs the handshake (tests/support/plugins/
 * hsloop.c): Connection frames through the real daemons, the passive
 * endpoint reused in the other direction, a refusal reported verbatim,
 * concurrent misses on one key connecting once, and simultaneous open
 * ending with exactly one connection. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "tern/tern.h"

/* hsloop's endpoint, as the test reads it. */
typedef struct hs_ep_view {
    void *ctx;
    uint64_t peer;
    int connected;
} hs_ep_view;

#define LEN 65536

typedef struct node {
    tern_engine *e;
    uint8_t *buf;
    tern_segment_id peer;
} node;

/* extra: more keys of the hsloop entry, each "    key: value\n". */
static void node_up_full(node *n, int delay_ms, int refuse, const char *extra, int retries)
{
    char yaml[2048], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\n"
             "transports:\n"
             "  - name: hsloop\n"
             "    path: %s\n"
             "    open_delay_ms: %d\n"
             "    refuse: %s\n"
             "%s"
             "retries: %d\n"
             "log_level: error\n",
             TERN_HSLOOP_PATH, delay_ms, refuse ? "true" : "false", extra, retries);
    n->e = tern_engine_create_from_yaml(yaml, "hsloop", err, sizeof err);
    cr_assert_not_null(n->e, "%s", err);
    n->buf = calloc(1, 4 * LEN);
    cr_assert_eq(tern_register_memory(n->e, n->buf, 4 * LEN, NULL), 0);
}

static void node_up_with(node *n, int delay_ms, int refuse, const char *extra)
{
    node_up_full(n, delay_ms, refuse, extra, 1);
}

static void node_up(node *n, int delay_ms, int refuse)
{
    node_up_with(n, delay_ms, refuse, "");
}

static void node_down(node *n)
{
    tern_engine_destroy(n->e);
    free(n->buf);
}

static void link_nodes(node *a, node *b)
{
    a->peer = tern_segment_open(a->e, tern_engine_server_name(b->e));
    cr_assert_geq(a->peer, 0, "%s", tern_engine_last_error(a->e));
    b->peer = tern_segment_open(b->e, tern_engine_server_name(a->e));
    cr_assert_geq(b->peer, 0, "%s", tern_engine_last_error(b->e));
}

typedef struct write_job {
    node *from, *to;
    size_t off;
    int status;
    char why[512];
    atomic_int *submitted; /* counted once the request is cut (NULL: not counted) */
} write_job;

static void *write_once(void *arg)
{
    write_job *j = arg;
    memset(j->from->buf + j->off, 0x5a, 1000);
    tern_request r = {.opcode = TERN_WRITE, .local = j->from->buf + j->off,
                      .segment = j->from->peer, .remote = (uintptr_t)(j->to->buf + j->off),
                      .length = 1000};
    tern_batch *b = tern_batch_alloc(j->from->e, 1);
    tern_batch_submit(b, &r, 1);
    if (j->submitted)
        atomic_fetch_add(j->submitted, 1);
    tern_batch_wait(b, 20000);
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    j->status = st.status;
    snprintf(j->why, sizeof j->why, "%s", tern_batch_error(b, 0));
    tern_batch_free(b);
    return NULL;
}

static int live_eps(node *n)
{
    tern_xport *x = &n->e->xports[0];
    char out[64] = "";
    x->ops->query(x->pl->ctx, "eps", out, sizeof out);
    return atoi(out + 5); /* "open=N opened=M" */
}

static int opened_eps(node *n)
{
    tern_xport *x = &n->e->xports[0];
    char out[64] = "";
    x->ops->query(x->pl->ctx, "eps", out, sizeof out);
    const char *p = strstr(out, "opened=");
    return p ? atoi(p + 7) : -1;
}

/* A field "name=N" of hsloop's query("eps") answer; what "open_gate" opens
 * the gate of the active ep_open first. */
static int hs_field(node *n, const char *what, const char *name)
{
    tern_xport *x = &n->e->xports[0];
    char out[160] = "";
    x->ops->query(x->pl->ctx, what, out, sizeof out);
    const char *p = strstr(out, name);
    cr_assert_not_null(p, "hsloop's query has no %s: %s", name, out);
    return atoi(p + strlen(name));
}

static uint64_t misses(node *n)
{
    tern_epstore_stats st;
    tern_epstore_stats_get(n->e->xports[0].eps, &st);
    return st.misses;
}

/* Wait for a condition the threads under test reach (bounded so a
 * regression fails rather than hangs; the bound is not a timing claim). */
#define WAIT_FOR(cond, what)                                                             \
    do {                                                                                 \
        struct timespec ms1 = {0, 1000000L};                                             \
        int waited_ = 0;                                                                 \
        while (!(cond) && waited_++ < 60000)                                             \
            nanosleep(&ms1, NULL);                                                       \
        cr_assert((cond), "still waiting after 60 s for %s", what);                      \
    } while (0)

static size_t stored(node *n)
{
    tern_epstore_stats st;
    tern_epstore_stats_get(n->e->xports[0].eps, &st);
    return st.size;
}

/* The endpoint a stores for b (hs0 <-> b@hs0), or NULL. */
static hs_ep_view *ep_for(node *a, node *b, tern_ep_ref **ref)
{
    char key[400], nic[320];
    snprintf(nic, sizeof nic, "%s@hs0", tern_engine_server_name(b->e));
    tern_epstore_key(key, sizeof key, "hs0", nic);
    void *ep = NULL;
    *ref = tern_epstore_get(a->e->xports[0].eps, key, &ep);
    return ep;
}

/* Exactly one connection: one endpoint each side, paired with each other. */
/* An endpoint replaced by a simultaneous open is closed when its last
 * reference goes (a handshake worker may still hold it for a moment after
 * both transfers completed): wait for that, then check exactly one. */
static void assert_one_connection(node *a, node *b)
{
    WAIT_FOR(live_eps(a) <= 1 && live_eps(b) <= 1, "replaced endpoints to close");
    cr_assert_eq(stored(a), 1);
    cr_assert_eq(stored(b), 1);
    cr_assert_eq(live_eps(a), 1, "a has %d live endpoints", live_eps(a));
    cr_assert_eq(live_eps(b), 1, "b has %d live endpoints", live_eps(b));
    tern_ep_ref *ra, *rb;
    hs_ep_view *ea = ep_for(a, b, &ra), *eb = ep_for(b, a, &rb);
    cr_assert(ea && eb);
    cr_assert_eq(ea->peer, (uint64_t)(uintptr_t)eb, "a's endpoint talks to b's");
    cr_assert_eq(eb->peer, (uint64_t)(uintptr_t)ea, "b's endpoint talks to a's");
    tern_epstore_release(a->e->xports[0].eps, ra);
    tern_epstore_release(b->e->xports[0].eps, rb);
}

Test(endpoint, handshake_then_reuse_in_both_directions)
{
    node a, b;
    node_up(&a, 0, 0);
    node_up(&b, 0, 0);
    link_nodes(&a, &b);
    write_job j1 = {&a, &b, 0, 0, "", NULL}, j2 = {&b, &a, LEN, 0, "", NULL};
    write_once(&j1);
    cr_assert_eq(j1.status, TERN_COMPLETED, "%s", j1.why);
    cr_assert_eq(memcmp(a.buf, b.buf, 1000), 0);
    write_once(&j2); /* b reuses the passive endpoint a's handshake made */
    cr_assert_eq(j2.status, TERN_COMPLETED, "%s", j2.why);
    assert_one_connection(&a, &b);
    node_down(&a);
    node_down(&b);
}

Test(endpoint, refusal_reported_verbatim)
{
    node a, b;
    node_up(&a, 0, 0);
    node_up(&b, 0, 1);
    link_nodes(&a, &b);
    write_job j = {&a, &b, 0, 0, "", NULL};
    write_once(&j);
    cr_assert_eq(j.status, TERN_FAILED);
    char want[400];
    snprintf(want, sizeof want, "peer %s refused: hsloop: refused by configuration",
             tern_engine_server_name(b.e));
    cr_assert(strstr(j.why, want), "%s", j.why);
    cr_assert_eq(stored(&a), 0);
    cr_assert_eq(live_eps(&a), 0, "the refused endpoint was closed");
    node_down(&a);
    node_down(&b);
}

/* The overlap is forced, not hoped for: a's first connect is held at
 * hsloop's gate until every thread has looked the key up and missed it. */
Test(endpoint, concurrent_misses_connect_once)
{
    node a, b;
    node_up_with(&a, 0, 0, "    gate: true\n");
    node_up(&b, 0, 0);
    link_nodes(&a, &b);
    enum { N = 8 };
    write_job j[N];
    pthread_t t[N];
    uint64_t m0 = misses(&a);
    for (int i = 0; i < N; i++) {
        j[i] = (write_job){&a, &b, (size_t)i * 1000, 0, "", NULL};
        pthread_create(&t[i], NULL, write_once, &j[i]);
    }
    WAIT_FOR(misses(&a) - m0 >= N && hs_field(&a, "eps", "gated=") >= 1,
             "every thread to miss the key while a connect is held");
    hs_field(&a, "open_gate", "gated=");
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(j[i].status, TERN_COMPLETED, "%s", j[i].why);
    }
    cr_assert_eq(opened_eps(&a), 1, "%d endpoints opened for %d concurrent misses",
                 opened_eps(&a), N);
    cr_assert_eq(opened_eps(&b), 1, "%d handshakes reached b", opened_eps(&b));
    assert_one_connection(&a, &b);
    node_down(&a);
    node_down(&b);
}

/* Round 0 of the simultaneous open: both active connects are held at
 * hsloop's gate until each side has one in flight, then the side whose
 * local_nic_path is smaller is let through first: the larger one yields to
 * it, and its own attempt, released afterwards, is accepted by a peer with
 * nothing in flight any more, so it must replace the passive endpoint it
 * inserted. */
static void simultaneous_open_in_turn(node *a, node *b, pthread_t ta, pthread_t tb, int a_first)
{
    hs_field(a_first ? a : b, "open_gate", "gated=");
    pthread_join(a_first ? ta : tb, NULL);
    hs_field(a_first ? b : a, "open_gate", "gated=");
    pthread_join(a_first ? tb : ta, NULL);
}

/* The other rounds: both Connection frames provably cross.  Three gates
 * (hsloop: gate, pgate, cgate) hold each step until the test has seen the
 * one before it on both sides:
 *  1. both active connects are in flight (held before sending);
 *  2. both are released, and each daemon has taken the other's Connection
 *     past the tie-break while its own connect is still in flight: the
 *     larger side (big) accepts and is held at its passive ep_open, so
 *     neither connect can finish; the smaller side (small) refuses big's
 *     frame (big's active endpoint is closed unconnected) or, if the
 *     tie-break is broken, accepts it too and is held likewise;
 *  3. the passive sides are released; each active connect whose Connection
 *     was accepted is held when its reply arrives (ep_connect), which is
 *     after the peer's passive endpoint was inserted;
 *  4. the active connects are released.
 * Without the tie-break both sides accept, both passive endpoints are in
 * the stores before either active one, both active ones replace them, and
 * each side keeps an endpoint paired with one the other side dropped. */
static void simultaneous_open_crossing(node *a, node *b, pthread_t ta, pthread_t tb, int a_first)
{
    node *small = a_first ? a : b, *big = a_first ? b : a;
    hs_field(a, "open_gate", "gated=");
    hs_field(b, "open_gate", "gated=");
    WAIT_FOR(hs_field(big, "eps", "pgated=") == 1 &&
                 (hs_field(big, "eps", "refused=") == 1 ||
                  hs_field(small, "eps", "pgated=") == 1),
             "each side to take the other's Connection while its own is in flight");
    int small_accepted = hs_field(small, "eps", "pgated=");
    hs_field(a, "open_pgate", "pgated=");
    hs_field(b, "open_pgate", "pgated=");
    WAIT_FOR(hs_field(small, "eps", "cgated=") == 1 &&
                 hs_field(big, "eps", "cgated=") == small_accepted,
             "each accepted Connection's reply to reach its active side");
    hs_field(a, "open_cgate", "cgated=");
    hs_field(b, "open_cgate", "cgated=");
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_assert_eq(hs_field(small, "eps", "refused="), 0, "small's Connection was accepted");
}

Test(endpoint, simultaneous_open_ends_with_one_connection)
{
    for (int round = 0; round < 4; round++) {
        const char *gates = round == 0 ? "    gate: true\n"
                                       : "    gate: true\n    pgate: true\n    cgate: true\n"
                                         "io_timeout_ms: 60000\n";
        node a, b;
        node_up_with(&a, 0, 0, gates);
        node_up_with(&b, 0, 0, gates);
        link_nodes(&a, &b);
        write_job ja = {&a, &b, 0, 0, "", NULL}, jb = {&b, &a, LEN, 0, "", NULL};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, write_once, &ja);
        pthread_create(&tb, NULL, write_once, &jb);
        WAIT_FOR(hs_field(&a, "eps", "gated=") == 1 && hs_field(&b, "eps", "gated=") == 1,
                 "both sides to have a connect in flight");
        char na[160], nb[160];
        snprintf(na, sizeof na, "%s@hs0", tern_engine_server_name(a.e));
        snprintf(nb, sizeof nb, "%s@hs0", tern_engine_server_name(b.e));
        int a_first = strcmp(na, nb) < 0;
        if (round == 0)
            simultaneous_open_in_turn(&a, &b, ta, tb, a_first);
        else
            simultaneous_open_crossing(&a, &b, ta, tb, a_first);
        cr_assert_eq(ja.status, TERN_COMPLETED, "round %d a: %s", round, ja.why);
        cr_assert_eq(jb.status, TERN_COMPLETED, "round %d b: %s", round, jb.why);
        assert_one_connection(&a, &b);
        node_down(&a);
        node_down(&b);
    }
}

/* A slice failing with a connection error drops its endpoint; the retry
 * handshakes a fresh one and the peer replaces its passive one. */
Test(endpoint, connection_failure_rebuilds_endpoint)
{
    node a, b;
    node_up_with(&a, 0, 0, "    fail_first: 1\n    fail_code: -12\n");
    node_up(&b, 0, 0);
    link_nodes(&a, &b);
    write_job j = {&a, &b, 0, 0, "", NULL};
    write_once(&j);
    cr_assert_eq(j.status, TERN_COMPLETED, "%s", j.why);
    cr_assert_eq(memcmp(a.buf, b.buf, 1000), 0);
    cr_assert_eq(opened_eps(&a), 2, "a fresh endpoint after the failure");
    cr_assert_eq(opened_eps(&b), 2);
    assert_one_connection(&a, &b);
    node_down(&a);
    node_down(&b);
}

/* TERN_ERR_DEVICE marks the local device down: the retry and every later
 * choice use the other one. */
Test(endpoint, device_failure_fails_over)
{
    node a, b;
    node_up_with(&a, 0, 0, "    devices: 2\n    fail_first: 1\n    fail_code: -16\n");
    node_up_with(&b, 0, 0, "    devices: 2\n");
    link_nodes(&a, &b);
    write_job j = {&a, &b, 0, 0, "", NULL};
    write_once(&j);
    cr_assert_eq(j.status, TERN_COMPLETED, "%s", j.why);
    /* The device that failed is the one avoided: the retry ran on the other
     * one, and so does every later choice and transfer. */
    int failed = hs_field(&a, "eps", "failed_dev="), ok = hs_field(&a, "eps", "ok_dev=");
    cr_assert(failed == 0 || failed == 1, "the injected failure ran on device %d", failed);
    cr_assert_eq(ok, 1 - failed, "the retry ran on device %d; %d failed", ok, failed);
    tern_topology *t = a.e->xports[0].topo;
    int first = tern_topology_select(t, "*", 0, NULL);
    cr_assert_eq(first, 1 - failed, "device %d chosen after device %d failed", first, failed);
    for (int i = 0; i < 50; i++)
        cr_assert_eq(tern_topology_select(t, "*", 0, NULL), first, "one device is down");
    for (int i = 1; i < 4; i++) {
        write_job k = {&a, &b, (size_t)i * 1000, 0, "", NULL};
        write_once(&k);
        cr_assert_eq(k.status, TERN_COMPLETED, "%s", k.why);
        cr_assert_eq(hs_field(&a, "eps", "ok_dev="), 1 - failed, "transfer %d used device %d",
                     i, hs_field(&a, "eps", "ok_dev="));
    }
    node_down(&a);
    node_down(&b);
}

/* Threads missing the same key while its connect fails share that failure:
 * an unreachable or refusing peer costs one handshake per wave of retries,
 * not one per slice.  One wave (retries: 0), forced to overlap: the
 * connect is held at hsloop's gate until every thread has missed the key. */
Test(endpoint, concurrent_misses_share_a_failure)
{
    node a, b;
    node_up_full(&a, 0, 0, "    gate: true\n", 0);
    node_up(&b, 0, 1);
    link_nodes(&a, &b);
    enum { N = 8 };
    write_job j[N];
    pthread_t t[N];
    uint64_t m0 = misses(&a);
    atomic_int submitted = 0;
    for (int i = 0; i < N; i++) {
        j[i] = (write_job){&a, &b, (size_t)i * 1000, 0, "", &submitted};
        pthread_create(&t[i], NULL, write_once, &j[i]);
    }
    /* every request cut (so counted in the attempt that fails) and missed
     * the key (workers miss it too: the count alone could be reached
     * before every thread submitted, and a request cut after the failure
     * is a new wave) */
    WAIT_FOR(atomic_load(&submitted) == N && misses(&a) - m0 >= N &&
                 hs_field(&a, "eps", "gated=") >= 1,
             "every thread to miss the key while a connect is held");
    hs_field(&a, "open_gate", "gated=");
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(j[i].status, TERN_FAILED);
        cr_assert(strstr(j[i].why, "refused by configuration"), "%s", j[i].why);
    }
    cr_assert_eq(opened_eps(&b), 1, "%d handshakes for %d concurrent slices", opened_eps(&b),
                 N);
    cr_assert_eq(opened_eps(&a), 1, "%d endpoints opened for %d concurrent misses",
                 opened_eps(&a), N);
    cr_assert_eq(live_eps(&a), 0);
    node_down(&a);
    node_down(&b);
}

/* A request whose first slice fails for good: its other slices are dropped
 * before they reach the transport (regression: use after free there). */
Test(endpoint, multi_slice_request_to_refusing_peer)
{
    node a, b;
    node_up(&a, 0, 0);
    node_up(&b, 0, 1);
    link_nodes(&a, &b);
    tern_request r = {.opcode = TERN_WRITE, .local = a.buf, .segment = a.peer,
                      .remote = (uintptr_t)b.buf, .length = 4 * LEN};
    tern_batch *bt = tern_batch_alloc(a.e, 1);
    cr_assert_eq(tern_batch_submit(bt, &r, 1), 1);
    cr_assert_eq(tern_batch_wait(bt, 10000), TERN_ERR_REFUSED, "%s",
                 tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_slice_count(bt, 0), 4);
    cr_assert_eq(tern_batch_free(bt), 0);
    node_down(&a);
    node_down(&b);
}
