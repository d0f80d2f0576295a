/* tests/transports/test_tcp_pool.c: the TCP transport's fixed pool of I/O threads and
 * its adaptive connections, driven through the plugin's vtable (two plugin
 * instances in this process, a target and an initiator, over loopback).
 *
 *  - many endpoints (each a peer as far as the transport knows) add no
 *    thread, and at most one socket per side while idle; every write is
 *    read back and compared;
 *  - a deep queue on one endpoint opens more connections, never more than
 *    `connections`; unused ones close after idle_close_ms;
 *  - completions come back through the host service complete(), from the
 *    submitting thread or an I/O thread, each slice exactly once. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "desc.h"
#include "tern/tern.h"
#include "tern/transport.h"

#define PLUGIN_PATH TERN_BUILD_DIR "/lib/tern/libtern-tcp.so"

static void *g_dl;
static const tern_transport *T;

typedef struct inst {
    void *ctx;
    tern_host_services hs;
    const char *keys[8], *vals[8];
    int nkv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ndone;
} inst;

static void h_log(void *host, int level, const char *fmt, ...)
{
    (void)host;
    if (level > TERN_LOG_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *h_get(void *host, const char *key)
{
    inst *in = host;
    for (int i = 0; i < in->nkv; i++)
        if (!strcmp(in->keys[i], key))
            return in->vals[i];
    return NULL;
}

static int64_t h_get_int(void *host, const char *key, int64_t fallback)
{
    const char *v = h_get(host, key);
    return v ? strtoll(v, NULL, 0) : fallback;
}

/* Each slice's core field points at a counter: exactly once means 1. */
static void h_complete(void *host, tern_slice *s)
{
    inst *in = host;
    int *seen = s->core;
    pthread_mutex_lock(&in->mu);
    (*seen)++;
    in->ndone++;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
}

static inst *inst_new(const char *k0, ...)
{
    inst *in = calloc(1, sizeof *in);
    va_list ap;
    va_start(ap, k0);
    for (const char *k = k0; k && in->nkv < 8; k = va_arg(ap, const char *)) {
        in->keys[in->nkv] = k;
        in->vals[in->nkv++] = va_arg(ap, const char *);
    }
    va_end(ap);
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    in->hs = (tern_host_services){
        .struct_size = sizeof(tern_host_services), .host = in, .log = h_log,
        .config_get = h_get, .config_get_int = h_get_int, .alloc = malloc, .free = free,
        .desc_set_str = tern_desc_set_str, .desc_set_u64 = tern_desc_set_u64,
        .desc_set_u32_array = tern_desc_set_u32_array, .desc_get_str = tern_desc_get_str,
        .desc_get_u64 = tern_desc_get_u64, .desc_get_u32_array = tern_desc_get_u32_array,
        .server_name = "127.0.0.1:0", .io_timeout_ms = 5000, .sysfs_root = "/sys",
        .complete = h_complete};
    char err[512] = "";
    int rc = T->init(&in->hs, &in->ctx, err, sizeof err);
    cr_assert_eq(rc, 0, "init: %d %s", rc, err);
    return in;
}

static void inst_free(inst *in)
{
    T->fini(in->ctx);
    free(in);
}

/* Wait until `want` slices in all were handed back. */
static void inst_wait(inst *in, int want, int tmo_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += tmo_ms / 1000;
    pthread_mutex_lock(&in->mu);
    while (in->ndone < want)
        if (pthread_cond_timedwait(&in->cv, &in->mu, &ts) != 0)
            break;
    int got = in->ndone;
    pthread_mutex_unlock(&in->mu);
    cr_assert_geq(got, want, "only %d of %d slices came back within %d ms", got, want, tmo_ms);
}

static void *ep_to(inst *from, inst *to)
{
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(to->ctx, blob), 0);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "peer", .peer_segment = blob};
    void *ep = NULL;
    char err[512] = "";
    int rc = T->ep_open(from->ctx, &p, &ep, err, sizeof err);
    tern_desc_free(blob);
    cr_assert_eq(rc, 0, "ep_open: %s", err);
    rc = T->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(rc, 0, "ep_connect: %s", err);
    return ep;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - (d && !strcmp(path, "/proc/self/fd"));
}

