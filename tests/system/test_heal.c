#define _GNU_SOURCE
/* Healing across two processes over tcp (the target is
 * tests/support/helpers/heal_peer.c):
 *  - a target killed and restarted under the same name while this process
 *    keeps submitting (ephemeral data port; fixed data port; the new
 *    target's buffers at other addresses): every request ends, none stays
 *    WAITING or PENDING, and requests succeed again within 2 s of the new
 *    target being ready, without the application reopening anything;
 *  - memory the target unregistered is refused, from a fresh descriptor;
 *  - [loopx, tcp] on both sides, loopx unable to reach the peer: data
 *    moves over tcp. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

typedef struct target {
    pid_t pid;
    FILE *in, *out;
    char name[128];
    uint64_t a, la, b, lb;
} target;

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int read_line(target *t, char *line, size_t len, int tmo_ms)
{
    struct pollfd pf = {fileno(t->out), POLLIN, 0};
    if (poll(&pf, 1, tmo_ms) <= 0)
        return -1;
    return fgets(line, (int)len, t->out) ? 0 : -1;
}

/* Start the target; 0 when it printed READY, -1 when it failed (e.g. the
 * name's port was not free yet). */
static int target_try(target *t, const char *name, const char *port, const char *shift,
                      const char *loopx)
{
    int in[2], out[2];
    cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    t->pid = fork();
    cr_assert_geq(t->pid, 0);
    if (t->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execl(TERN_HEAL_PEER_PATH, TERN_HEAL_PEER_PATH, name, port, shift, loopx, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    t->in = fdopen(in[1], "w");
    t->out = fdopen(out[0], "r");
    char line[512] = "";
    if (read_line(t, line, sizeof line, 30000) == 0 &&
        sscanf(line, "READY %127s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, t->name, &t->a,
               &t->la, &t->b, &t->lb) == 5)
        return 0;
    kill(t->pid, SIGKILL);
    waitpid(t->pid, NULL, 0);
    fclose(t->in);
    fclose(t->out);
    return -1;
}

static void target_start(target *t, const char *name, const char *port, const char *shift,
                         const char *loopx)
{
    for (int i = 0; i < 50; i++) { /* the old process's port may linger a moment */
        if (target_try(t, name, port, shift, loopx) == 0)
            return;
        usleep(100000);
    }
    cr_assert_fail("the target did not start as %s", name);
}

static void target_kill(target *t)
{
    kill(t->pid, SIGKILL);
    waitpid(t->pid, NULL, 0);
    fclose(t->in);
    fclose(t->out);
}

static void target_stop(target *t)
{
    fprintf(t->in, "EXIT\n");
    fflush(t->in);
    waitpid(t->pid, NULL, 0);
    fclose(t->in);
    fclose(t->out);
}

static tern_engine *initiator(const char *transports)
{
    char yaml[1024], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\n"
             "metadata: p2p\n"
             "transports:\n%s"
             "connect_timeout_ms: 1000\n"
             "io_timeout_ms: 2000\n"
             "log_level: error\n",
             transports);
    tern_engine *e = tern_engine_create_from_yaml(yaml, "test_heal", err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    return e;
}

static tern_status one(tern_engine *e, tern_segment_id seg, int op, void *local,
                       uint64_t remote, uint64_t len, char *why, size_t whylen)
{
    tern_batch *b = tern_batch_alloc(e, 1);
    tern_request r = {.opcode = op, .local = local, .segment = seg, .remote = remote,
                      .length = len};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    cr_assert_neq(tern_batch_wait(b, 30000), TERN_ERR_TIMEOUT, "a request hung");
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    if (why)
        snprintf(why, whylen, "%s", tern_batch_error(b, 0));
    cr_assert_eq(tern_batch_free(b), 0);
    return st.status;
}

/* ---- restart under the same name --------------------------------------------- */

typedef struct submitter {
    tern_engine *e;
    tern_segment_id seg;
    uint8_t *buf;
    _Atomic uint64_t remote;      /* where to write: the current target's A */
    _Atomic uint64_t ready_ms;    /* when the new target said READY (0: not yet) */
    _Atomic uint64_t healed_ms;   /* first success to the new target after that */
    atomic_int stop;
    long completed, failed, invalid, other;
} submitter;

static void *submit_loop(void *arg)
{
    submitter *s = arg;
    while (!atomic_load(&s->stop)) {
        uint64_t remote = atomic_load(&s->remote);
        uint64_t ready = atomic_load(&s->ready_ms);
        tern_status st = one(s->e, s->seg, TERN_WRITE, s->buf, remote, 65536, NULL, 0);
        if (st == TERN_COMPLETED) {
            s->completed++;
            if (ready && !atomic_load(&s->healed_ms))
                atomic_store(&s->healed_ms, ms_now());
        } else if (st == TERN_FAILED) {
            s->failed++;
        } else if (st == TERN_INVALID) {
            s->invalid++; /* the old target's address, checked against the new descriptor */
        } else {
            s->other++;
        }
    }
    return NULL;
}

/* port: the target's tcp data port ("0": a new ephemeral one each run).
 * same_addresses: the new target's buffers sit where the old one's did, so
 * the cached descriptor still covers every request and only the refetch
 * that a failed attempt on the peer asks for can find the new data port;
 * otherwise they move, and the cut's own refetch finds them. */
static void restart_while_submitting(const char *port, int same_addresses)
{
    target t1, t2;
    target_start(&t1, "127.0.0.1:0", port, same_addresses ? "fixed" : "0", NULL);
    tern_engine *e = initiator("  - name: tcp\n");
    submitter s = {.e = e};
    s.seg = tern_segment_open(e, t1.name);
    cr_assert_geq(s.seg, 0, "%s", tern_engine_last_error(e));
    s.buf = malloc(65536);
    memset(s.buf, 0x3c, 65536);
    cr_assert_eq(tern_register_memory(e, s.buf, 65536, NULL), 0);
    atomic_store(&s.remote, t1.a);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, submit_loop, &s), 0);
    usleep(300000);
    long before = s.completed;
    target_kill(&t1);
    usleep(300000); /* requests meet a dead peer */
    target_start(&t2, t1.name, port, same_addresses ? "fixed" : "64", NULL); /* same name */
    cr_assert_str_eq(t2.name, t1.name);
    if (same_addresses)
        cr_assert_eq(t2.a, t1.a, "the new target's buffer is at the old address");
    else
        cr_assert_neq(t2.a, t1.a, "the new target's buffer is at another address");
    atomic_store(&s.remote, t2.a);
    atomic_store(&s.ready_ms, ms_now());
    uint64_t until = ms_now() + 10000;
    while (!atomic_load(&s.healed_ms) && ms_now() < until)
        usleep(10000);
    atomic_store(&s.stop, 1);
    pthread_join(th, NULL);
    uint64_t ready = atomic_load(&s.ready_ms), healed = atomic_load(&s.healed_ms);
    cr_log_info("port %s: %ld completed before the kill, then %ld completed, %ld failed, "
                "%ld invalid; healed %lld ms after the new target was ready", port, before,
                s.completed, s.failed, s.invalid, healed ? (long long)(healed - ready) : -1LL);
    cr_assert_gt(before, 0, "requests succeeded before the kill");
    cr_assert_eq(s.other, 0, "every request ended COMPLETED, FAILED or INVALID");
    cr_assert_neq(healed, 0, "no request succeeded in 10 s after the restart");
    cr_assert_leq(healed - ready, 2000, "requests succeeded again %llu ms after the new "
                  "target was ready", (unsigned long long)(healed - ready));
    /* the data really lands in the new target */
    uint8_t *back = calloc(1, 65536);
    cr_assert_eq(tern_register_memory(e, back, 65536, NULL), 0);
    cr_assert_eq(one(e, s.seg, TERN_READ, back, t2.a, 65536, NULL, 0), TERN_COMPLETED);
    cr_assert_eq(memcmp(back, s.buf, 65536), 0);
    tern_engine_destroy(e);
    target_stop(&t2);
    free(back);
    free(s.buf);
}

