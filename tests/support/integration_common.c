/* tests/support/integration_common.c: see integration_common.h. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>

#include "integration_common.h"

uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void peer_line(it_peer *p, char *line, size_t len, int tmo_ms)
{
    struct pollfd pf = {fileno(p->out), POLLIN, 0};
    cr_assert_gt(poll(&pf, 1, tmo_ms), 0, "the target process said nothing for %d ms", tmo_ms);
    cr_assert(fgets(line, (int)len, p->out), "the target process closed its output");
}

void peer_spawn(it_peer *p, char *const argv[])
{
    int in[2], out[2];
    cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->in = fdopen(in[1], "w");
    p->out = fdopen(out[0], "r");
}

void peer_startv(it_peer *p, char *const argv[])
{
    peer_spawn(p, argv);
    char line[512];
    peer_line(p, line, sizeof line, 30000);
    int n = sscanf(line, "READY %127s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, p->name,
                   &p->a, &p->la, &p->b, &p->lb);
    cr_assert_eq(n, 5, "unexpected line from the target: %s", line);
}

void peer_start(it_peer *p, const char *path, const char *arg)
{
    char *argv[] = {(char *)path, (char *)arg, NULL};
    peer_startv(p, argv);
}

void peer_ask(it_peer *p, const char *cmd, char *line, size_t len)
{
    fprintf(p->in, "%s\n", cmd);
    fflush(p->in);
    peer_line(p, line, len, 10000);
}

void peer_check_canaries(it_peer *p)
{
    char line[128];
    peer_ask(p, "CHECK", line, sizeof line);
    cr_assert_str_eq(line, "CANARY ok\n", "target memory outside its buffers changed: %s", line);
}

/* The target's wait status once it exited (SIGKILL after 10 s). */
static int peer_wait_status(it_peer *p)
{
    fclose(p->in);
    uint64_t end = now_ms() + 10000;
    int st = 0;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        usleep(10000);
    }
    fclose(p->out);
    return st;
}