static uint64_t query_count(inst *in, const char *what)
{
    char out[1024];
    cr_assert_eq(T->query(in->ctx, "", out, sizeof out), 0);
    const char *p = strstr(out, what);
    cr_assert_not_null(p, "no '%s' in: %s", what, out);
    while (p > out && p[-1] == ' ')
        p--;
    while (p > out && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return strtoull(p, NULL, 10);
}

static void setup(void)
{
    g_dl = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    cr_assert(g_dl, "dlopen %s: %s", PLUGIN_PATH, dlerror());
    T = dlsym(g_dl, TERN_TRANSPORT_SYMBOL);
    cr_assert(T);
    cr_assert_null(T->poll, "slices come back through complete(), not poll()");
    cr_assert_geq(T->abi_minor, 1);
}

static void teardown(void)
{
    dlclose(g_dl);
}

TestSuite(tcp_pool, .init = setup, .fini = teardown, .timeout = 120);

Test(tcp_pool, endpoints_add_no_thread_and_one_socket_each)
{
    enum { NEP = 300, LEN = 4096 };
    inst *tg = inst_new("io_threads", "2", NULL), *in = inst_new("io_threads", "2", NULL);
    uint8_t *dst = calloc(NEP, LEN), *src = malloc((size_t)NEP * LEN);
    uint8_t *back = calloc(NEP, LEN);
    void *mr;
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(tg->ctx, dst, (size_t)NEP * LEN, &k, &mr, err, sizeof err), 0);
    for (size_t i = 0; i < (size_t)NEP * LEN; i++)
        src[i] = (uint8_t)(i * 31 + (i >> 12));
    int th0 = count_dir("/proc/self/task"), fd0 = count_dir("/proc/self/fd");
    static void *eps[NEP];
    static tern_slice s[NEP], r[NEP];
    static int seen[NEP], seen_r[NEP];
    for (int i = 0; i < NEP; i++)
        eps[i] = ep_to(in, tg);
    for (int i = 0; i < NEP; i++) {
        s[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                            .local = src + (size_t)i * LEN,
                            .remote = (uint64_t)(uintptr_t)(dst + (size_t)i * LEN),
                            .length = LEN, .status = 1, .core = &seen[i]};
        tern_slice *sp = &s[i];
        cr_assert_eq(T->submit(eps[i], &sp, 1), 1);
    }
    inst_wait(in, NEP, 20000);
    for (int i = 0; i < NEP; i++) {
        r[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_READ,
                            .local = back + (size_t)i * LEN,
                            .remote = (uint64_t)(uintptr_t)(dst + (size_t)i * LEN),
                            .length = LEN, .status = 1, .core = &seen_r[i]};
        tern_slice *sp = &r[i];
        cr_assert_eq(T->submit(eps[i], &sp, 1), 1);
    }
    inst_wait(in, 2 * NEP, 20000);
    usleep(200000);
    int th1 = count_dir("/proc/self/task"), fd1 = count_dir("/proc/self/fd");
    for (int i = 0; i < NEP; i++) {
        cr_assert_eq(seen[i], 1, "write %d handed back %d times", i, seen[i]);
        cr_assert_eq(seen_r[i], 1, "read %d handed back %d times", i, seen_r[i]);
        cr_assert_eq(s[i].status, 0, "write %d: %s", i, s[i].errmsg);
        cr_assert_eq(r[i].status, 0, "read %d: %s", i, r[i].errmsg);
    }
    cr_assert_eq(memcmp(src, dst, (size_t)NEP * LEN), 0, "target memory differs");
    cr_assert_eq(memcmp(src, back, (size_t)NEP * LEN), 0, "data read back differs");
    cr_log_info("%d endpoints: threads %d -> %d, fds %d -> %d", NEP, th0, th1, fd0, fd1);
    cr_assert_eq(th1, th0, "threads grew with endpoints: %d -> %d", th0, th1);
    /* both sides live in this process: one socket each per idle endpoint */
    cr_assert_leq(fd1 - fd0, 2 * NEP, "%d fds for %d idle endpoints", fd1 - fd0, NEP);
    for (int i = 0; i < NEP; i++)
        T->ep_close(eps[i]);
    cr_assert_eq(T->mr_deregister(tg->ctx, mr), 0);
    inst_free(in);
    inst_free(tg);
    free(src);
    free(dst);
    free(back);
}

