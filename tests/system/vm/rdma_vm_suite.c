/* The RDMA integration suite: runs INSIDE the Soft-RoCE VM (tests/system/vm/
 * run-in-vm.sh, registered by tests/system/vm/vm.cmake as the CTest test rdma_vm).
 *
 * Each test forks: the parent and the child are two independent processes,
 * each loading libtern-rdma.so through the real loader (YAML config ->
 * tern_plugins_load) and registering its own buffer.  They exchange the
 * handshake descriptors (JSON, as the engine would) over a socketpair; the
 * child plays the passive side (ep_open passive, ep_connect with the
 * active side's descriptor, reply with its own descriptor and reply_msg),
 * the parent the active side.  Data moves over rxe0 with RDMA WRITE/READ
 * and is checked byte for byte by the side that owns the memory.
 *
 * Outside the VM (no rxe0) every test skips and says why. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "desc.h"
#include "plugin.h"
#include "tern/tern.h"
#include "tern/transport.h"

#define SLICE (64u << 10)
#define BUF_LEN ((17u << 20) + 64)
#define BIG ((16u << 20) + 3)

/* TERN_VM_TRACE=1: timestamps of the slow steps on stderr. */
static void trace(const char *what)
{
    if (!getenv("TERN_VM_TRACE"))
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(stderr, "[%d %ld.%03ld] %s\n", (int)getpid(), (long)t.tv_sec, t.tv_nsec / 1000000, what);
}

/* ---- completions: the plugin hands slices back through complete() ----------- */

static pthread_mutex_t vm_done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t vm_done_cond = PTHREAD_COND_INITIALIZER;
static tern_slice *vm_done_head, *vm_done_tail;

static void vm_complete(tern_slice *s)
{
    s->plugin[3] = NULL; /* the plugin is done with the slice: its scratch is ours */
    pthread_mutex_lock(&vm_done_lock);
    if (vm_done_tail)
        vm_done_tail->plugin[3] = s;
    else
        vm_done_head = s;
    vm_done_tail = s;
    pthread_cond_signal(&vm_done_cond);
    pthread_mutex_unlock(&vm_done_lock);
}

/* Up to max finished slices (of any side), waiting up to timeout_ms. */
static int vm_poll(tern_slice **out, int max, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&vm_done_lock);
    while (!vm_done_head && pthread_cond_timedwait(&vm_done_cond, &vm_done_lock, &until) == 0)
        ;
    int n = 0;
    for (; n < max && vm_done_head; n++) {
        out[n] = vm_done_head;
        vm_done_head = vm_done_head->plugin[3];
        if (!vm_done_head)
            vm_done_tail = NULL;
    }
    pthread_mutex_unlock(&vm_done_lock);
    return n;
}

/* ---- one side: a loaded plugin with one registered buffer ------------------ */

typedef struct side {
    tern_config *cfg;
    tern_plugin_set set;
    tern_plugin *p;
    const tern_transport *t;
    void *ctx;
    uint8_t *buf;
    void *mr;
    tern_mr_keys keys;
    void *ep;
} side;

static void quiet_log(void *arg, int level, const char *fmt, ...)
{
    (void)arg;
    if (level > TERN_LOG_WARN && !getenv("TERN_VM_VERBOSE"))
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[pid %d] ", (int)getpid());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* opts: extra YAML lines of the rdma entry, each "key: value", ';'-joined */
static int side_open(side *s, const char *opts, char *err, size_t errlen)
{
    char yaml[1024], extra[512] = "";
    for (const char *p = opts; p && *p;) {
        const char *e = strchr(p, ';');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        size_t l = strlen(extra);
        snprintf(extra + l, sizeof extra - l, "    %.*s\n", (int)n, p);
        p = e ? e + 1 : p + n;
    }
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nlog_level: warn\ntransports:\n"
             "  - name: rdma\n    required: true\n%s",
             extra);
    memset(s, 0, sizeof *s);
    trace("side_open");
    int rc = tern_config_load_yaml(yaml, "rdma_vm_suite", &s->cfg, err, errlen);
    if (rc < 0)
        return rc;
    trace("config loaded");
    rc = tern_plugins_load(s->cfg, quiet_log, NULL, &s->set, err, errlen);
    trace("plugins loaded");
    if (rc < 0)
        return rc;
    tern_plugins_set_completion(&s->set, vm_complete);
    s->p = tern_plugins_find(&s->set, "rdma");
    if (!s->p || !s->p->ops)
        return snprintf(err, errlen, "rdma did not load: %.400s", s->p ? s->p->message : "?"),
               TERN_ERR_PLUGIN;
    s->t = s->p->ops;
    s->ctx = s->p->ctx;
    s->buf = aligned_alloc(4096, BUF_LEN);
    if (!s->buf)
        return TERN_ERR_NOMEM;
    memset(s->buf, 0, BUF_LEN);
    trace("buffer ready");
    return s->t->mr_register(s->ctx, s->buf, BUF_LEN, &s->keys, &s->mr, err, errlen);
}

