#define _GNU_SOURCE
/* The step after: what a call promised once it returned or refused, checked
 * by doing the next thing, at the exact gap where it could go wrong.
 *  - sync: tern_transfer_sync that timed out returns only once its slice
 *    came back from the transport, and nothing writes its memory after;
 *  - reset: refused while a timed-out request's slice is still held, and
 *    while the notification riding on requests that all completed still
 *    waits in the sender's outbox (behind one to a stopped peer);
 *  - backoff: a failing peer's retries wait 20 ms doubling to 500 ms, and a
 *    success starts the doubling again, checked against time bounds that a
 *    broken cap, a cap turned floor or a doubling never reset all miss;
 *  - notifications: names of 255 bytes pass and 256 are refused, a message
 *    of exactly TERN_NOTIFY_MAX bytes rides on a batch, and the receive
 *    queue takes exactly TERN_NOTIFY_QUEUE before it refuses.
 * The transport is loopx (tests/support/plugins/hsloop.c): query("hold")
 * keeps completions (and the bytes of slices submitted meanwhile) back
 * until query("release"); query("fail=N") fails the next N slices. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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

static void node_up_yaml(node *n, const char *transports, const char *extra)
{
    char yaml[4096], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\n"
             "transports:\n%s"
             "slice_size: 64K\n"
             "log_level: error\n%s",
             transports, extra ? extra : "");
    n->e = tern_engine_create_from_yaml(yaml, "test_after", err, sizeof err);
    cr_assert_not_null(n->e, "%s", err);
    n->buf = calloc(1, LEN);
    cr_assert_eq(tern_register_memory(n->e, n->buf, LEN, NULL), 0, "%s",
                 tern_engine_last_error(n->e));
}

static void node_up(node *n, const char *extra)
{
    node_up_yaml(n, "  - name: loopx\n    path: " TERN_LOOPX_PATH "\n", extra);
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

/* One request first, so the endpoint exists: a later slice reaches the
 * transport inside its submit, before any short timeout can run out (a
 * first request waits for a worker to connect, which a loaded machine can
 * make longer than the timeout under test). */
static void connect_first(node *a, node *b)
{
    cr_assert_eq(tern_transfer_sync(a->e, TERN_READ, a->buf + LEN - 4096, a->peer,
                                    (uintptr_t)(b->buf + LEN - 4096), 4096, -1), 0, "%s",
                 tern_engine_last_error(a->e));
}

/* query() of the node's first transport; returns the counter `name` of its
 * answer ("... name=N ..."). */