Test(tcp_pool, a_deep_queue_opens_connections_and_idle_ones_close)
{
    enum { N = 64, LEN = 1 << 20 };
    inst *tg = inst_new(NULL), *in = inst_new("connections", "3", "idle_close_ms", "1500", NULL);
    uint8_t *dst = calloc(N, LEN), *src = malloc((size_t)N * LEN);
    void *mr;
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(tg->ctx, dst, (size_t)N * LEN, &k, &mr, err, sizeof err), 0);
    for (size_t i = 0; i < (size_t)N * LEN; i++)
        src[i] = (uint8_t)(i * 7 + (i >> 16));
    void *ep = ep_to(in, tg);
    /* The target accepts on its own I/O thread: count fds once it has. */
    for (int i = 0; i < 500 && query_count(tg, "incoming connections") < 1; i++)
        usleep(10000);
    cr_assert_eq(query_count(tg, "incoming connections"), 1, "the target took the connection");
    int fd_one = count_dir("/proc/self/fd");
    cr_assert_eq(query_count(in, "connects"), 1, "ep_connect opens one connection");
    static tern_slice s[N];
    static int seen[N];
    tern_slice *sp[N];
    for (int round = 0; round < 4; round++) {
        memset(seen, 0, sizeof seen);
        pthread_mutex_lock(&in->mu);
        in->ndone = 0;
        pthread_mutex_unlock(&in->mu);
        for (int i = 0; i < N; i++) {
            s[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                                .local = src + (size_t)i * LEN,
                                .remote = (uint64_t)(uintptr_t)(dst + (size_t)i * LEN),
                                .length = LEN, .status = 1, .core = &seen[i]};
            sp[i] = &s[i];
        }
        cr_assert_eq(T->submit(ep, sp, N), N);
        inst_wait(in, N, 30000);
        for (int i = 0; i < N; i++)
            cr_assert(seen[i] == 1 && s[i].status == 0, "slice %d: seen %d, %s", i, seen[i],
                      s[i].errmsg);
    }
    cr_assert_eq(memcmp(src, dst, (size_t)N * LEN), 0, "target memory differs");
    uint64_t connects = query_count(in, "connects");
    int fd_busy = count_dir("/proc/self/fd");
    cr_log_info("deep queue: %" PRIu64 " connects, fds %d with one connection, %d after", connects,
                fd_one, fd_busy);
    cr_assert_geq(connects, 2, "a deep queue did not open a second connection");
    cr_assert_leq(fd_busy - fd_one, 2 * 2, "more than `connections` (3) connections were open");
    /* unused for idle_close_ms: back to one connection (both sides' sockets) */
    int fd_now = fd_busy;
    for (int i = 0; i < 150 && fd_now > fd_one; i++) {
        usleep(100000);
        fd_now = count_dir("/proc/self/fd");
    }
    cr_assert_eq(fd_now, fd_one, "idle extra connections did not close (fds %d, %d with one)",
                 fd_now, fd_one);
    /* and the endpoint still works on the one left */
    s[0].status = 1;
    seen[0] = 0;
    pthread_mutex_lock(&in->mu);
    in->ndone = 0;
    pthread_mutex_unlock(&in->mu);
    cr_assert_eq(T->submit(ep, sp, 1), 1);
    inst_wait(in, 1, 10000);
    cr_assert_eq(s[0].status, 0, "%s", s[0].errmsg);
    T->ep_close(ep);
    cr_assert_eq(T->mr_deregister(tg->ctx, mr), 0);
    inst_free(in);
    inst_free(tg);
    free(src);
    free(dst);
}
