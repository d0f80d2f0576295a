/* tests/system/test_faults.c: a peer killed at a random point of a long batch.
 *
 * The peer is a separate process (tern-test-fault-peer: an engine with the
 * tcp transport).  100 times: start a peer, open its segment, submit a
 * batch of 64 x 128 KiB WRITE/READ requests (8 MiB), SIGKILL the peer after
 * a random delay drawn from [0, 1.5 x the batch's unkilled duration], then
 * wait.  Every request must end COMPLETED or FAILED (never stuck WAITING or
 * PENDING: the wait is bounded), and the process's file descriptors
 * (/proc/self/fd) and threads (/proc/self/task) are counted before and
 * after: equal.  One more round kills the peer before the batch is
 * submitted: every request of it must end FAILED, with a message.  The seed
 * is fixed (FAULT_SEED) and printed; TERN_FAULT_SEED runs another. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"
#include "base/util.h"

#define ROUNDS_DEFAULT 100
#define FAULT_SEED 20261201u
#define KILL_FIRST (-2) /* run_round: the peer dies before the batch is submitted */
#define NREQ 64
#define REQLEN (128u << 10)

static const char *yaml_initiator = "server_name: 127.0.0.1:0\n"
                                    "metadata: p2p\n"
                                    "transports:\n"
                                    "  - name: tcp\n"
                                    "retries: 1\n"
                                    "io_timeout_ms: 2000\n"
                                    "connect_timeout_ms: 1000\n"
                                    "log_level: error\n";

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    return n - (d && !strcmp(path, "/proc/self/fd")); /* opendir's own fd */
}

typedef struct peer {
    pid_t pid;
    FILE *out;     /* its stdout */
    int in;        /* its stdin (closing it ends the peer cleanly) */
    char name[128];
    uint64_t addr, len;
} peer;