static long xq(node *n, const char *what, const char *name)
{
    tern_xport *x = &n->e->xports[0];
    char out[256] = "", key[64];
    x->ops->query(x->pl->ctx, what, out, sizeof out);
    snprintf(key, sizeof key, "%s=", name);
    const char *p = strstr(out, key);
    cr_assert_not_null(p, "no %s in '%s'", name, out);
    return atol(p + strlen(key));
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait (bounded) until the transport was handed `want` slices in all. */
static void wait_submitted(node *n, long want)
{
    for (int i = 0; i < 2000 && xq(n, "eps", "submitted") < want; i++)
        sleep_ms(5);
    cr_assert_geq(xq(n, "eps", "submitted"), want, "the slice never reached the transport");
}

/* ---- tern_transfer_sync: a timeout returns after the slice came back ------------- */

typedef struct sync_call {
    node *a, *b;
    int op, timeout_ms, rc;
    char why[512]; /* the engine's last error is per thread: read on this one */
    atomic_int returned;
} sync_call;

static void *sync_main(void *arg)
{
    sync_call *c = arg;
    c->rc = tern_transfer_sync(c->a->e, c->op, c->a->buf, c->a->peer, (uintptr_t)c->b->buf, 4096,
                               c->timeout_ms);
    snprintf(c->why, sizeof c->why, "%s", tern_engine_last_error(c->a->e));
    atomic_store(&c->returned, 1);
    return NULL;
}

/* The transport holds the slice of a READ (and writes its bytes only when
 * released) well past the call's 100 ms: the call has timed out, but must
 * not return while the transport may still write the caller's buffer.
 * Once released it returns TIMEOUT, and the memory is the caller's: a
 * pattern written after the return stays. */
Test(sync, timed_out_returns_only_after_its_slice_came_back)
{
    node a, b;
    node_up(&a, NULL);
    node_up(&b, NULL);
    link_to(&a, &b);
    connect_first(&a, &b);
    memset(b.buf, 0xAB, 4096);
    long before = xq(&a, "eps", "submitted");
    xq(&a, "hold", "open");
    sync_call c = {.a = &a, .b = &b, .op = TERN_READ, .timeout_ms = 100};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, sync_main, &c), 0);
    wait_submitted(&a, before + 1);
    sleep_ms(600); /* six times the call's timeout */
    int early = atomic_load(&c.returned);
    xq(&a, "release", "open"); /* the transport writes the 4096 bytes now */
    pthread_join(t, NULL);
    cr_assert_not(early, "tern_transfer_sync returned (%d) while its slice was still held by "
                  "the transport", c.rc);
    cr_assert_eq(c.rc, TERN_ERR_TIMEOUT, "rc %d", c.rc);
    cr_assert(strstr(c.why, "did not finish within 100 ms"), "%s", c.why);
    memset(a.buf, 0x11, 4096); /* the caller's again: nothing may overwrite this */
    sleep_ms(100);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(a.buf[i], 0x11, "byte %d written after tern_transfer_sync returned", i);
    /* the engine goes on: a sync call without a hold completes */
    cr_assert_eq(tern_transfer_sync(a.e, TERN_READ, a.buf, a.peer, (uintptr_t)b.buf, 4096, -1), 0,
                 "%s", tern_engine_last_error(a.e));
    cr_assert_eq(a.buf[4095], 0xAB);
    node_down(&a);
    node_down(&b);
}

/* Every timeout class of tern_transfer_sync against a held slice: 0 and a
 * small value time out (and return once the slice is back), -1 waits for
 * as long as the slice is held and then succeeds. */
Test(sync, timeout_zero_small_and_none)
{
    node a, b;
    node_up(&a, NULL);
    node_up(&b, NULL);
    link_to(&a, &b);
    connect_first(&a, &b); /* even timeout 0 then has its slice in flight */
    int classes[] = {0, 50, -1};
    for (int k = 0; k < 3; k++) {
        memset(b.buf, 0x20 + k, 4096);
        long before = xq(&a, "eps", "submitted");
        xq(&a, "hold", "open");
        sync_call c = {.a = &a, .b = &b, .op = TERN_READ, .timeout_ms = classes[k]};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, sync_main, &c), 0);
        wait_submitted(&a, before + 1);
        sleep_ms(200);
        int early = atomic_load(&c.returned);
        xq(&a, "release", "open");
        pthread_join(t, NULL);
        cr_assert_not(early, "timeout %d: returned while its slice was held", classes[k]);
        cr_assert_eq(c.rc, classes[k] < 0 ? 0 : TERN_ERR_TIMEOUT, "timeout %d: rc %d",
                     classes[k], c.rc);
        if (classes[k] < 0)
            cr_assert_eq(a.buf[4095], 0x20 + k, "the waited READ brought its bytes");
    }
    node_down(&a);
    node_down(&b);
}

/* ---- reset: not while a slice is held or a notification unsent -------------------- */

/* The request timed out (its status is final) but its slice is still in
 * the transport's hands: reset must refuse, or the next submit would reuse
 * a request the late completion still points at. */
