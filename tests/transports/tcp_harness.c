/* tests/transports/tcp_harness.c: see tcp_harness.h. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "desc/desc.h"
#include "tern/tern.h"
#include "tern/transport.h"
#include "tcp_harness.h"

static void *g_dl;
const tern_transport *T;

void inst_complete(void *host, tern_slice *s)
{
    inst *in = host;
    pthread_mutex_lock(&in->cq_mu);
    if (in->ncq < 4096)
        in->cq[in->ncq++] = s;
    pthread_cond_broadcast(&in->cq_cv);
    pthread_mutex_unlock(&in->cq_mu);
}

/* Up to max completed slices, waiting up to tmo_ms for the first. */
int inst_poll(inst *in, tern_slice **done, int max, int tmo_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += tmo_ms / 1000;
    ts.tv_nsec += (long)(tmo_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&in->cq_mu);
    while (!in->ncq && pthread_cond_timedwait(&in->cq_cv, &in->cq_mu, &ts) == 0)
        ;
    int n = in->ncq < max ? in->ncq : max;
    memcpy(done, in->cq, (size_t)n * sizeof *done);
    memmove(in->cq, in->cq + n, (size_t)(in->ncq - n) * sizeof *in->cq);
    in->ncq -= n;
    pthread_mutex_unlock(&in->cq_mu);
    return n;
}

void load_plugin(void)
{
    T = plugin_load(PLUGIN_PATH, &g_dl);
    cr_assert_eq(T->magic, TERN_TRANSPORT_MAGIC);
    cr_assert_eq(T->abi_major, TERN_TRANSPORT_ABI_MAJOR);
    cr_assert_str_eq(T->name, "tcp");
}

void unload_plugin(void)
{
    if (g_dl)
        dlclose(g_dl);
    g_dl = NULL;
}

/* A plugin instance with optional key=value options (pairs, NULL-ended). */
static void *start_va(inst *in, const char *k0, ...)
{
    va_list ap;
    va_start(ap, k0);
    void *ctx = plugin_host_start(&in->ph, T, 3000, inst_complete, k0, ap);
    va_end(ap);
    return ctx;
}

static void *start_no_options(inst *in)
{
    return start_va(in, NULL);
}

inst *inst_new(const char *k0, ...)
{
    inst *in = calloc(1, sizeof *in);
    pthread_mutex_init(&in->cq_mu, NULL);
    pthread_cond_init(&in->cq_cv, NULL);
    va_list ap;
    va_start(ap, k0);
    in->ctx = plugin_host_start(&in->ph, T, 3000, inst_complete, k0, ap);
    va_end(ap);
    return in;
}

inst *inst_new_auth(const struct tern_auth *a, const char *server_name)
{
    inst *in = calloc(1, sizeof *in);
    pthread_mutex_init(&in->cq_mu, NULL);
    pthread_cond_init(&in->cq_cv, NULL);
    in->ph.auth = a;
    in->ph.server_name = server_name;
    in->ctx = start_no_options(in);
    return in;
}

void inst_free(inst *in)
{
    if (!in)
        return;
    T->fini(in->ctx);
    free(in);
}

/* An endpoint from `from` to `to`'s advertised data port, connected. */
void *ep_to(inst *from, inst *to)
{
    return plugin_ep_to(T, from->ctx, to->ctx);
}

uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Submit n slices and poll until all came back (or fail after tmo_ms). */
void run_slices(inst *in, void *ep, tern_slice **s, int n, int tmo_ms)
{
    int acc = T->submit(ep, s, n);
    cr_assert_eq(acc, n, "submit accepted %d of %d", acc, n);
    int got = 0;
    uint64_t end = now_ms() + (uint64_t)tmo_ms;
    tern_slice *done[64];
    while (got < n) {
        cr_assert(now_ms() < end, "only %d of %d slices came back within %d ms", got, n, tmo_ms);
        int k = inst_poll(in, done, 64, 100);
        cr_assert_geq(k, 0);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(done[i]->core, (void *)done[i], "slice returned twice or foreign");
            done[i]->core = NULL; /* mark returned */
        }
        got += k;
    }
}

tern_slice *mk(int op, void *local, uint64_t remote, uint64_t len)
{
    return plugin_slice_new(op, local, 0, remote, 0, len);
}

/* One slice, synchronously; returns its status. */
int xfer1(inst *in, void *ep, int op, void *local, uint64_t remote, uint64_t len,
          char *msg, size_t msglen)
{
    tern_slice *s = mk(op, local, remote, len);
    run_slices(in, ep, &s, 1, 20000);
    int st = s->status;
    if (st == 0)
        cr_assert_eq(s->transferred, len);
    if (msg)
        snprintf(msg, msglen, "%s", s->errmsg);
    free(s);
    return st;
}

void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

void region_make(inst *in, region *r, size_t len)
{
    r->maplen = len + 2 * GUARD;
    r->map = mmap(NULL, r->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(r->map != MAP_FAILED);
    memset(r->map, 0xA5, r->maplen);
    r->buf = r->map + GUARD;
    r->len = len;
    memset(r->buf, 0, len);
    tern_mr_keys keys;
    char err[256];
    cr_assert_eq(T->mr_register(in->ctx, r->buf, len, &keys, &r->mr, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(keys.ndev, 1);
}

void region_check_canaries(const region *r)
{
    for (size_t i = 0; i < GUARD; i++) {
        cr_assert_eq(r->map[i], 0xA5, "canary below the buffer changed at -%zu", GUARD - i);
        cr_assert_eq(r->buf[r->len + i], 0xA5, "canary above the buffer changed at +%zu", i);
    }
}

void region_free(inst *in, region *r)
{
    if (r->mr)
        cr_assert_eq(T->mr_deregister(in->ctx, r->mr), 0);
    munmap(r->map, r->maplen);
}
