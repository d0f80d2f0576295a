/* tests/core/test_loader_memcpy.c: the loader tests, continued (the
 * Criterion suite "loader" of test_loader.c, same test program): the memcpy
 * example transport (plugins/memcpy) end to end through its vtable. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "desc/desc.h"
#include "loader_harness.h"
#include "plugin/plugin.h"
#include "tern/tern.h"
#include "base/util.h"

/* ---- the memcpy example transport ------------------------------------------------ */

typedef struct mc {
    tern_plugin_set set;
    tern_plugin *p;
    const tern_transport *t;
} mc;

/* memcpy hands slices back through the host service complete() (ABI 1.1,
 * no poll()); here they wait for mc_poll.  The loader routes complete() to
 * one function per set, so the queue is this test program's. */
static pthread_mutex_t mc_done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mc_done_cond = PTHREAD_COND_INITIALIZER;
static tern_slice *mc_done_head, *mc_done_tail;

static void mc_complete(tern_slice *s)
{
    s->plugin[0] = NULL;
    pthread_mutex_lock(&mc_done_lock);
    if (mc_done_tail)
        mc_done_tail->plugin[0] = s;
    else
        mc_done_head = s;
    mc_done_tail = s;
    pthread_cond_signal(&mc_done_cond);
    pthread_mutex_unlock(&mc_done_lock);
}

static int mc_poll(tern_slice **out, int max, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&mc_done_lock);
    while (!mc_done_head && pthread_cond_timedwait(&mc_done_cond, &mc_done_lock, &until) == 0)
        ;
    int n = 0;
    for (; n < max && mc_done_head; n++) {
        out[n] = mc_done_head;
        mc_done_head = mc_done_head->plugin[0];
        if (!mc_done_head)
            mc_done_tail = NULL;
    }
    pthread_mutex_unlock(&mc_done_lock);
    return n;
}

static void mc_load(mc *m)
{
    tcfg c;
    cfg_init(&c);
    cfg_add(&c, "memcpy", NULL, 1); /* by name, from the default directory */
    char err[2048] = "";
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &m->set, err, sizeof err), 0, "%s",
                 err);
    tern_plugins_set_completion(&m->set, mc_complete);
    m->p = &m->set.plugins[0];
    m->t = m->p->ops;
}