Test(reset, refused_while_a_timed_out_slice_is_held)
{
    node a, b;
    node_up(&a, NULL);
    node_up(&b, NULL);
    link_to(&a, &b);
    connect_first(&a, &b);
    xq(&a, "hold", "open");
    tern_batch *bt = tern_batch_alloc(a.e, 1);
    tern_request r = {.opcode = TERN_WRITE, .local = a.buf, .segment = a.peer,
                      .remote = (uintptr_t)b.buf, .length = 4096, .timeout_ms = 50};
    cr_assert_eq(tern_batch_submit(bt, &r, 1), 1);
    cr_assert_eq(tern_batch_wait(bt, 30000), TERN_ERR_TIMEOUT);
    cr_assert_eq(tern_batch_inflight(bt), 1);
    cr_assert_eq(tern_batch_reset(bt), TERN_ERR_BUSY, "reset while a slice is held");
    cr_assert(strstr(tern_engine_last_error(a.e), "1 slice(s) still held"), "%s",
              tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_size(bt), 1, "the refused reset kept the request");
    xq(&a, "release", "open");
    cr_assert_eq(tern_batch_inflight(bt), 0);
    cr_assert_eq(tern_batch_reset(bt), 0, "%s", tern_engine_last_error(a.e));
    /* reused: the next request completes */
    memset(a.buf, 0x5C, 4096);
    r.timeout_ms = 0;
    cr_assert_eq(tern_batch_submit(bt, &r, 1), 1);
    cr_assert_eq(tern_batch_wait(bt, 30000), 0, "%s", tern_batch_error(bt, 0));
    cr_assert_eq(b.buf[4095], 0x5C);
    cr_assert_eq(tern_batch_free(bt), 0);
    node_down(&a);
    node_down(&b);
}

/* A target engine in its own process (support/helpers/fault_peer.c). */
typedef struct proc_peer {
    pid_t pid;
    int in;
    FILE *out;
    char name[128];
} proc_peer;

static void proc_peer_start(proc_peer *p)
{
    int out[2], in[2];
    cr_assert_eq(pipe(out), 0);
    cr_assert_eq(pipe(in), 0);
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        /* killed with this test's process, even stopped: a failed assertion
         * leaves no stopped peer behind holding the test's output open */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(out[1], 1);
        dup2(in[0], 0); /* it runs until we close the other end */
        close(out[0]);
        close(in[1]);
        execl(TERN_FAULT_PEER, TERN_FAULT_PEER, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    p->in = in[1];
    p->out = fdopen(out[0], "r");
    char line[512] = "";
    cr_assert_not_null(fgets(line, sizeof line, p->out), "the peer program did not start");
    cr_assert_eq(sscanf(line, "READY %127s", p->name), 1, "%s", line);
}

/* kill(SIGSTOP) returns before every thread of the peer has stopped (one
 * still running could answer what is sent right after): wait until /proc
 * shows each of its threads stopped. */
static void wait_stopped(pid_t pid)
{
    for (int i = 0; i < 10000; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
        DIR *d = opendir(path);
        cr_assert_not_null(d);
        int running = 0, seen = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char stat[320], buf[512] = "";
            snprintf(stat, sizeof stat, "/proc/%d/task/%s/stat", (int)pid, de->d_name);
            FILE *f = fopen(stat, "r");
            if (!f)
                continue;
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            const char *p = strrchr(buf, ')');
            seen++;
            if (!p || (p[2] != 'T' && p[2] != 't'))
                running++;
        }
        closedir(d);
        if (seen && !running)
            return;
        sleep_ms(1);
    }
    cr_assert_fail("peer %d did not stop", (int)pid);
}

static void proc_peer_stop(proc_peer *p)
{
    kill(p->pid, SIGCONT);
    close(p->in);
    waitpid(p->pid, NULL, 0);
    fclose(p->out);
}

/* Wait (bounded) until request 0 of b is COMPLETED: a wait would also
 * wait for the notification riding on it. */
static void wait_completed(tern_batch *b)
{
    tern_request_state st = {0};
    for (int i = 0; i < 6000; i++) {
        cr_assert_eq(tern_batch_state(b, 0, &st), 0);
        if (st.status != TERN_PENDING && st.status != TERN_WAITING)
            break;
        sleep_ms(5);
    }
    cr_assert_eq(st.status, TERN_COMPLETED, "status %d: %s", st.status, tern_batch_error(b, 0));
}