Test(heal, target_restarted_same_name_ephemeral_data_port, .timeout = 120)
{
    restart_while_submitting("0", 1);
}

/* A free port for the target's tcp data listener (picked now, not fixed in
 * the test). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

Test(heal, target_restarted_same_name_fixed_data_port_new_addresses, .timeout = 120)
{
    char port[16];
    snprintf(port, sizeof port, "%d", free_port());
    restart_while_submitting(port, 0);
}

/* ---- unregistered memory --------------------------------------------------------- */

Test(heal, unregistered_memory_refused_from_a_fresh_descriptor, .timeout = 60)
{
    target t;
    target_start(&t, "127.0.0.1:0", "0", "0", NULL);
    tern_engine *e = initiator("  - name: tcp\n");
    tern_segment_id seg = tern_segment_open(e, t.name);
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(e));
    uint8_t *buf = calloc(1, 65536);
    cr_assert_eq(tern_register_memory(e, buf, 65536, NULL), 0);
    char why[1024] = "", line[128] = "";
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, t.b, 4096, why, sizeof why), TERN_COMPLETED, "%s",
                 why);
    fprintf(t.in, "UNREG\n");
    fflush(t.in);
    cr_assert_eq(read_line(&t, line, sizeof line, 10000), 0);
    cr_assert_str_eq(line, "UNREG ok\n");
    /* our cached descriptor still lists B: the target refuses, we refetch,
     * the fresh one does not list it: FAILED at once */
    tern_status st = one(e, seg, TERN_WRITE, buf, t.b, 4096, why, sizeof why);
    cr_assert_eq(st, TERN_FAILED, "%d: %s", st, why);
    cr_assert(strstr(why, "TERN_ERR_RANGE") && strstr(why, "does not cover it"), "%s", why);
    /* the next request is checked against the fresh descriptor at once */
    st = one(e, seg, TERN_WRITE, buf, t.b, 4096, why, sizeof why);
    cr_assert_eq(st, TERN_INVALID, "%d: %s", st, why);
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, t.a, 4096, why, sizeof why), TERN_COMPLETED,
                 "A is still there: %s", why);
    tern_engine_destroy(e);
    target_stop(&t);
    free(buf);
}