static void side_close(side *s)
{
    trace("side_close");
    if (s->ep)
        s->t->ep_close(s->ep);
    if (s->mr)
        s->t->mr_deregister(s->ctx, s->mr);
    trace("unload");
    tern_plugins_unload(&s->set);
    trace("unloaded");
    if (s->cfg)
        tern_config_free(s->cfg);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* ---- messages over the socketpair: u32 length + text ----------------------- */

static int msg_send(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int msg_send(int fd, const char *fmt, ...)
{
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    uint32_t len = (uint32_t)n;
    int ok = write(fd, &len, 4) == 4 && write(fd, text, len) == (ssize_t)len;
    free(text);
    return ok ? 0 : -1;
}

/* Returns a malloc()ed NUL-terminated message or NULL (peer gone). */
static char *msg_recv(int fd)
{
    uint32_t len;
    if (read(fd, &len, 4) != 4 || len > (1u << 20))
        return NULL;
    char *m = malloc(len + 1);
    size_t got = 0;
    while (m && got < len) {
        ssize_t r = read(fd, m + got, len - got);
        if (r <= 0) {
            free(m);
            return NULL;
        }
        got += (size_t)r;
    }
    if (m)
        m[len] = '\0';
    return m;
}

static const char *desc_text(tern_desc *d)
{
    return json_object_to_json_string_ext((struct json_object *)d, JSON_C_TO_STRING_PLAIN);
}

/* ---- data ------------------------------------------------------------------ */

static uint8_t pattern(uint64_t seed, uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xC2B2AE3D27D4EB4Full;
    return (uint8_t)(x >> 29 ^ x >> 47);
}

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = pattern(seed, i);
}

/* -1 when all bytes match, else the first wrong offset. */
static int64_t check(const uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != pattern(seed, i))
            return (int64_t)i;
    return -1;
}

/* Cut [0, len) like the core does (64 KiB slices, a tail up to 16 KiB more
 * stays with the last one), submit everything, poll everything back.
 * Returns the first failing status (message in err) or 0. */
static int xfer(side *s, int opcode, uint64_t loff, uint64_t raddr, uint64_t rkey, uint64_t len,
                char *err, size_t errlen)
{
    size_t max = len / SLICE + 2, n = 0;
    tern_slice *sl = calloc(max, sizeof *sl);
    tern_slice **ptr = calloc(max, sizeof *ptr);
    for (uint64_t off = 0; off < len || (len == 0 && n == 0);) {
        uint64_t l = len - off;
        if (l > SLICE + (16u << 10))
            l = SLICE;
        tern_slice *x = &sl[n];
        x->struct_size = sizeof *x;
        x->opcode = opcode;
        x->local = s->buf + loff + off;
        x->remote = raddr + off;
        x->length = l;
        x->lkey = s->keys.lkey[0];
        x->rkey = rkey;
        x->ep = s->ep;
        ptr[n] = x;
        n++;
        off += l;
        if (len == 0)
            break;
    }
    int rc = 0;
    size_t submitted = 0, done = 0;
    time_t deadline = time(NULL) + 60;
    while (done < n && time(NULL) < deadline) {
        if (submitted < n) {
            int k = s->t->submit(s->ep, ptr + submitted, (int)(n - submitted));
            if (k < 0) {
                snprintf(err, errlen, "submit refused: %s", tern_strerror(k));
                rc = k;
                break;
            }
            submitted += (size_t)k;
        }
        tern_slice *back[64];
        int got = vm_poll(back, 64, 100);
        cr_assert_geq(got, 0, "poll failed: %d", got);
        for (int i = 0; i < got; i++) {
            done++;
            if (back[i]->status != 0 && rc == 0) {
                rc = back[i]->status;
                snprintf(err, errlen, "%s", back[i]->errmsg);
            }
            if (back[i]->status == 0)
                cr_expect_eq(back[i]->transferred, back[i]->length);
        }
    }
    if (rc == 0 && done < n) {
        snprintf(err, errlen, "timeout: %zu of %zu slices back after 60 s", done, n);
        rc = TERN_ERR_TIMEOUT;
    }
    /* Whatever happened, every submitted slice must come back exactly once. */
    while (done < submitted && time(NULL) < deadline + 10) {
        tern_slice *back[64];
        int got = vm_poll(back, 64, 100);
        if (got > 0)
            done += (size_t)got;
    }
    cr_expect_eq(done, submitted, "slices lost: %zu submitted, %zu returned", submitted, done);
    free(sl);
    free(ptr);
    return rc;
}