int peer_reap(it_peer *p)
{
    int st = peer_wait_status(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int peer_reap_signal(it_peer *p)
{
    int st = peer_wait_status(p);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

void peer_stop(it_peer *p)
{
    fprintf(p->in, "EXIT\n");
    fflush(p->in);
    peer_reap(p);
}

uint8_t *local_buf(tern_engine *e, size_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(p != MAP_FAILED);
    cr_assert_eq(tern_register_memory(e, p, len, NULL), 0, "%s", tern_engine_last_error(e));
    return p;
}

void it_fill(it_pattern pat, uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(((i * pat.mul) >> pat.shift) ^ seed);
}

tern_segment_id open_expect(tern_engine *e, const it_peer *p, const char *transport)
{
    tern_segment_id seg = tern_segment_open(e, p->name);
    cr_assert_geq(seg, 0, "open %s: %s", p->name, tern_engine_last_error(e));
    char got[32] = "";
    cr_assert_eq(tern_segment_transport(e, seg, got, sizeof got), 0, "%s",
                 tern_engine_last_error(e));
    cr_assert_str_eq(got, transport, "segment %s uses %s, expected %s", p->name, got,
                     transport);
    return seg;
}

tern_status one(tern_engine *e, tern_segment_id seg, int op, void *local, uint64_t remote,
                uint64_t len, char *msg, size_t msglen)
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

void write_read_back(tern_engine *e, tern_segment_id seg, uint8_t *src, uint8_t *dst,
                     uint64_t remote, uint64_t n, const char *what)
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

size_t count_failed(tern_batch *b, size_t n)
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

size_t wait_after_kill(tern_batch *b, size_t n, int wait_ms, uint64_t *waited_ms)
{
    uint64_t t0 = now_ms();
    /* Its code is the first failed request's, which may itself be
     * TERN_ERR_TIMEOUT (the peer went silent): whether the wait ran out is
     * told by the requests still pending, not by the code. */
    tern_batch_wait(b, wait_ms);
    *waited_ms = now_ms() - t0;
    for (size_t i = 0; i < n; i++) {
        tern_request_state st;
        tern_batch_state(b, i, &st);
        cr_assert(st.status != TERN_PENDING && st.status != TERN_WAITING,
                  "request %zu still pending %d s after the target died", i, wait_ms / 1000);
    }
    return count_failed(b, n);
}

tern_request *same_writes(tern_segment_id seg, void *src, uint64_t remote, uint64_t len,
                          size_t n)
{
    tern_request *r = calloc(n, sizeof *r);
    cr_assert_not_null(r);
    for (size_t i = 0; i < n; i++)
        r[i] = (tern_request){.opcode = TERN_WRITE, .local = src, .segment = seg,
                              .remote = remote, .length = len};
    return r;
}

size_t it_kill_mid_batch(tern_engine *e, tern_segment_id seg, it_peer *p, uint8_t *src,
                         uint64_t len, size_t n, unsigned delay_us, uint64_t *waited_ms)
{
    tern_batch *b = tern_batch_alloc(e, n);
    cr_assert_not_null(b, "%s", tern_engine_last_error(e));
    tern_request *r = same_writes(seg, src, p->a, len, n);
    cr_assert_eq(tern_batch_submit(b, r, n), (int)n);
    usleep(delay_us);
    kill(p->pid, SIGKILL);
    size_t failed = wait_after_kill(b, n, 30000, waited_ms);
    cr_assert_eq(tern_batch_free(b), 0, "%s", tern_engine_last_error(e));
    free(r);
    return failed;
}

void it_write_read_sizes(tern_engine *e, tern_segment_id seg, const it_peer *p, uint8_t *src,
                         uint8_t *dst, const uint64_t *sizes, size_t nsizes, unsigned seed0,
                         it_pattern pat, const char *label)
{
    const char *sp = label[0] ? " " : "";
    for (size_t i = 0; i < nsizes; i++) {
        uint64_t n = sizes[i], at = p->a + (i & 1) * 3 + (n < (32u << 20) ? 4096 * i : 0);
        it_fill(pat, src, n, seed0 + (unsigned)i);
        memset(dst, 0, n + 1);
        char msg[512];
        cr_assert_eq(one(e, seg, TERN_WRITE, src, at, n, msg, sizeof msg), TERN_COMPLETED,
                     "%s%sWRITE %" PRIu64 " B: %s", label, sp, n, msg);
        cr_assert_eq(one(e, seg, TERN_READ, dst, at, n, msg, sizeof msg), TERN_COMPLETED,
                     "%s%sREAD %" PRIu64 " B: %s", label, sp, n, msg);
        cr_assert_eq(memcmp(src, dst, n), 0, "%s%sREAD back of %" PRIu64 " B differs", label,
                     sp, n);
        cr_assert_eq(dst[n], 0, "%s%sREAD of %" PRIu64 " B wrote past its end", label,
                     sp, n);
    }
}

void it_span_both_buffers(tern_engine *e, tern_segment_id seg, it_peer *p, uint8_t *src,
                          uint8_t *dst, uint64_t span, uint64_t in_a, unsigned seed,
                          it_pattern pat)
{
    it_fill(pat, src, span, seed);
    memset(dst, 0, span);
    write_read_back(e, seg, src, dst, p->b - in_a, span, "the request spanning A and B");
    peer_check_canaries(p);
}

void it_refuse_outside_buffers(tern_engine *e, tern_segment_id seg, it_peer *p, uint8_t *buf,
                               const char *label)
{
    const char *sp = label[0] ? " " : "";
    memset(buf, 0x5A, 1 << 20);
    struct {
        uint64_t addr, len;
        const char *what;
    } bad[] = {
        {p->a - 4096, 4096, "in the guard below A"},
        {p->a - 1, 2, "straddling A's start"},
        {p->b + p->lb - 1, 2, "straddling B's end"},
        {p->b + p->lb, 65536, "in the guard above B"},
        {UINT64_MAX - 100, 4096, "addr + len overflows"},
        {4096, 4096, "a low address"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        for (int op = TERN_READ; op <= TERN_WRITE; op++) {
            char msg[512] = "";
            tern_status st = one(e, seg, op, buf, bad[i].addr, bad[i].len, msg, sizeof msg);
            cr_assert(st == TERN_INVALID || st == TERN_FAILED, "%s%s%s %s ended %d", label, sp,
                      op == TERN_READ ? "READ" : "WRITE", bad[i].what, st);
            cr_assert(msg[0], "a refused request says why (%s)", bad[i].what);
        }
    }
    for (size_t i = 0; i < 1 << 20; i++)
        cr_assert_eq(buf[i], 0x5A, "a refused READ wrote local memory");
    peer_check_canaries(p);
}