/* ---- [X, tcp] where X cannot reach the peer ---------------------------------------- */

Test(heal, unreachable_first_transport_moves_data_over_tcp, .timeout = 60)
{
    target t;
    target_start(&t, "127.0.0.1:0", "0", "0", TERN_LOOPX_PATH);
    tern_engine *e = initiator("  - name: loopx\n    path: " TERN_LOOPX_PATH "\n"
                               "    unreachable: true\n"
                               "  - name: tcp\n");
    tern_segment_id seg = tern_segment_open(e, t.name);
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(e));
    char name[32];
    cr_assert_eq(tern_segment_transport(e, seg, name, sizeof name), 0);
    cr_assert_str_eq(name, "loopx", "both list loopx first");
    uint8_t *src = malloc(1 << 20), *dst = calloc(1, 1 << 20);
    for (size_t i = 0; i < 1 << 20; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    cr_assert_eq(tern_register_memory(e, src, 1 << 20, NULL), 0);
    cr_assert_eq(tern_register_memory(e, dst, 1 << 20, NULL), 0);
    char why[1024] = "";
    cr_assert_eq(one(e, seg, TERN_WRITE, src, t.a, 1 << 20, why, sizeof why), TERN_COMPLETED,
                 "%s", why);
    cr_assert_eq(one(e, seg, TERN_READ, dst, t.a, 1 << 20, why, sizeof why), TERN_COMPLETED,
                 "%s", why);
    cr_assert_eq(memcmp(src, dst, 1 << 20), 0);
    cr_assert_eq(tern_segment_transport(e, seg, name, sizeof name), 0);
    cr_assert_str_eq(name, "tcp");
    tern_engine_destroy(e);
    target_stop(&t);
    free(src);
    free(dst);
}