/* The gap between "every request completed" and "the notification riding
 * on them was sent", held open for as long as the test needs: the sender
 * thread sends in order, and the first notification goes to a peer that
 * was stopped (SIGSTOP), so the second batch's, whose requests all
 * completed, is still queued behind it.  Reset must refuse then (it would
 * free the notification the sender is about to report on); once the peer
 * runs again both are delivered, in order, and reset succeeds. */
Test(reset, refused_while_its_notification_waits_behind_another)
{
    proc_peer c;
    proc_peer_start(&c);
    node a, b;
    node_up_yaml(&a, "  - name: tcp\n", "io_timeout_ms: 20000\n");
    node_up_yaml(&b, "  - name: tcp\n", NULL);
    link_to(&a, &b);
    tern_segment_id to_c = tern_segment_open(a.e, c.name);
    cr_assert_geq(to_c, 0, "%s", tern_engine_last_error(a.e));
    cr_assert_eq(kill(c.pid, SIGSTOP), 0);
    wait_stopped(c.pid);
    tern_request r = {.opcode = TERN_WRITE, .local = a.buf, .segment = a.peer,
                      .remote = (uintptr_t)b.buf, .length = 4096};
    tern_batch *first = tern_batch_alloc(a.e, 1), *second = tern_batch_alloc(a.e, 1);
    /* data to b, the notification to the stopped peer */
    cr_assert_eq(tern_batch_submit_with_notify(first, &r, 1, to_c, "stuck", "1"), 1);
    wait_completed(first);
    r.local = a.buf + 4096;
    r.remote = (uintptr_t)(b.buf + 4096);
    cr_assert_eq(tern_batch_submit_with_notify(second, &r, 1, a.peer, "queued", "2"), 1);
    wait_completed(second);
    /* every request of `second` completed; its notification is queued, and
     * a wait counts it: the batch is not done */
    cr_assert_eq(tern_batch_wait(second, 0), TERN_ERR_TIMEOUT);
    char why[256] = "";
    cr_assert_eq(tern_batch_notify_error(second, why, sizeof why), 1, "pending: %s", why);
    cr_assert_eq(tern_batch_reset(second), TERN_ERR_BUSY,
                 "reset with a notification still in the outbox");
    cr_assert(strstr(tern_engine_last_error(a.e), "1 notification(s) not sent"), "%s",
              tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_reset(first), TERN_ERR_BUSY);
    cr_assert_eq(tern_notify_recv(b.e, NULL, 0, NULL, 0, NULL, 0), 0, "not sent yet");
    cr_assert_eq(kill(c.pid, SIGCONT), 0);
    char name[64] = "";
    cr_assert_eq(tern_notify_recv_wait(b.e, NULL, 0, name, sizeof name, NULL, 0, 20000), 1,
                 "the queued notification arrives once the one before it is answered");
    cr_assert_str_eq(name, "queued");
    for (int i = 0; i < 20000 && (tern_batch_notify_error(second, NULL, 0) == 1 ||
                                  tern_batch_notify_error(first, NULL, 0) == 1); i++)
        sleep_ms(1);
    cr_assert_eq(tern_batch_notify_error(first, why, sizeof why), 0, "%s", why);
    cr_assert_eq(tern_batch_notify_error(second, why, sizeof why), 0, "%s", why);
    cr_assert_eq(tern_batch_wait(second, 0), 0, "a batch with its notification sent is done");
    cr_assert_eq(tern_batch_reset(second), 0, "%s", tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_reset(first), 0, "%s", tern_engine_last_error(a.e));
    tern_batch_free(first);
    tern_batch_free(second);
    node_down(&a);
    node_down(&b);
    proc_peer_stop(&c);
}

/* ---- backoff: doubling, its cap, reset by a success -------------------------------- */