/* ---- the passive peer (child process) ----------------------------------------- */

static void peer_connect(side *s, int fd, const char *json, int reuse)
{
    char err[512] = "";
    struct json_object *pd = json_tokener_parse(json);
    tern_desc *mine = tern_desc_new();
    int rc = 0;
    if (!reuse || !s->ep) {
        tern_ep_params prm = {.struct_size = sizeof prm, .local_dev = 0, .peer_dev = 0,
                              .peer_name = "active", .peer_nic_path = "active@rxe0",
                              .local_nic_path = "passive@rxe0", .passive = 1};
        tern_desc *seg = tern_desc_new();
        prm.peer_segment = seg;
        rc = s->t->ep_open(s->ctx, &prm, &s->ep, err, sizeof err);
        tern_desc_free(seg);
    }
    if (rc == 0)
        rc = s->t->ep_connect(s->ep, (const tern_desc *)pd, err, sizeof err);
    if (s->ep)
        s->t->ep_describe(s->ep, mine);
    tern_desc_set_str(mine, "reply_msg", rc == 0 ? "" : err);
    msg_send(fd, "%s", desc_text(mine));
    tern_desc_free(mine);
    json_object_put(pd);
}

static void peer_main(int fd, const char *opts)
{
    side s;
    char err[512] = "";
    if (side_open(&s, opts, err, sizeof err) < 0) {
        msg_send(fd, "ERR %s", err);
        _exit(1);
    }
    msg_send(fd, "HELLO %llu %llu", (unsigned long long)(uintptr_t)s.buf,
             (unsigned long long)s.keys.rkey[0]);
    for (char *m; (m = msg_recv(fd)) != NULL; free(m)) {
        unsigned long long off, len, seed;
        if (strncmp(m, "CONNECT ", 8) == 0) {
            peer_connect(&s, fd, m + 8, 0);
        } else if (strncmp(m, "RECONNECT ", 10) == 0) {
            peer_connect(&s, fd, m + 10, 1);
        } else if (sscanf(m, "FILL %llu %llu %llu", &off, &len, &seed) == 3) {
            fill(s.buf + off, len, seed);
            msg_send(fd, "OK");
        } else if (sscanf(m, "CHECK %llu %llu %llu", &off, &len, &seed) == 3) {
            int64_t bad = check(s.buf + off, len, seed);
            if (bad < 0)
                msg_send(fd, "OK");
            else
                msg_send(fd, "BAD at %lld: %02x, expected %02x", (long long)bad,
                         s.buf[off + (uint64_t)bad], pattern(seed, (uint64_t)bad));
        } else if (strcmp(m, "RESET") == 0) {
            msg_send(fd, "RC %d", s.t->ep_reset ? s.t->ep_reset(s.ep) : TERN_ERR_NOT_SUPPORTED);
        } else if (strcmp(m, "QUIT") == 0) {
            free(m);
            break;
        }
    }
    side_close(&s);
    _exit(0);
}

/* ---- the active side (the test process) -------------------------------------- */

