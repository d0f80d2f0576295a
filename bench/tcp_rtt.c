/* bench/tcp_rtt.c: the TCP transport's own round trip, without the core:
 * the plugin is dlopen()ed and driven through its vtable (a target instance
 * in a child process, an initiator instance here), one slice of --size
 * bytes in flight; the time from submit() to the host service complete()
 * is recorded.  bench/latency.sh prints it beside the full API figure, so
 * the share of the core's path (batch, cut, route, wait) shows.
 *
 *   tern-bench-tcp-rtt PLUGIN.so [--size 8] [--duration 3] [--op write|read]
 * Transport options come from the environment, TCP_RTT_<key>=value.
 * Prints "tcp_rtt op=.. size=S n=N p50_us=X p99_us=Y". */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "desc/desc.h"
#include "tern/tern.h"
#include "tern/transport.h"

static const tern_transport *T;
static atomic_int g_done;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void h_log(void *host, int level, const char *fmt, ...)
{
    (void)host;
    (void)level;
    (void)fmt;
}

/* Options of the transport from the environment: TCP_RTT_<key>=value. */
static const char *h_get(void *host, const char *key)
{
    (void)host;
    char name[128];
    snprintf(name, sizeof name, "TCP_RTT_%s", key);
    return getenv(name);
}

static int64_t h_get_int(void *host, const char *key, int64_t fallback)
{
    const char *v = h_get(host, key);
    return v ? strtoll(v, NULL, 0) : fallback;
}

/* The waiting side spins on this flag, like a caller that polls. */
static void h_complete(void *host, tern_slice *s)
{
    (void)host;
    (void)s;
    atomic_store(&g_done, 1);
}

static void *instance(void)
{
    static tern_host_services hs;
    hs = (tern_host_services){
        .struct_size = sizeof hs, .log = h_log, .config_get = h_get,
        .config_get_int = h_get_int, .alloc = malloc, .free = free,
        .desc_set_str = tern_desc_set_str, .desc_set_u64 = tern_desc_set_u64,
        .desc_set_u32_array = tern_desc_set_u32_array, .desc_get_str = tern_desc_get_str,
        .desc_get_u64 = tern_desc_get_u64, .desc_get_u32_array = tern_desc_get_u32_array,
        .server_name = "127.0.0.1:0", .io_timeout_ms = 5000, .sysfs_root = "/sys",
        .complete = h_complete};
    void *ctx = NULL;
    char err[512];
    if (T->init(&hs, &ctx, err, sizeof err) != 0) {
        fprintf(stderr, "tcp_rtt: init: %s\n", err);
        exit(1);
    }
    return ctx;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tern-bench-tcp-rtt PLUGIN.so [--size N] [--duration S] "
                        "[--op write|read]\n");
        return 2;
    }
    size_t size = 8;
    double dur = 3;
    int op = TERN_WRITE;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--size"))
            size = (size_t)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--duration"))
            dur = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--op"))
            op = strcmp(argv[i + 1], "read") ? TERN_WRITE : TERN_READ;
    }
    void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    T = dl ? dlsym(dl, TERN_TRANSPORT_SYMBOL) : NULL;
    if (!T) {
        fprintf(stderr, "tcp_rtt: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    /* The target: in a child, so each side has its own process as in use. */
    int pfd[2];
    if (pipe(pfd))
        return 1;
    uint8_t *tbuf = calloc(1, size);
    pid_t pid = fork();
    if (pid == 0) {
        void *tg = instance();
        void *mr;
        tern_mr_keys k;
        char err[256];
        T->mr_register(tg, tbuf, size, &k, &mr, err, sizeof err);
        tern_desc *blob = tern_desc_new();
        T->segment_describe(tg, blob);
        uint64_t port = 0;
        tern_desc_get_u64(blob, "port", &port);
        uint64_t msg[2] = {port, (uint64_t)(uintptr_t)tbuf};
        if (write(pfd[1], msg, sizeof msg) != sizeof msg)
            _exit(1);
        pause();
        _exit(0);
    }
    uint64_t msg[2];
    if (read(pfd[0], msg, sizeof msg) != sizeof msg)
        return 1;
    void *in = instance();
    tern_desc *blob = tern_desc_new();
    tern_desc_set_str(blob, "host", "127.0.0.1");
    tern_desc_set_u64(blob, "port", msg[0]);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "target", .peer_segment = blob};
    void *ep = NULL;
    char err[512];
    if (T->ep_open(in, &p, &ep, err, sizeof err) || T->ep_connect(ep, NULL, err, sizeof err)) {
        fprintf(stderr, "tcp_rtt: connect: %s\n", err);
        kill(pid, SIGKILL);
        return 1;
    }
    uint8_t *local = calloc(1, size);
    size_t cap = 1 << 20, n = 0;
    uint32_t *lat = malloc(cap * sizeof *lat);
    double end = now_s() + dur;
    for (int warm = 1000; now_s() < end && n < cap;) {
        tern_slice s = {.struct_size = sizeof s, .opcode = op, .local = local,
                        .remote = msg[1], .length = size};
        tern_slice *sp = &s;
        atomic_store(&g_done, 0);
        double t0 = now_s();
        if (T->submit(ep, &sp, 1) != 1)
            break;
        while (!atomic_load(&g_done))
            ;
        if (s.status) {
            fprintf(stderr, "tcp_rtt: %s\n", s.errmsg);
            break;
        }
        if (warm)
            warm--;
        else
            lat[n++] = (uint32_t)((now_s() - t0) * 1e6 + 0.5);
    }
    T->ep_close(ep);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (!n)
        return 1;
    qsort(lat, n, sizeof *lat, cmp_u32);
    printf("tcp_rtt op=%s size=%zu n=%zu p50_us=%u p99_us=%u\n", op == TERN_WRITE ? "write" : "read",
           size, n, lat[n / 2], lat[(size_t)((double)n * 0.99)]);
    return 0;
}
