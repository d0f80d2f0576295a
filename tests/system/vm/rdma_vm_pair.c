/* tests/system/vm/rdma_vm_pair.c: see rdma_vm_pair.h. */
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

#include "config/config.h"
#include "config/load.h"
#include "desc/desc.h"
#include "plugin/plugin.h"
#include "rdma_vm_pair.h"
#include "tern/tern.h"
#include "tern/transport.h"

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
int vm_poll(tern_slice **out, int max, int timeout_ms)
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
int side_open(side *s, const char *opts, char *err, size_t errlen)
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

void side_close(side *s)
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

int msg_send(int fd, const char *fmt, ...)
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
char *msg_recv(int fd)
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

void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = pattern(seed, i);
}

/* -1 when all bytes match, else the first wrong offset. */
int64_t check(const uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != pattern(seed, i))
            return (int64_t)i;
    return -1;
}

/* Cut [0, len) like the core does (64 KiB slices, a tail up to 16 KiB more
 * stays with the last one), submit everything, poll everything back.
 * Returns the first failing status (message in err) or 0. */
int xfer(side *s, int opcode, uint64_t loff, uint64_t raddr, uint64_t rkey, uint64_t len,
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

void need_rxe(void)
{
    struct stat st;
    if (stat("/sys/class/infiniband/rxe0", &st) != 0)
        cr_skip_test("no rxe0 here: this suite runs inside the Soft-RoCE VM "
                     "(tests/system/vm/run-in-vm.sh, CTest test rdma_vm)");
}

void pair_start(pair *pr, const char *opts_active, const char *opts_passive)
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

void pair_stop(pair *pr)
{
    msg_send(pr->fd, "QUIT");
    int st = 0;
    waitpid(pr->pid, &st, 0);
    close(pr->fd);
    side_close(&pr->a);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "passive process ended badly (%d)", st);
}

/* The handshake: our descriptor out, the peer's (with reply_msg) back. */
int pair_connect(pair *pr, int reuse, char *err, size_t errlen)
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
void write_read(pair *pr, uint64_t len, uint64_t loff, uint64_t roff, uint64_t seed)
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