typedef struct pair {
    side a;
    int fd;
    pid_t pid;
    uint64_t peer_buf, peer_rkey;
} pair;

static void need_rxe(void)
{
    struct stat st;
    if (stat("/sys/class/infiniband/rxe0", &st) != 0)
        cr_skip_test("no rxe0 here: this suite runs inside the Soft-RoCE VM "
                     "(tests/system/vm/run-in-vm.sh, CTest test rdma_vm)");
}

static void pair_start(pair *pr, const char *opts_active, const char *opts_passive)
{
    need_rxe();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pr->pid = fork();
    cr_assert_geq(pr->pid, 0);
    if (pr->pid == 0) {
        close(sv[0]);
        peer_main(sv[1], opts_passive);
    }
    close(sv[1]);
    pr->fd = sv[0];
    char err[512] = "";
    int rc = side_open(&pr->a, opts_active, err, sizeof err);
    cr_assert_eq(rc, 0, "active side: %s", err);
    char *hello = msg_recv(pr->fd);
    cr_assert(hello, "the passive process died");
    unsigned long long b, k;
    cr_assert_eq(sscanf(hello, "HELLO %llu %llu", &b, &k), 2, "passive side: %s", hello);
    pr->peer_buf = b;
    pr->peer_rkey = k;
    free(hello);
}

static void pair_stop(pair *pr)
{
    msg_send(pr->fd, "QUIT");
    int st = 0;
    waitpid(pr->pid, &st, 0);
    close(pr->fd);
    side_close(&pr->a);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "passive process ended badly (%d)", st);
}

/* The handshake: our descriptor out, the peer's (with reply_msg) back. */
static int pair_connect(pair *pr, int reuse, char *err, size_t errlen)
{
    side *s = &pr->a;
    int rc = 0;
    if (!reuse) {
        tern_ep_params prm = {.struct_size = sizeof prm, .local_dev = 0, .peer_dev = 0,
                              .peer_name = "passive", .peer_nic_path = "passive@rxe0",
                              .local_nic_path = "active@rxe0", .passive = 0};
        tern_desc *seg = tern_desc_new();
        prm.peer_segment = seg;
        rc = s->t->ep_open(s->ctx, &prm, &s->ep, err, errlen);
        tern_desc_free(seg);
        if (rc < 0)
            return rc;
    }
    tern_desc *mine = tern_desc_new();
    cr_assert_eq(s->t->ep_describe(s->ep, mine), 0);
    msg_send(pr->fd, "%s %s", reuse ? "RECONNECT" : "CONNECT", desc_text(mine));
    tern_desc_free(mine);
    char *reply = msg_recv(pr->fd);
    cr_assert(reply, "the passive process died during the handshake");
    struct json_object *pd = json_tokener_parse(reply);
    cr_assert(pd, "bad descriptor from the peer: %s", reply);
    const char *rm = tern_desc_get_str((tern_desc *)pd, "reply_msg");
    if (rm && *rm) {
        snprintf(err, errlen, "%s", rm);
        rc = TERN_ERR_REFUSED;
    } else {
        rc = s->t->ep_connect(s->ep, (const tern_desc *)pd, err, errlen);
    }
    json_object_put(pd);
    free(reply);
    return rc;
}

static void peer_cmd(pair *pr, const char *fmt, unsigned long long a, unsigned long long b,
                     unsigned long long c)
{
    msg_send(pr->fd, fmt, a, b, c);
    char *r = msg_recv(pr->fd);
    cr_assert(r, "the passive process died");
    cr_assert_str_eq(r, "OK", "peer: %s", r);
    free(r);
}

/* WRITE len bytes from our buf+loff to the peer's buf+roff and have the peer
 * check them; then READ a fresh pattern back from the peer and check it. */