/* One 4096-byte WRITE, waited for; returns the milliseconds it took. */
static uint64_t timed_write(node *a, node *b)
{
    uint64_t t0 = tern_now_ms();
    char why[512] = "";
    int rc = tern_transfer_sync(a->e, TERN_WRITE, a->buf, a->peer, (uintptr_t)b->buf, 4096, 60000);
    snprintf(why, sizeof why, "%s", tern_engine_last_error(a->e));
    cr_assert_eq(rc, 0, "%s", why);
    return tern_now_ms() - t0;
}

/* Eight failed attempts wait 20+40+80+160+320+500+500+500 = 2,120 ms
 * (the cap at 500 ms): the request completes after at least that and well
 * before 3,700 ms (a doubling without its cap waits 5,100 ms, a cap that
 * became a floor 4,000 ms).  Then a success: three more failures wait
 * 20+40+80 ms again, under 1,000 ms (a doubling not reset by the success
 * waits 3 x 500 ms).  The margins absorb a loaded 2-core machine; the
 * broken mechanisms wait at least their sums whatever the load. */
Test(backoff, doubles_to_its_cap_and_a_success_resets_it)
{
    node a, b;
    node_up(&a, "retries: 16\n");
    node_up(&b, NULL);
    link_to(&a, &b);
    cr_assert_lt(timed_write(&a, &b), 10000, "a healthy peer (connects)");
    xq(&a, "fail=8", "open");
    uint64_t ms = timed_write(&a, &b);
    cr_log_info("8 failures: %llu ms", (unsigned long long)ms);
    cr_assert_geq(ms, 2000, "8 failed attempts backed off only %llu ms", (unsigned long long)ms);
    cr_assert_lt(ms, 3700, "8 failed attempts took %llu ms: is the backoff capped at 500 ms?",
                 (unsigned long long)ms);
    xq(&a, "fail=3", "open");
    ms = timed_write(&a, &b);
    cr_log_info("3 failures after a success: %llu ms", (unsigned long long)ms);
    cr_assert_geq(ms, 120, "3 failed attempts backed off only %llu ms", (unsigned long long)ms);
    cr_assert_lt(ms, 1000, "3 failures after a success took %llu ms: did the success reset the "
                 "backoff?", (unsigned long long)ms);
    node_down(&a);
    node_down(&b);
}

/* ---- notifications: the exact edges ------------------------------------------------- */

static char *filled(size_t n, char ch)
{
    char *s = malloc(n + 1);
    memset(s, ch, n);
    s[n] = '\0';
    return s;
}

/* A name of 255 bytes is sent and arrives whole; 256 is refused, by
 * tern_notify_send and by a notification riding on a batch. */
Test(notify_edges, name_of_255_bytes_passes_256_is_refused)
{
    node a, b;
    node_up(&a, NULL);
    node_up(&b, NULL);
    link_to(&a, &b);
    char *n255 = filled(255, 'n'), *n256 = filled(256, 'n');
    char got[300] = "";
    cr_assert_eq(tern_notify_send(a.e, a.peer, n255, "m"), 0, "%s", tern_engine_last_error(a.e));
    cr_assert_eq(tern_notify_recv_wait(b.e, NULL, 0, got, sizeof got, NULL, 0, 10000), 1);
    cr_assert_str_eq(got, n255, "the 255-byte name arrived whole");
    cr_assert_eq(tern_notify_send(a.e, a.peer, n256, "m"), TERN_ERR_INVAL);
    cr_assert(strstr(tern_engine_last_error(a.e), "<= 255 bytes"), "%s",
              tern_engine_last_error(a.e));
    tern_batch *bt = tern_batch_alloc(a.e, 2);
    tern_request r = {.opcode = TERN_WRITE, .local = a.buf, .segment = a.peer,
                      .remote = (uintptr_t)b.buf, .length = 4096};
    cr_assert_eq(tern_batch_submit_with_notify(bt, &r, 1, a.peer, n256, "m"), TERN_ERR_INVAL);
    cr_assert_eq(tern_batch_size(bt), 0, "nothing of a refused call was submitted");
    cr_assert_eq(tern_batch_submit_with_notify(bt, &r, 1, a.peer, n255, "m"), 1, "%s",
                 tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_wait(bt, 30000), 0);
    memset(got, 0, sizeof got);
    cr_assert_eq(tern_notify_recv_wait(b.e, NULL, 0, got, sizeof got, NULL, 0, 10000), 1);
    cr_assert_str_eq(got, n255);
    cr_assert_eq(tern_batch_free(bt), 0);
    free(n255);
    free(n256);
    node_down(&a);
    node_down(&b);
}

