/* tests/support/integration_common.h: the harness shared by the two-process
 * integration tests (test_tcp_integration.c, test_efa_integration.c).
 *
 * The target engine runs in a helper program (tests/support/helpers/<x>_peer.c,
 * built on tests/support/helpers/peer_common.h) that maps GUARD | A | B | GUARD,
 * prints  READY <server name> <addr A> <len A> <addr B> <len B>  and answers
 * CHECK / EXIT on stdin.  This process is the initiator: it starts and
 * stops the peer, registers local buffers and runs single requests.
 *
 * What differs per transport stays in the test file: the engine YAML, the
 * peer program's path and arguments, and the byte pattern of fill()
 * (define IT_FILL_MUL / IT_FILL_SHIFT before including to change it).
 * Include after <criterion/criterion.h> with _GNU_SOURCE defined. */
#ifndef TERN_TESTS_INTEGRATION_COMMON_H
#define TERN_TESTS_INTEGRATION_COMMON_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

#ifndef IT_FILL_MUL
#define IT_FILL_MUL 2246822519u
#endif
#ifndef IT_FILL_SHIFT
#define IT_FILL_SHIFT 11
#endif

/* A target process and what it announced in its READY line. */
typedef struct it_peer {
    pid_t pid;
    FILE *in, *out;
    char name[128];
    uint64_t a, la, b, lb;
} it_peer;

static inline uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void peer_line(it_peer *p, char *line, size_t len, int tmo_ms)
{
    struct pollfd pf = {fileno(p->out), POLLIN, 0};
    cr_assert_gt(poll(&pf, 1, tmo_ms), 0, "the target process said nothing for %d ms", tmo_ms);
    cr_assert(fgets(line, (int)len, p->out), "the target process closed its output");
}

/* Runs  path [arg]  (arg may be NULL) and waits for its READY line. */
static inline void peer_start(it_peer *p, const char *path, const char *arg)
{
    int in[2], out[2];
    cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execl(path, path, arg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->in = fdopen(in[1], "w");
    p->out = fdopen(out[0], "r");
    char line[512];
    peer_line(p, line, sizeof line, 30000);
    int n = sscanf(line, "READY %127s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, p->name,
                   &p->a, &p->la, &p->b, &p->lb);
    cr_assert_eq(n, 5, "unexpected line from the target: %s", line);
}

static inline void peer_check_canaries(it_peer *p)
{
    char line[128];
    fprintf(p->in, "CHECK\n");
    fflush(p->in);
    peer_line(p, line, sizeof line, 10000);
    cr_assert_str_eq(line, "CANARY ok\n", "target memory outside its buffers changed: %s", line);
}

/* Waits up to 10 s for the target to exit (SIGKILL after that). */
static inline void peer_reap(it_peer *p)
{
    uint64_t end = now_ms() + 10000;
    int st;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        usleep(10000);
    }
    fclose(p->in);
    fclose(p->out);
}

static inline void peer_stop(it_peer *p)
{
    fprintf(p->in, "EXIT\n");
    fflush(p->in);
    peer_reap(p);
}

static inline uint8_t *local_buf(tern_engine *e, size_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(p != MAP_FAILED);
    cr_assert_eq(tern_register_memory(e, p, len, NULL), 0, "%s", tern_engine_last_error(e));
    return p;
}

static inline void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(((i * IT_FILL_MUL) >> IT_FILL_SHIFT) ^ seed);
}

/* One request, waited for; returns its final status (msg gets its error). */
static inline tern_status one(tern_engine *e, tern_segment_id seg, int op, void *local,
                              uint64_t remote, uint64_t len, char *msg, size_t msglen)
{
    tern_batch *b = tern_batch_alloc(e, 1);
    cr_assert(b);
    tern_request r = {.opcode = op, .local = local, .segment = seg, .remote = remote,
                      .length = len};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    cr_assert_neq(tern_batch_wait(b, 60000), TERN_ERR_TIMEOUT,
                  "a single request did not finish in 60 s");
    tern_request_state st;
    cr_assert_eq(tern_batch_state(b, 0, &st), 0);
    if (msg)
        snprintf(msg, msglen, "%s", tern_batch_error(b, 0));
    if (st.status == TERN_COMPLETED)
        cr_assert_eq(st.transferred, len);
    cr_assert_eq(tern_batch_free(b), 0);
    return st.status;
}

/* WRITE n bytes of src at remote, READ them back into dst and compare;
 * what (may be NULL) names the request in the message if they differ. */
static inline void write_read_back(tern_engine *e, tern_segment_id seg, uint8_t *src,
                                   uint8_t *dst, uint64_t remote, uint64_t n, const char *what)
{
    char msg[512];
    cr_assert_eq(one(e, seg, TERN_WRITE, src, remote, n, msg, sizeof msg), TERN_COMPLETED, "%s",
                 msg);
    cr_assert_eq(one(e, seg, TERN_READ, dst, remote, n, msg, sizeof msg), TERN_COMPLETED, "%s",
                 msg);
    if (what)
        cr_assert_eq(memcmp(src, dst, n), 0, "%s differs", what);
    else
        cr_assert_eq(memcmp(src, dst, n), 0);
}

/* After a target died mid-batch: every request ended COMPLETED or FAILED,
 * each failure says why.  Returns how many FAILED. */
static inline size_t count_failed(tern_batch *b, size_t n)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        tern_request_state st;
        tern_batch_state(b, i, &st);
        cr_assert(st.status == TERN_COMPLETED || st.status == TERN_FAILED,
                  "request %zu ended %d", i, st.status);
        if (st.status == TERN_FAILED) {
            failed++;
            cr_assert(tern_batch_error(b, i)[0], "a failed request says why");
        }
    }
    return failed;
}

#endif