static void write_read(pair *pr, uint64_t len, uint64_t loff, uint64_t roff, uint64_t seed)
{
    char err[512] = "";
    fill(pr->a.buf + loff, len, seed);
    peer_cmd(pr, "FILL %llu %llu %llu", roff, len, seed + 1000); /* stale bytes there */
    int rc = xfer(&pr->a, TERN_WRITE, loff, pr->peer_buf + roff, pr->peer_rkey, len, err,
                  sizeof err);
    cr_assert_eq(rc, 0, "WRITE %llu bytes: %s", (unsigned long long)len, err);
    peer_cmd(pr, "CHECK %llu %llu %llu", roff, len, seed);

    peer_cmd(pr, "FILL %llu %llu %llu", roff, len, seed + 1);
    memset(pr->a.buf + loff, 0xee, len);
    rc = xfer(&pr->a, TERN_READ, loff, pr->peer_buf + roff, pr->peer_rkey, len, err, sizeof err);
    cr_assert_eq(rc, 0, "READ %llu bytes: %s", (unsigned long long)len, err);
    int64_t bad = check(pr->a.buf + loff, len, seed + 1);
    cr_assert_eq(bad, -1, "READ %llu bytes: byte %lld differs", (unsigned long long)len,
                 (long long)bad);
}

/* ---- the tests ---------------------------------------------------------------
 * Few process pairs (each start loads libibverbs over 9p under emulation,
 * which costs seconds), several checks per pair. */

TestSuite(rdma_vm, .timeout = 240);

static void close_in_flight(pair *pr)
{
    enum { N = 256 };
    static tern_slice sl[N];
    tern_slice *ptr[N];
    for (int i = 0; i < N; i++) {
        sl[i] = (tern_slice){.struct_size = sizeof sl[i], .opcode = TERN_WRITE,
                             .local = pr->a.buf + (uint64_t)i * SLICE,
                             .remote = pr->peer_buf + (uint64_t)i * SLICE, .length = SLICE,
                             .lkey = pr->a.keys.lkey[0], .rkey = pr->peer_rkey};
        ptr[i] = &sl[i];
    }
    int k = pr->a.t->submit(pr->a.ep, ptr, N);
    cr_assert_eq(k, N);
    pr->a.t->ep_close(pr->a.ep);
    pr->a.ep = NULL;
    int back = 0, ok = 0, closed = 0;
    time_t dl = time(NULL) + 60;
    while (back < N && time(NULL) < dl) {
        tern_slice *d[64];
        int got = vm_poll(d, 64, 100);
        for (int i = 0; i < got; i++) {
            back++;
            if (d[i]->status == 0)
                ok++;
            else if (d[i]->status == TERN_ERR_CLOSED)
                closed++;
        }
    }
    cr_expect_eq(back, N, "%d of %d slices came back", back, N);
    cr_expect_eq(ok + closed, N, "ok %d + closed %d != %d", ok, closed, N);
    /* How many finish before the close is a matter of timing (an idle host
     * completes all 256): what must hold is that none is lost. */
    cr_log_info("ep_close with 256 slices in flight: %d done, %d failed with TERN_ERR_CLOSED",
                ok, closed);
}

Test(rdma_vm, two_qps_write_read_sizes_error_reset_close)
{
    pair pr;
    char err[512] = "";
    pair_start(&pr, "max_wr: 8", "");
    cr_assert_eq(pair_connect(&pr, 0, err, sizeof err), 0, "connect: %s", err);

    /* WRITE and READ byte-exact at the data-path sizes, aligned and odd. */
    const uint64_t sizes[] = {1, 4096, 65536, 65537, BIG};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        write_read(&pr, sizes[i], 0, 0, 10 + i);
        write_read(&pr, sizes[i], 1, 3, 20 + i);
    }
    cr_log_info("WRITE+READ byte-exact at 1, 4096, 65536, 65537, %u bytes (2 QPs)", BIG);

    /* A wrong rkey: the peer NAKs, the slice fails with the verbs status. */
    fill(pr.a.buf, 4096, 42);
    int rc = xfer(&pr.a, TERN_WRITE, 0, pr.peer_buf, pr.peer_rkey ^ 0x5a5a00, 4096, err,
                  sizeof err);
    cr_expect_eq(rc, TERN_ERR_DEVICE, "rc %d: %s", rc, err);
    cr_expect(strstr(err, "remote access error") != NULL, "errmsg: %s", err);
    cr_log_info("completion error text: %s", err);
    /* The endpoint is down now: new work is refused so the core goes elsewhere. */
    tern_slice x = {.struct_size = sizeof x, .opcode = TERN_WRITE, .local = pr.a.buf,
                    .remote = pr.peer_buf, .length = 8, .lkey = pr.a.keys.lkey[0],
                    .rkey = pr.peer_rkey};
    tern_slice *px = &x;
    cr_expect_eq(pr.a.t->submit(pr.a.ep, &px, 1), TERN_ERR_DEVICE);

    /* Reset both sides (QPs back to RESET), handshake again, move data. */
    cr_assert_eq(pr.a.t->ep_reset(pr.a.ep), 0);
    msg_send(pr.fd, "RESET");
    char *r = msg_recv(pr.fd);
    cr_assert(r);
    cr_expect_str_eq(r, "RC 0");
    free(r);
    cr_assert_eq(pair_connect(&pr, 1, err, sizeof err), 0, "reconnect: %s", err);
    write_read(&pr, 65537, 0, 0, 43);

    /* Close with work in flight: every slice comes back, done or CLOSED. */
    close_in_flight(&pr);
    pair_stop(&pr);
}