/* An endpoint of a towards b (a and b may be the same instance). */
static void *mc_connect(mc *a, mc *b)
{
    tern_desc *seg = tern_desc_new();
    cr_assert_eq(b->t->segment_describe(b->p->ctx, seg), 0);
    tern_ep_params prm = {.struct_size = sizeof prm, .peer_name = "self",
                          .peer_nic_path = "self@mem0", .local_nic_path = "self@mem0",
                          .peer_segment = seg};
    void *ep = NULL;
    char err[256] = "";
    cr_assert_eq(a->t->ep_open(a->p->ctx, &prm, &ep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a->t->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    tern_desc_free(seg);
    return ep;
}

static tern_slice *mc_run(mc *m, void *ep, tern_slice *s)
{
    tern_slice *sp[1] = {s}, *done[4];
    cr_assert_eq(m->t->submit(ep, sp, 1), 1);
    cr_assert_eq(mc_poll(done, 4, 1000), 1);
    cr_assert_eq(done[0], s);
    return done[0];
}

Test(loader, memcpy_transport_moves_bytes_and_checks_ranges)
{
    mc a;
    mc_load(&a);
    char want[PATH_MAX];
    cr_assert_not_null(realpath(TERN_BUILD_DIR "/lib/tern/libtern-memcpy.so", want));
    cr_assert_str_eq(a.p->path, want);
    cr_assert_eq(a.p->ndevices, 1);
    cr_assert_str_eq(a.p->devices[0].name, "mem0");
    cr_assert_not(a.p->polls, "memcpy hands slices back through complete()");
    cr_assert_eq(a.t->poll(a.p->ctx, NULL, 0, 0), TERN_ERR_NOT_SUPPORTED, "the default poll");

    static char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (char)(i * 7);
    tern_mr_keys ks, kd;
    void *ms, *md;
    char err[256];
    cr_assert_eq(a.t->mr_register(a.p->ctx, src, sizeof src, &ks, &ms, err, sizeof err), 0);
    cr_assert_eq(a.t->mr_register(a.p->ctx, dst, sizeof dst, &kd, &md, err, sizeof err), 0);
    cr_assert_eq(ks.ndev, 1);
    cr_assert_neq(ks.rkey[0], kd.rkey[0]);
    void *ep = mc_connect(&a, &a);

    tern_slice s = {.struct_size = sizeof s, .opcode = TERN_WRITE, .local = src + 100,
                    .remote = (uint64_t)(uintptr_t)(dst + 200), .length = 1000,
                    .lkey = ks.lkey[0], .rkey = kd.rkey[0]};
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, 0, "%s", s.errmsg);
    cr_assert_eq(s.transferred, 1000);
    cr_assert_eq(memcmp(dst + 200, src + 100, 1000), 0);

    memset(dst, 0, sizeof dst);
    s = (tern_slice){.struct_size = sizeof s, .opcode = TERN_READ, .local = dst,
                     .remote = (uint64_t)(uintptr_t)src, .length = sizeof src,
                     .lkey = kd.lkey[0], .rkey = ks.rkey[0]};
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, 0, "%s", s.errmsg);
    cr_assert_eq(memcmp(dst, src, sizeof src), 0);

    /* one byte past the registration, and a wrong key: refused, nothing copied */
    s.remote = (uint64_t)(uintptr_t)(src + 1);
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_RANGE);
    cr_assert(strstr(s.errmsg, "not registered with rkey"), "%s", s.errmsg);
    s.remote = (uint64_t)(uintptr_t)src;
    s.rkey = kd.rkey[0];
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_RANGE);
    s.rkey = ks.rkey[0];
    s.lkey = ks.lkey[0];
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_RANGE);
    cr_assert(strstr(s.errmsg, "local"), "%s", s.errmsg);

    tern_slice *done[1];
    cr_assert_eq(mc_poll(done, 1, 10), 0, "every slice came back exactly once");
    cr_assert_eq(a.t->mr_deregister(a.p->ctx, ms), 0);
    cr_assert_eq(a.t->mr_deregister(a.p->ctx, ms), TERN_ERR_NOT_FOUND);
    a.t->ep_close(ep);
    tern_plugins_unload(&a.set);
}

Test(loader, memcpy_between_two_instances_and_a_peer_that_left)
{
    mc a, b;
    mc_load(&a);
    mc_load(&b);
    static char src[256] = "from a to b", dst[256];
    tern_mr_keys ka, kb;
    void *ma, *mb;
    char err[256];
    cr_assert_eq(a.t->mr_register(a.p->ctx, src, sizeof src, &ka, &ma, err, sizeof err), 0);
    cr_assert_eq(b.t->mr_register(b.p->ctx, dst, sizeof dst, &kb, &mb, err, sizeof err), 0);
    void *ep = mc_connect(&a, &b);
    tern_slice s = {.struct_size = sizeof s, .opcode = TERN_WRITE, .local = src,
                    .remote = (uint64_t)(uintptr_t)dst, .length = sizeof src,
                    .lkey = ka.lkey[0], .rkey = kb.rkey[0]};
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, 0, "%s", s.errmsg);
    cr_assert_str_eq(dst, "from a to b");

    tern_plugins_unload(&b.set); /* the peer goes away */
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_CLOSED, "%s", s.errmsg);
    cr_assert(strstr(s.errmsg, "is gone"), "%s", s.errmsg);
    a.t->ep_close(ep);
    tern_plugins_unload(&a.set);
}

Test(loader, memcpy_refuses_another_process)
{
    mc a;
    mc_load(&a);
    tern_desc *seg = tern_desc_new();
    tern_desc_set_u64(seg, "pid", (uint64_t)getpid() + 1);
    tern_desc_set_u64(seg, "instance", 1);
    tern_ep_params prm = {.struct_size = sizeof prm, .peer_name = "10.0.0.1:12001",
                          .peer_segment = seg};
    void *ep = NULL;
    char err[256] = "";
    cr_assert_eq(a.t->ep_open(a.p->ctx, &prm, &ep, err, sizeof err), TERN_ERR_CONNECT);
    cr_assert(strstr(err, "only reaches the same process"), "%s", err);
    tern_desc *empty = tern_desc_new();
    prm.peer_segment = empty;
    cr_assert_eq(a.t->ep_open(a.p->ctx, &prm, &ep, err, sizeof err), TERN_ERR_PROTOCOL);
    tern_desc_free(seg);
    tern_desc_free(empty);
    tern_plugins_unload(&a.set);
}