/* A message of exactly TERN_NOTIFY_MAX bytes rides on a batch and arrives
 * whole; one byte more is refused. */
Test(notify_edges, message_of_exactly_the_limit_rides_on_a_batch)
{
    node a, b;
    node_up(&a, NULL);
    node_up(&b, NULL);
    link_to(&a, &b);
    char *max = filled(TERN_NOTIFY_MAX, 'q'), *over = filled(TERN_NOTIFY_MAX + 1, 'q');
    max[TERN_NOTIFY_MAX - 1] = 'z';
    tern_batch *bt = tern_batch_alloc(a.e, 2);
    tern_request r = {.opcode = TERN_WRITE, .local = a.buf, .segment = a.peer,
                      .remote = (uintptr_t)b.buf, .length = 4096};
    cr_assert_eq(tern_batch_submit_with_notify(bt, &r, 1, a.peer, "n", over), TERN_ERR_INVAL);
    cr_assert_eq(tern_batch_submit_with_notify(bt, &r, 1, a.peer, "n", max), 1, "%s",
                 tern_engine_last_error(a.e));
    cr_assert_eq(tern_batch_wait(bt, 30000), 0);
    char *got = calloc(1, TERN_NOTIFY_MAX + 1);
    cr_assert_eq(tern_notify_recv_wait(b.e, NULL, 0, NULL, 0, got, TERN_NOTIFY_MAX + 1, 10000), 1);
    cr_assert_str_eq(got, max, "the 64 KiB message arrived whole");
    cr_assert_eq(tern_batch_free(bt), 0);
    free(got);
    free(max);
    free(over);
    node_down(&a);
    node_down(&b);
}

/* The receiver's queue holds exactly TERN_NOTIFY_QUEUE: all of those are
 * taken, the next is refused (BUSY, counted, never dropped silently), and
 * one taken out makes room for one more. */
Test(notify_edges, queue_takes_exactly_its_bound_then_refuses)
{
    node a, b;
    node_up(&a, NULL);
    node_up(&b, NULL);
    link_to(&a, &b);
    for (int i = 0; i < TERN_NOTIFY_QUEUE; i++) {
        char m[16];
        snprintf(m, sizeof m, "%d", i);
        cr_assert_eq(tern_notify_send(a.e, a.peer, "q", m), 0, "%d: %s", i,
                     tern_engine_last_error(a.e));
    }
    cr_assert_eq(tern_notify_send(a.e, a.peer, "q", "over"), TERN_ERR_BUSY, "one over the bound");
    tern_notify_stats st;
    tern_notify_stats_get(b.e, &st);
    cr_assert_eq(st.queued, TERN_NOTIFY_QUEUE);
    cr_assert_eq(st.refused, 1);
    char m[16] = "";
    cr_assert_eq(tern_notify_recv(b.e, NULL, 0, NULL, 0, m, sizeof m), 1);
    cr_assert_str_eq(m, "0", "oldest first");
    cr_assert_eq(tern_notify_send(a.e, a.peer, "q", "again"), 0, "room for one: %s",
                 tern_engine_last_error(a.e));
    cr_assert_eq(tern_notify_send(a.e, a.peer, "q", "over"), TERN_ERR_BUSY);
    node_down(&a);
    node_down(&b);
}