Test(rdma_vm, four_qps_small_queues_split_slices_mtu)
{
    /* 4 QPs, 4 outstanding requests each, 16 KiB per request: a 16 MiB
     * transfer needs ~1000 requests, so most wait in the queue and each
     * 64 KiB slice is spread over several QPs.  The sides ask for different
     * MTUs (1024 / 256): both must use 256. */
    pair pr;
    char err[512] = "";
    pair_start(&pr, "qp_per_endpoint: 4;max_wr: 4;slice_size: 16K;mtu: 1024;devices: [rxe0]",
               "qp_per_endpoint: 4;max_wr: 4;slice_size: 16K;mtu: 256");
    tern_device_info dev[4];
    int n = pr.a.t->devices(pr.a.ctx, dev, 4);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(dev[0].name, "rxe0");
    cr_expect_str_eq(dev[0].gid, "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01",
                     "the automatic GID is the IPv4 one");
    cr_assert_eq(pair_connect(&pr, 0, err, sizeof err), 0, "connect: %s", err);
    char q[1024] = "";
    cr_assert_eq(pr.a.t->query(pr.a.ctx, "", q, sizeof q), 0);
    cr_expect(strstr(q, "4 QP(s) each") != NULL, "%s", q);
    write_read(&pr, BIG, 5, 7, 31);
    write_read(&pr, 65537, 0, 1, 32);
    write_read(&pr, 1, 0, 0, 33);
    cr_log_info("WRITE+READ byte-exact over 4 QPs, max_wr 4, 16 KiB requests, path MTU 256");
    pair_stop(&pr);
}