/* Several submitters at once, completions collected by one thread: every
 * slice comes back exactly once, with the right bytes (the threading contract of transport.h). */
#define MC_THREADS 4
#define MC_SLICES 2000
#define MC_LEN 64

typedef struct mc_worker {
    mc *m;
    void *ep;
    char *src, *dst;
    uint64_t lkey, rkey;
    tern_slice *slices;
} mc_worker;

static void *mc_submitter(void *arg)
{
    mc_worker *w = arg;
    for (int i = 0; i < MC_SLICES;) {
        tern_slice *s = &w->slices[i];
        tern_slice *sp[1] = {s};
        int rc = w->m->t->submit(w->ep, sp, 1);
        if (rc < 0)
            return (void *)1;
        i += rc; /* 0: nothing taken, try again */
    }
    return NULL;
}

Test(loader, memcpy_concurrent_submitters_and_poller)
{
    mc a;
    mc_load(&a);
    static char src[MC_THREADS][MC_SLICES * MC_LEN], dst[MC_THREADS][MC_SLICES * MC_LEN];
    static tern_slice slices[MC_THREADS][MC_SLICES];
    mc_worker w[MC_THREADS];
    pthread_t th[MC_THREADS];
    char err[256];
    for (int t = 0; t < MC_THREADS; t++) {
        tern_mr_keys ks, kd;
        void *ms, *md;
        for (size_t i = 0; i < sizeof src[t]; i++)
            src[t][i] = (char)(i * 13 + t);
        cr_assert_eq(a.t->mr_register(a.p->ctx, src[t], sizeof src[t], &ks, &ms, err, 256), 0);
        cr_assert_eq(a.t->mr_register(a.p->ctx, dst[t], sizeof dst[t], &kd, &md, err, 256), 0);
        w[t] = (mc_worker){.m = &a, .ep = mc_connect(&a, &a), .src = src[t], .dst = dst[t],
                           .lkey = ks.lkey[0], .rkey = kd.rkey[0], .slices = slices[t]};
        for (int i = 0; i < MC_SLICES; i++)
            slices[t][i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                                        .local = src[t] + i * MC_LEN,
                                        .remote = (uint64_t)(uintptr_t)(dst[t] + i * MC_LEN),
                                        .length = MC_LEN, .lkey = w[t].lkey, .rkey = w[t].rkey,
                                        .status = 1};
    }
    for (int t = 0; t < MC_THREADS; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, mc_submitter, &w[t]), 0);
    static char seen[MC_THREADS][MC_SLICES];
    int got = 0;
    while (got < MC_THREADS * MC_SLICES) {
        tern_slice *done[64];
        int n = mc_poll(done, 64, 2000);
        cr_assert_gt(n, 0, "poll timed out after %d of %d slices", got, MC_THREADS * MC_SLICES);
        for (int k = 0; k < n; k++) {
            ptrdiff_t t = -1, i = -1;
            for (int u = 0; u < MC_THREADS; u++)
                if (done[k] >= slices[u] && done[k] < slices[u] + MC_SLICES)
                    t = u, i = done[k] - slices[u];
            cr_assert_geq(t, 0, "poll returned a slice nobody submitted");
            cr_assert_eq(seen[t][i]++, 0, "slice %td/%td returned twice", t, i);
            cr_assert_eq(done[k]->status, 0, "%s", done[k]->errmsg);
        }
        got += n;
    }
    for (int t = 0; t < MC_THREADS; t++) {
        void *rv;
        pthread_join(th[t], &rv);
        cr_assert_null(rv);
        cr_assert_eq(memcmp(src[t], dst[t], sizeof src[t]), 0);
        a.t->ep_close(w[t].ep);
    }
    tern_plugins_unload(&a.set);
}