static void peer_start(peer *p)
{
    int to[2], from[2];
    cr_assert_eq(pipe2(to, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(from, O_CLOEXEC), 0);
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        execl(TERN_FAULT_PEER, TERN_FAULT_PEER, (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    p->in = to[1];
    p->out = fdopen(from[0], "r");
    char line[512] = "";
    cr_assert_not_null(fgets(line, sizeof line, p->out), "fault peer did not start");
    cr_assert_eq(sscanf(line, "READY %127s %" SCNu64 " %" SCNu64, p->name, &p->addr, &p->len),
                 3, "fault peer: %s", line);
}

static void peer_kill(peer *p)
{
    if (p->pid > 0) { /* not yet reaped (pid 0 would signal our own group) */
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    p->pid = 0;
    close(p->in);
    fclose(p->out);
}

typedef struct tally {
    int completed, failed, other, stuck, killed_before_done;
} tally;

/* One batch against p; kill after delay_us (-1: never; KILL_FIRST: killed
 * and reaped before the submit).  Returns the batch's duration in
 * microseconds. */
static uint64_t run_round(tern_engine *A, uint8_t *local, peer *p, long delay_us, tally *t)
{
    tern_segment_id s = tern_segment_open(A, p->name);
    cr_assert_geq(s, 0, "open %s: %s", p->name, tern_engine_last_error(A));
    tern_batch *b = tern_batch_alloc(A, NREQ);
    cr_assert_not_null(b);
    tern_request r[NREQ];
    for (int i = 0; i < NREQ; i++)
        r[i] = (tern_request){.opcode = i % 2 ? TERN_READ : TERN_WRITE,
                              .local = local + (size_t)i * REQLEN, .segment = s,
                              .remote = p->addr + (uint64_t)i * REQLEN, .length = REQLEN};
    if (delay_us == KILL_FIRST) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        p->pid = 0; /* reaped: its pid may be reused */
    }
    uint64_t t0 = tern_now_ns();
    cr_assert_eq(tern_batch_submit(b, r, NREQ), NREQ, "%s", tern_engine_last_error(A));
    if (delay_us >= 0) {
        usleep((useconds_t)delay_us);
        kill(p->pid, SIGKILL);
    }
    /* Its return value is the first failure's code, which may itself be
     * TERN_ERR_TIMEOUT (a slice's I/O timed out): a stuck wait is one that
     * left a request unfinished, whatever it returned. */
    (void)tern_batch_wait(b, 30000);
    uint64_t dt = (tern_now_ns() - t0) / 1000;
    int unfinished = 0;
    for (int i = 0; i < NREQ; i++) {
        tern_request_state st;
        cr_assert_eq(tern_batch_state(b, (size_t)i, &st), 0);
        if (st.status == TERN_WAITING || st.status == TERN_PENDING)
            unfinished = 1;
        else if (st.status == TERN_COMPLETED)
            t->completed++;
        else if (st.status == TERN_FAILED && tern_batch_error(b, (size_t)i)[0])
            t->failed++;
        else {
            t->other++;
            cr_log_error("request %d ended with status %d: %s", i, st.status,
                         tern_batch_error(b, (size_t)i));
        }
    }
    t->stuck += unfinished;
    cr_assert_eq(tern_batch_free(b), 0, "batch still busy after wait: %s",
                 tern_engine_last_error(A));
    tern_segment_close(A, s);
    return dt;
}

Test(faults, peer_killed_at_a_random_point_100_times, .timeout = 240)
{
    unsigned seed = getenv("TERN_FAULT_SEED") ? (unsigned)atoi(getenv("TERN_FAULT_SEED"))
                                              : FAULT_SEED;
    /* TERN_FAULT_ROUNDS: fewer rounds under valgrind (scripts/memcheck.sh). */
    int ROUNDS = getenv("TERN_FAULT_ROUNDS") ? atoi(getenv("TERN_FAULT_ROUNDS")) : ROUNDS_DEFAULT;
    if (ROUNDS <= 0)
        ROUNDS = ROUNDS_DEFAULT;
    cr_log_info("seed %u (TERN_FAULT_SEED replays it), %d rounds", seed, ROUNDS);
    signal(SIGPIPE, SIG_IGN);
    int fd0 = count_dir("/proc/self/fd"), th0 = count_dir("/proc/self/task");
    char err[1024];
    tern_engine *A = tern_engine_create_from_yaml(yaml_initiator, "initiator", err, sizeof err);
    cr_assert_not_null(A, "%s", err);
    uint8_t *local = malloc((size_t)NREQ * REQLEN);
    memset(local, 0x42, (size_t)NREQ * REQLEN);
    cr_assert_eq(tern_register_memory(A, local, (size_t)NREQ * REQLEN, NULL), 0);

    /* Calibrate: one batch with nobody killed (all COMPLETED). */
    tally cal = {0};
    peer p;
    peer_start(&p);
    uint64_t full_us = run_round(A, local, &p, -1, &cal);
    peer_kill(&p);
    cr_assert_eq(cal.completed, NREQ, "calibration batch did not complete");
    int fd1 = count_dir("/proc/self/fd"), th1 = count_dir("/proc/self/task");

    /* Killed before the submit: nothing can complete, each request FAILS. */
    tally dead = {0};
    peer_start(&p);
    run_round(A, local, &p, KILL_FIRST, &dead);
    peer_kill(&p);
    cr_assert_eq(dead.failed, NREQ, "peer dead before the submit: %d FAILED with a message, "
                 "%d COMPLETED, %d other, %d stuck", dead.failed, dead.completed, dead.other,
                 dead.stuck);

    tally t = {0};
    int maxfd = fd1, maxth = th1;
    for (int round = 0; round < ROUNDS; round++) {
        peer_start(&p);
        long delay = (long)(rand_r(&seed) % (unsigned)(full_us * 3 / 2 + 1));
        run_round(A, local, &p, delay, &t);
        peer_kill(&p);
        int fd = count_dir("/proc/self/fd"), th = count_dir("/proc/self/task");
        maxfd = fd > maxfd ? fd : maxfd;
        maxth = th > maxth ? th : maxth;
    }
    int fd2 = count_dir("/proc/self/fd"), th2 = count_dir("/proc/self/task");
    tern_engine_destroy(A);
    free(local);
    int fd3 = count_dir("/proc/self/fd"), th3 = count_dir("/proc/self/task");
    cr_log_info("batch of %d x %u KiB takes %" PRIu64 " us unkilled; %d rounds: %d requests "
                "COMPLETED, %d FAILED, %d other, %d waits stuck",
                NREQ, REQLEN >> 10, full_us, ROUNDS, t.completed, t.failed, t.other, t.stuck);
    cr_log_info("fds: %d before the engine, %d after calibration, max %d, %d after %d rounds, "
                "%d after destroy", fd0, fd1, maxfd, fd2, ROUNDS, fd3);
    cr_log_info("threads: %d before the engine, %d after calibration, max %d, %d after %d "
                "rounds, %d after destroy", th0, th1, maxth, th2, ROUNDS, th3);
    cr_assert_eq(t.stuck, 0, "%d batch waits timed out: requests stuck", t.stuck);
    cr_assert_eq(t.other, 0, "%d requests ended neither COMPLETED nor FAILED", t.other);
    cr_assert_eq(t.completed + t.failed, ROUNDS * NREQ);
    cr_assert_eq(fd2, fd1, "file descriptors leaked over the rounds: %d -> %d", fd1, fd2);
    cr_assert_eq(th2, th1, "threads leaked over the rounds: %d -> %d", th1, th2);
    cr_assert_eq(fd3, fd0, "file descriptors leaked by the engine: %d -> %d", fd0, fd3);
    cr_assert_eq(th3, th0, "threads leaked by the engine: %d -> %d", th0, th3);
}