Test(rdma_vm, qp_count_mismatch_malformed_descriptors_allow_list)
{
    pair pr;
    char err[512] = "";
    pair_start(&pr, "qp_per_endpoint: 2", "qp_per_endpoint: 3");
    int rc = pair_connect(&pr, 0, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_REFUSED, "rc %d: %s", rc, err);
    cr_expect(strstr(err, "QP count mismatch") && strstr(err, "has 2 QPs per endpoint") &&
                  strstr(err, "this side has 3") && strstr(err, "qp_per_endpoint"),
              "reply_msg from the passive side: %s", err);
    cr_log_info("passive side's reply_msg: %s", err);

    /* The active side refuses a 3-QP descriptor by itself too. */
    tern_desc *d = tern_desc_new();
    uint32_t qpn[3] = {1, 2, 3};
    tern_desc_set_u32_array(d, "qp_num", qpn, 3);
    tern_desc_set_u64(d, "local_lid", 0);
    tern_desc_set_str(d, "local_gid", "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01");
    err[0] = '\0';
    rc = pr.a.t->ep_connect(pr.a.ep, d, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_REFUSED);
    cr_expect(strstr(err, "QP count mismatch") && strstr(err, "has 3 QPs") &&
                  strstr(err, "this side has 2"), "%s", err);
    tern_desc_free(d);

    /* Malformed descriptors: refused with the key named, nothing posted. */
    const char *cases[][2] = {
        {"{}", "qp_num"},
        {"{\"qp_num\":[1,2],\"local_gid\":\"fe:80\"}", "local_lid"},
        {"{\"qp_num\":[1,2],\"local_lid\":70000,\"local_gid\":\"x\"}", "local_lid"},
        {"{\"qp_num\":[1,2],\"local_lid\":0,\"local_gid\":\"fe:80\"}", "local_gid"},
        {"{\"qp_num\":[1,\"x\"],\"local_lid\":0}", "qp_num"},
        {"{\"qp_num\":[1,2],\"local_lid\":0,\"local_gid\":"
         "\"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01\",\"mtu\":1500}", "mtu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct json_object *j = json_tokener_parse(cases[i][0]);
        err[0] = '\0';
        rc = pr.a.t->ep_connect(pr.a.ep, (const tern_desc *)j, err, sizeof err);
        cr_expect_eq(rc, TERN_ERR_PROTOCOL, "%s -> %d", cases[i][0], rc);
        cr_expect(strstr(err, cases[i][1]) != NULL, "%s -> %s", cases[i][0], err);
        json_object_put(j);
    }
    cr_expect_eq(pr.a.t->ep_connect(pr.a.ep, NULL, err, sizeof err), TERN_ERR_PROTOCOL);
    tern_slice x = {.struct_size = sizeof x, .opcode = TERN_WRITE, .local = pr.a.buf, .length = 8};
    tern_slice *px = &x;
    cr_expect_lt(pr.a.t->submit(pr.a.ep, &px, 1), 0, "submit on an unconnected endpoint");
    pair_stop(&pr);

    /* An allow-list that names no present device: no device, said clearly. */
    side s;
    rc = side_open(&s, "devices: [mlx5_9]", err, sizeof err);
    cr_expect_lt(rc, 0);
    cr_expect(strstr(err, "no usable RDMA device") != NULL, "%s", err);
    cr_log_info("allow-list without a match: %s", err);
    side_close(&s);
}

Test(rdma_vm, wrong_gid_index_fails_init_to_rtr)
{
    /* GID 3 of rxe0 is an empty slot (0 is fe80::, 1 the IPv4 one). */
    pair pr;
    char err[512] = "";
    pair_start(&pr, "", "gid_index: 3");
    int rc = pair_connect(&pr, 0, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_REFUSED, "rc %d: %s", rc, err);
    const char *want = "Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num: ";
    cr_expect(strncmp(err, want, strlen(want)) == 0 && strlen(err) > strlen(want),
              "reply_msg: %s", err);
    cr_log_info("passive side's reply_msg: %s", err);
    pair_stop(&pr);
}

/* ep_open / ep_connect / submit / ep_close from several threads at once on
 * one plugin instance: each thread connects two endpoints of this process
 * to each other (RC QPs on the same rxe0), WRITEs through one of them and
 * checks the bytes, then closes both.  Run under the suite's timeout: a
 * deadlock fails it, a race shows up as wrong bytes or lost slices. */
typedef struct loop_arg {
    side *s;
    int idx, iters, failures;
    char err[512];
} loop_arg;

static int loop_connect(side *s, void *a, void *b, char *err, size_t errlen)
{
    tern_desc *da = tern_desc_new(), *db = tern_desc_new();
    int rc = s->t->ep_describe(a, da);
    if (rc == 0)
        rc = s->t->ep_describe(b, db);
    if (rc == 0)
        rc = s->t->ep_connect(a, db, err, errlen);
    if (rc == 0)
        rc = s->t->ep_connect(b, da, err, errlen);
    tern_desc_free(da);
    tern_desc_free(db);
    return rc;
}

static void *loop_thread(void *p)
{
    loop_arg *la = p;
    side *s = la->s;
    const uint64_t len = 65536 + 17, src = (uint64_t)la->idx * 2 * (1u << 20);
    const uint64_t dst = src + (1u << 20);
    for (int it = 0; it < la->iters; it++) {
        void *a = NULL, *b = NULL;
        tern_ep_params prm = {.struct_size = sizeof prm, .peer_nic_path = "self@rxe0"};
        tern_desc *seg = tern_desc_new();
        prm.peer_segment = seg;
        int rc = s->t->ep_open(s->ctx, &prm, &a, la->err, sizeof la->err);
        if (rc == 0)
            rc = s->t->ep_open(s->ctx, &prm, &b, la->err, sizeof la->err);
        tern_desc_free(seg);
        if (rc == 0)
            rc = loop_connect(s, a, b, la->err, sizeof la->err);
        if (rc == 0) {
            fill(s->buf + src, len, (uint64_t)(la->idx * 1000 + it));
            tern_slice sl[2];
            tern_slice *ptr[2];
            int done[2] = {0, 0}; /* set by the poller thread through slice->core */
            for (int k = 0; k < 2; k++) {
                uint64_t off = k ? 65536 : 0, l = k ? len - 65536 : 65536;
                sl[k] = (tern_slice){.struct_size = sizeof sl[k], .opcode = TERN_WRITE,
                                     .local = s->buf + src + off,
                                     .remote = (uint64_t)(uintptr_t)(s->buf + dst + off),
                                     .length = l, .lkey = s->keys.lkey[0],
                                     .rkey = s->keys.rkey[0], .core = &done[k]};
                ptr[k] = &sl[k];
            }
            rc = s->t->submit(a, ptr, 2) == 2 ? 0 : TERN_ERR_DEVICE;
            time_t dl = time(NULL) + 60;
            while (rc == 0 && (!__atomic_load_n(&done[0], __ATOMIC_ACQUIRE) ||
                               !__atomic_load_n(&done[1], __ATOMIC_ACQUIRE))) {
                if (time(NULL) > dl) {
                    rc = TERN_ERR_TIMEOUT;
                    break;
                }
                usleep(1000);
            }
            if (rc == 0 && (sl[0].status || sl[1].status))
                rc = sl[0].status ? sl[0].status : sl[1].status;
            if (rc == 0 && check(s->buf + dst, len, (uint64_t)(la->idx * 1000 + it)) != -1) {
                snprintf(la->err, sizeof la->err, "thread %d iteration %d: bytes differ",
                         la->idx, it);
                rc = TERN_ERR_IO;
            }
        }
        if (a)
            s->t->ep_close(a);
        if (b)
            s->t->ep_close(b);
        if (rc != 0) {
            la->failures++;
            if (!la->err[0])
                snprintf(la->err, sizeof la->err, "thread %d iteration %d: %s", la->idx, it,
                         tern_strerror(rc));
        }
    }
    return NULL;
}

/* The poller: hands finished slices back through the flag in slice->core
 * (the core's bookkeeping pointer: the plugin never touches it). */
typedef struct poller_arg {
    side *s;
    int stop;
    long polled;
} poller_arg;

static void *poller_thread(void *p)
{
    poller_arg *pa = p;
    while (!__atomic_load_n(&pa->stop, __ATOMIC_ACQUIRE)) {
        tern_slice *d[64];
        int got = vm_poll(d, 64, 50);
        for (int i = 0; i < got; i++) {
            pa->polled++;
            __atomic_store_n((int *)d[i]->core, 1, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

Test(rdma_vm, concurrent_open_connect_close_in_one_process)
{
    need_rxe();
    side s;
    char err[512] = "";
    cr_assert_eq(side_open(&s, "qp_per_endpoint: 3", err, sizeof err), 0, "%s", err);
    enum { T = 4, ITERS = 8 };
    loop_arg la[T];
    pthread_t th[T], pt;
    poller_arg pa = {.s = &s};
    pthread_create(&pt, NULL, poller_thread, &pa);
    for (int i = 0; i < T; i++) {
        la[i] = (loop_arg){.s = &s, .idx = i, .iters = ITERS};
        pthread_create(&th[i], NULL, loop_thread, &la[i]);
    }
    int failures = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        failures += la[i].failures;
        cr_expect_eq(la[i].failures, 0, "thread %d: %d failures, first: %s", i, la[i].failures,
                     la[i].err);
    }
    __atomic_store_n(&pa.stop, 1, __ATOMIC_RELEASE);
    pthread_join(pt, NULL);
    cr_expect_eq(pa.polled, (long)T * ITERS * 2, "slices polled");
    char q[1024] = "";
    s.t->query(s.ctx, "", q, sizeof q);
    cr_expect(strstr(q, " 0 endpoint(s)") != NULL, "every endpoint closed: %s", q);
    cr_log_info("%d threads x %d rounds of open/connect/WRITE/close in one process: %d failures",
                T, ITERS, failures);
    side_close(&s);
}
