/* tests/transports/test_shm_transport.c: the same-host transport driven directly
 * through its vtable, with host services filled in here.  Two plugin
 * instances in this process run the handshake by hand (the active side's
 * fields go to the passive side and back) and copy between real memory;
 * forged peers (a fork()ed clone that holds the same table, a recycled pid,
 * another boot, a wrong table address) must be refused as unreachable. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "desc/desc.h"
#include "plugin_harness.h"
#include "tern/tern.h"
#include "tern/transport.h"

#define PLUGIN_PATH TERN_BUILD_DIR "/lib/tern/libtern-shm.so"

static void *g_dl;
static const tern_transport *T;

typedef struct inst {
    plugin_host ph; /* first: see plugin_harness.h */
    void *ctx;
} inst;

/* Completions from the plugin's workers: counted under a lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_done;
/* When set, the first completion closes this endpoint from the worker
 * thread that completes it (what the core does when it drops an endpoint
 * after a failure). */
static void *g_close_in_complete;
static int g_submitted; /* the core never closes an endpoint during submit */

static void h_complete(void *host, tern_slice *s)
{
    (void)host;
    pthread_mutex_lock(&g_lock);
    cr_assert_eq(s->core, (void *)s, "slice completed twice or foreign");
    s->core = NULL;
    g_done++;
    void *close_ep = g_close_in_complete;
    g_close_in_complete = NULL;
    pthread_cond_broadcast(&g_cond);
    while (close_ep && !g_submitted)
        pthread_cond_wait(&g_cond, &g_lock);
    pthread_mutex_unlock(&g_lock);
    if (close_ep)
        T->ep_close(close_ep);
}

static void load_plugin(void)
{
    T = plugin_load(PLUGIN_PATH, &g_dl);
    cr_assert_str_eq(T->name, "shm");
    cr_assert_eq(T->abi_minor, TERN_TRANSPORT_ABI_MINOR);
    cr_assert_null(T->poll, "shm hands slices back through complete()");
}

static void unload_plugin(void)
{
    if (g_dl)
        dlclose(g_dl);
    g_dl = NULL;
}

TestSuite(shm_transport, .init = load_plugin, .fini = unload_plugin, .timeout = 60);

static inst *inst_new(const char *k0, ...)
{
    inst *in = calloc(1, sizeof *in);
    va_list ap;
    va_start(ap, k0);
    in->ctx = plugin_host_start(&in->ph, T, 3000, h_complete, k0, ap);
    va_end(ap);
    return in;
}

static void inst_free(inst *in)
{
    T->fini(in->ctx);
    free(in);
}

static tern_desc *blob_of(inst *in)
{
    tern_desc *d = tern_desc_new();
    cr_assert_eq(T->segment_describe(in->ctx, d), 0);
    return d;
}

/* The active side's ep_open with this blob; returns the code (ep in *ep). */
static int open_active(inst *from, const tern_desc *blob, void **ep, char *err, size_t errlen)
{
    /* every harness instance is named 127.0.0.1:0: the proofs bind that name */
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "127.0.0.1:0",
                        .peer_segment = blob};
    return T->ep_open(from->ctx, &p, ep, err, errlen);
}

/* The passive side answers an active endpoint's fields; returns the reply
 * (caller frees) and the passive endpoint in *pep. */
static tern_desc *answer(inst *to, void *active_ep, void **pep)
{
    tern_desc *fields = tern_desc_new(), *empty = tern_desc_new(), *reply = tern_desc_new();
    cr_assert_eq(T->ep_describe(active_ep, fields), 0);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "127.0.0.1:0",
                        .peer_segment = empty, .passive = 1};
    char err[512] = "";
    cr_assert_eq(T->ep_open(to->ctx, &p, pep, err, sizeof err), 0, "passive open: %s", err);
    cr_assert_eq(T->ep_connect(*pep, fields, err, sizeof err), 0, "passive connect: %s", err);
    cr_assert_eq(T->ep_describe(*pep, reply), 0);
    tern_desc_free(fields);
    tern_desc_free(empty);
    return reply;
}

/* A full handshake from -> to; returns the connected active endpoint. */
static void *connect_pair(inst *from, inst *to, void **pep)
{
    tern_desc *blob = blob_of(to);
    void *ep = NULL;
    char err[512] = "";
    cr_assert_eq(open_active(from, blob, &ep, err, sizeof err), 0, "ep_open: %s", err);
    tern_desc *reply = answer(to, ep, pep);
    cr_assert_eq(T->ep_connect(ep, reply, err, sizeof err), 0, "ep_connect: %s", err);
    tern_desc_free(reply);
    tern_desc_free(blob);
    return ep;
}

/* Both endpoints of a pair closed, then both instances. */
static void pair_close(void *ep, void *pep, inst *a, inst *b)
{
    T->ep_close(ep);
    T->ep_close(pep);
    inst_free(a);
    inst_free(b);
}

static tern_slice *mk(int op, void *local, uint64_t lkey, uint64_t remote, uint64_t rkey,
                      uint64_t len)
{
    return plugin_slice_new(op, local, lkey, remote, rkey, len);
}

/* Submit n slices, wait (bounded) until every one came back once. */
static void run(void *ep, tern_slice **s, int n)
{
    pthread_mutex_lock(&g_lock);
    g_done = 0;
    pthread_mutex_unlock(&g_lock);
    cr_assert_eq(T->submit(ep, s, n), n);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&g_lock);
    int rc = 0;
    while (g_done < n && rc == 0)
        rc = pthread_cond_timedwait(&g_cond, &g_lock, &until);
    int got = g_done;
    pthread_mutex_unlock(&g_lock);
    cr_assert_eq(got, n, "only %d of %d slices came back within 20 s", got, n);
}

typedef struct region {
    uint8_t *map, *buf;
    size_t len;
    void *mr;
    uint64_t key;
} region;

/* len bytes registered in the middle of a mapping with 4 KiB canaries. */
static region reg(inst *in, size_t len)
{
    region r = {0};
    r.map = mmap(NULL, len + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(r.map != MAP_FAILED);
    memset(r.map, 0xC3, len + 8192);
    r.buf = r.map + 4096;
    r.len = len;
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(in->ctx, r.buf, len, &k, &r.mr, err, sizeof err), 0, "%s", err);
    r.key = k.rkey[0];
    return r;
}

static void canaries_intact(const region *r)
{
    for (size_t i = 0; i < 4096; i++) {
        cr_assert_eq(r->map[i], 0xC3, "canary below the buffer changed at %zu", i);
        cr_assert_eq(r->buf[r->len + i], 0xC3, "canary above the buffer changed at %zu", i);
    }
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 9));
}

Test(shm_transport, one_slice_is_spread_over_chunks_and_arrives_byte_exact)
{
    inst *a = inst_new("workers", "3", "chunk_size", "4096", NULL);
    inst *b = inst_new(NULL);
    void *pep = NULL, *ep = connect_pair(a, b, &pep);
    size_t n = (3u << 20) + 5;
    region src = reg(a, n), dst = reg(b, n), back = reg(a, n);
    fill(src.buf, n, 1);
    tern_slice *w = mk(1 /* WRITE */, src.buf, src.key, (uintptr_t)dst.buf, dst.key, n);
    run(ep, &w, 1);
    cr_assert_eq(w->status, 0, "%s", w->errmsg);
    cr_assert_eq(w->transferred, n);
    cr_assert_eq(memcmp(src.buf, dst.buf, n), 0);
    tern_slice *r = mk(0 /* READ */, back.buf, back.key, (uintptr_t)dst.buf, dst.key, n);
    run(ep, &r, 1);
    cr_assert_eq(r->status, 0, "%s", r->errmsg);
    cr_assert_eq(memcmp(src.buf, back.buf, n), 0);
    canaries_intact(&dst);
    canaries_intact(&back);
    char q[256];
    cr_assert_eq(T->query(a->ctx, "", q, sizeof q), 0);
    cr_assert(strstr(q, "workers=3") && strstr(q, "chunk=4096"), "%s", q);
    free(w);
    free(r);
    pair_close(ep, pep, a, b);
}

Test(shm_transport, default_workers_follow_the_core_count)
{
    inst *a = inst_new(NULL);
    char q[256], want[32];
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(want, sizeof want, "workers=%ld ", n < 1 ? 1 : n > 8 ? 8 : n);
    cr_assert_eq(T->query(a->ctx, "", q, sizeof q), 0);
    cr_assert(strstr(q, want), "expected %s in %s", want, q);
    inst_free(a);
}

Test(shm_transport, wrong_keys_and_deregistered_ranges_refused)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    void *pep = NULL, *ep = connect_pair(a, b, &pep);
    region src = reg(a, 65536), dst = reg(b, 65536);
    fill(src.buf, 65536, 2);
    memset(dst.buf, 0, 65536);
    tern_slice *s[3] = {
        mk(1, src.buf, src.key, (uintptr_t)dst.buf, dst.key + 1, 4096),       /* wrong rkey */
        mk(1, src.buf, src.key + 1, (uintptr_t)dst.buf, dst.key, 4096),       /* wrong lkey */
        mk(1, src.buf, src.key, (uintptr_t)dst.buf + 65000, dst.key, 4096),   /* past the end */
    };
    run(ep, s, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(s[i]->status, TERN_ERR_RANGE, "slice %d: %d %s", i, s[i]->status,
                     s[i]->errmsg);
        cr_assert(s[i]->errmsg[0]);
        free(s[i]);
    }
    for (int i = 0; i < 65536; i++)
        cr_assert_eq(dst.buf[i], 0, "a refused slice wrote the target");
    /* Deregistered on the target AFTER the endpoint read its table once. */
    tern_slice *ok = mk(1, src.buf, src.key, (uintptr_t)dst.buf, dst.key, 4096);
    run(ep, &ok, 1);
    cr_assert_eq(ok->status, 0, "%s", ok->errmsg);
    cr_assert_eq(T->mr_deregister(b->ctx, dst.mr), 0);
    memset(dst.buf, 0, 65536);
    tern_slice *gone = mk(1, src.buf, src.key, (uintptr_t)dst.buf, dst.key, 4096);
    run(ep, &gone, 1);
    cr_assert_eq(gone->status, TERN_ERR_RANGE, "%d %s", gone->status, gone->errmsg);
    for (int i = 0; i < 65536; i++)
        cr_assert_eq(dst.buf[i], 0, "a deregistered buffer was written");
    canaries_intact(&dst);
    free(ok);
    free(gone);
    pair_close(ep, pep, a, b);
}

/* The exact edges of the target's range check, both sides of each: a
 * slice that ends on the registration's last byte or starts on its first
 * is served; one byte past the end, or one before the start, is refused
 * and writes nothing (the canaries around the buffer stay). */
Test(shm_transport, range_edges_exact_in_one_byte_out)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    void *pep = NULL, *ep = connect_pair(a, b, &pep);
    region src = reg(a, 65536), dst = reg(b, 65536);
    fill(src.buf, 65536, 5);
    memset(dst.buf, 0, 65536);
    uintptr_t d = (uintptr_t)dst.buf;
    struct { uintptr_t at; int status; const char *what; } cases[] = {
        {d + 65536 - 4096, 0, "ends on the last byte"},
        {d, 0, "starts on the first byte"},
        {d + 65536 - 4095, TERN_ERR_RANGE, "one byte past the end"},
        {d - 1, TERN_ERR_RANGE, "one byte before the start"},
    };
    for (int i = 0; i < 4; i++) {
        tern_slice *s = mk(1, src.buf, src.key, cases[i].at, dst.key, 4096);
        run(ep, &s, 1);
        cr_assert_eq(s->status, cases[i].status, "%s: %d %s", cases[i].what, s->status,
                     s->errmsg);
        free(s);
    }
    cr_assert_eq(memcmp(dst.buf, src.buf, 4096), 0, "the first 4 KiB arrived");
    cr_assert_eq(memcmp(dst.buf + 65536 - 4096, src.buf, 4096), 0, "the last 4 KiB arrived");
    canaries_intact(&dst);
    /* the same edges on the local side: a READ into the last 4 KiB of the
     * source is served, one byte past it refused */
    tern_slice *in = mk(0, src.buf + 65536 - 4096, src.key, d, dst.key, 4096);
    run(ep, &in, 1);
    cr_assert_eq(in->status, 0, "%s", in->errmsg);
    tern_slice *past = mk(0, src.buf + 65536 - 4095, src.key, d, dst.key, 4096);
    run(ep, &past, 1);
    cr_assert_eq(past->status, TERN_ERR_RANGE, "%d %s", past->status, past->errmsg);
    canaries_intact(&src);
    free(in);
    free(past);
    pair_close(ep, pep, a, b);
}

/* Start time of a process (field 22 of /proc/PID/stat). */
static uint64_t start_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')') + 1;
    for (int i = 3; i < 22; i++)
        p = strchr(p + 1, ' ');
    return strtoull(p + 1, NULL, 10);
}

/* A fork()ed clone holds the very same table (same address, instance,
 * entries), so every published fact checks out for it; only the handshake
 * proof tells it from the engine that answered.  A descriptor naming the
 * clone, with the real engine answering the handshake, must be refused. */
Test(shm_transport, clone_with_the_same_table_fails_the_handshake_proof)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    pid_t clone = fork();
    cr_assert_geq(clone, 0);
    if (clone == 0) {
        pause();
        _exit(0);
    }
    tern_desc *blob = blob_of(b);
    cr_assert_eq(tern_desc_set_u64(blob, "pid", (uint64_t)clone), 0);
    cr_assert_eq(tern_desc_set_u64(blob, "start_time", start_of(clone)), 0);
    void *ep = NULL, *pep = NULL;
    char err[512] = "";
    cr_assert_eq(open_active(a, blob, &ep, err, sizeof err), 0,
                 "the clone passes the published checks: %s", err);
    tern_desc *reply = answer(b, ep, &pep);
    cr_assert_eq(tern_desc_set_u64(reply, "pid", (uint64_t)clone), 0); /* the forger's reply */
    int rc = T->ep_connect(ep, reply, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_UNREACHABLE, "a clone was accepted: %d %s", rc, err);
    cr_assert(strstr(err, "nonce"), "%s", err);
    T->ep_close(ep);
    T->ep_close(pep);
    tern_desc_free(reply);
    tern_desc_free(blob);
    kill(clone, SIGKILL);
    waitpid(clone, NULL, 0);
    /* the honest handshake still works */
    void *pep2 = NULL, *ep2 = connect_pair(a, b, &pep2);
    T->ep_close(ep2);
    T->ep_close(pep2);
    inst_free(a);
    inst_free(b);
}

static void expect_unreachable(inst *a, tern_desc *blob, const char *needle)
{
    void *ep = NULL;
    char err[512] = "";
    int rc = open_active(a, blob, &ep, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_UNREACHABLE, "expected UNREACHABLE (%s), got %d: %s", needle, rc,
                 err);
    cr_assert(strstr(err, needle), "expected '%s' in: %s", needle, err);
}

Test(shm_transport, forged_or_stale_identities_are_unreachable)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    tern_desc *d = blob_of(b);
    tern_desc_set_u64(d, "start_time", 12345);
    expect_unreachable(a, d, "reused");
    tern_desc_free(d);

    d = blob_of(b);
    tern_desc_set_str(d, "boot_id", "00000000-0000-0000-0000-000000000000");
    expect_unreachable(a, d, "another host or boot");
    tern_desc_free(d);

    d = blob_of(b);
    tern_desc_set_u64(d, "pid_ns", 1);
    expect_unreachable(a, d, "pid namespace");
    tern_desc_free(d);

    d = blob_of(b);
    uint64_t table = 0;
    tern_desc_get_u64(d, "table", &table);
    tern_desc_set_u64(d, "table", table + 4096);
    expect_unreachable(a, d, "holds no shm table");
    tern_desc_free(d);

    d = blob_of(b);
    tern_desc_set_u64(d, "instance", 42);
    expect_unreachable(a, d, "holds no shm table");
    tern_desc_free(d);

    /* a process that exited */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    uint64_t st = start_of(dead);
    waitpid(dead, NULL, 0);
    d = blob_of(b);
    tern_desc_set_u64(d, "pid", (uint64_t)dead);
    tern_desc_set_u64(d, "start_time", st);
    expect_unreachable(a, d, "gone");
    tern_desc_free(d);
    inst_free(a);
    inst_free(b);
}

Test(shm_transport, close_with_slices_queued_returns_each_once)
{
    inst *a = inst_new("workers", "1", "chunk_size", "4096", NULL), *b = inst_new(NULL);
    void *pep = NULL, *ep = connect_pair(a, b, &pep);
    size_t n = 8u << 20;
    region src = reg(a, n), dst = reg(b, n);
    enum { K = 64 };
    tern_slice *s[K];
    for (int i = 0; i < K; i++)
        s[i] = mk(1, src.buf, src.key, (uintptr_t)dst.buf, dst.key, n);
    pthread_mutex_lock(&g_lock);
    g_done = 0;
    pthread_mutex_unlock(&g_lock);
    cr_assert_eq(T->submit(ep, s, K), K);
    T->ep_close(ep); /* waits for the chunk being copied; the rest fail */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&g_lock);
    while (g_done < K && pthread_cond_timedwait(&g_cond, &g_lock, &until) == 0)
        ;
    int got = g_done;
    pthread_mutex_unlock(&g_lock);
    cr_assert_eq(got, K, "%d of %d slices came back after ep_close", got, K);
    int closed = 0;
    for (int i = 0; i < K; i++) {
        closed += s[i]->status == TERN_ERR_CLOSED;
        free(s[i]);
    }
    cr_assert_gt(closed, 0, "512 MiB were not copied before ep_close returned");
    T->ep_close(pep);
    inst_free(a);
    inst_free(b);
}

/* One worker; the first completion closes the endpoint from that worker
 * while later slices are still queued for it: ep_close must not wait for
 * them (only this worker could run them), and each must still come back. */
Test(shm_transport, close_from_a_worker_inside_complete_does_not_hang)
{
    inst *a = inst_new("workers", "1", NULL), *b = inst_new(NULL);
    void *pep = NULL, *ep = connect_pair(a, b, &pep);
    size_t n = 1u << 20;
    region src = reg(a, n), dst = reg(b, n);
    enum { K = 16 };
    tern_slice *s[K];
    for (int i = 0; i < K; i++)
        s[i] = mk(1, src.buf, src.key, (uintptr_t)dst.buf, dst.key, n);
    pthread_mutex_lock(&g_lock);
    g_done = 0;
    g_submitted = 0;
    g_close_in_complete = ep;
    pthread_mutex_unlock(&g_lock);
    cr_assert_eq(T->submit(ep, s, K), K);
    pthread_mutex_lock(&g_lock);
    g_submitted = 1;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&g_lock);
    while (g_done < K && pthread_cond_timedwait(&g_cond, &g_lock, &until) == 0)
        ;
    int got = g_done;
    pthread_mutex_unlock(&g_lock);
    cr_assert_eq(got, K, "%d of %d slices came back after ep_close from a worker", got, K);
    cr_assert_eq(s[0]->status, 0, "%s", s[0]->errmsg);
    for (int i = 0; i < K; i++)
        free(s[i]);
    T->ep_close(pep);
    inst_free(a);
    inst_free(b);
}

/* The passive endpoint copies towards the initiator only when the
 * initiator's own table proved the handshake (its proof slot holds the
 * target's instance and the nonce it sent). */
Test(shm_transport, passive_endpoint_copies_back_only_to_a_proven_initiator)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    region mine = reg(a, 65536), theirs = reg(b, 65536);
    memset(mine.buf, 0, 65536);
    fill(theirs.buf, 65536, 9);
    /* honest: b writes into a's memory through its passive endpoint */
    void *pep = NULL, *ep = connect_pair(a, b, &pep);
    tern_slice *w = mk(1, theirs.buf, theirs.key, (uintptr_t)mine.buf, mine.key, 65536);
    run(pep, &w, 1);
    cr_assert_eq(w->status, 0, "%s", w->errmsg);
    cr_assert_eq(memcmp(mine.buf, theirs.buf, 65536), 0);
    free(w);
    T->ep_close(ep);
    T->ep_close(pep);
    /* forged: the fields claim a nonce a's table does not hold */
    tern_desc *blob = blob_of(b), *fields = tern_desc_new(), *empty = tern_desc_new();
    char err[512] = "";
    cr_assert_eq(open_active(a, blob, &ep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(T->ep_describe(ep, fields), 0);
    uint64_t n0 = 0;
    tern_desc_get_u64(fields, "nonce0", &n0);
    tern_desc_set_u64(fields, "nonce0", n0 ^ 1);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "127.0.0.1:0",
                        .peer_segment = empty, .passive = 1};
    cr_assert_eq(T->ep_open(b->ctx, &p, &pep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(T->ep_connect(pep, fields, err, sizeof err), 0,
                 "the passive side answers even when it cannot prove the initiator: %s", err);
    memset(mine.buf, 0, 65536);
    tern_slice *f = mk(1, theirs.buf, theirs.key, (uintptr_t)mine.buf, mine.key, 65536);
    cr_assert_eq(T->submit(pep, &f, 1), TERN_ERR_UNREACHABLE,
                 "a passive endpoint copied towards an unproven initiator");
    for (int i = 0; i < 65536; i++)
        cr_assert_eq(mine.buf[i], 0, "the unproven initiator's memory was written");
    free(f);
    T->ep_close(ep);
    T->ep_close(pep);
    tern_desc_free(blob);
    tern_desc_free(fields);
    tern_desc_free(empty);
    inst_free(a);
    inst_free(b);
}

/* A relay: the initiator asked for segment X, a process posing as X passed
 * its handshake on to engine b, and b answered.  b's proof is bound to its
 * own segment name, so the initiator, checking the name it asked for,
 * refuses it and nothing is written into b. */
Test(shm_transport, relayed_handshake_is_refused_by_the_initiator)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    region mine = reg(a, 65536), theirs = reg(b, 65536);
    fill(mine.buf, 65536, 3);
    memset(theirs.buf, 0, 65536);
    tern_desc *blob = blob_of(b); /* b's identity, served as X's */
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "127.0.0.1:9", /* X */
                        .peer_segment = blob};
    void *ep = NULL, *pep = NULL;
    char err[512] = "";
    cr_assert_eq(T->ep_open(a->ctx, &p, &ep, err, sizeof err), 0, "%s", err);
    tern_desc *reply = answer(b, ep, &pep); /* b answers as itself */
    int rc = T->ep_connect(ep, reply, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_UNREACHABLE, "a relayed handshake was accepted (%d): %s", rc, err);
    cr_assert(strstr(err, "127.0.0.1:9"), "the refusal names the segment asked for: %s", err);
    tern_slice *w = mk(1, mine.buf, mine.key, (uintptr_t)theirs.buf, theirs.key, 65536);
    cr_assert_lt(T->submit(ep, &w, 1), 0, "an endpoint whose handshake failed took a slice");
    for (int i = 0; i < 65536; i++)
        cr_assert_eq(theirs.buf[i], 0, "bytes landed in b through the relay");
    free(w);
    T->ep_close(ep);
    T->ep_close(pep);
    tern_desc_free(reply);
    tern_desc_free(blob);
    inst_free(a);
    inst_free(b);
}

/* ---- the relay (transports/shm/shm_relay.c, docs/protocol.md "The relay") ---- */

static unsigned long long query_num(inst *in, const char *key)
{
    char q[512], *at;
    cr_assert_eq(T->query(in->ctx, "", q, sizeof q), 0);
    cr_assert(at = strstr(q, key), "no %s in \"%s\"", key, q);
    return strtoull(at + strlen(key) + 1, NULL, 10);
}

/* Private memory on both sides: chunks of a slot or more go through the
 * target's relay (counted on both sides), shorter ones through cross-memory
 * attach; byte-exact both ways at odd offsets and lengths.  relay_slots 0
 * turns the relay off. */
Test(shm_transport, private_memory_goes_through_the_relay_byte_exact)
{
    for (int off = 0; off < 2; off++) {
        inst *a = off ? inst_new("relay_slots", "0", NULL)
                      : inst_new("workers", "2", "relay_slots", "4", "relay_slot_size", "8192",
                                 NULL);
        inst *b = inst_new(NULL);
        void *pep = NULL, *ep = connect_pair(a, b, &pep);
        size_t n = (5u << 20) + 4099;
        region src = reg(a, n + 3), dst = reg(b, n + 5), back = reg(a, n + 7);
        fill(src.buf, n + 3, 3);
        tern_slice *w = mk(1, src.buf + 3, src.key, (uintptr_t)dst.buf + 5, dst.key, n);
        run(ep, &w, 1);
        cr_assert_eq(w->status, 0, "%s", w->errmsg);
        cr_assert_eq(memcmp(src.buf + 3, dst.buf + 5, n), 0);
        tern_slice *r = mk(0, back.buf + 7, back.key, (uintptr_t)dst.buf + 5, dst.key, n);
        run(ep, &r, 1);
        cr_assert_eq(r->status, 0, "%s", r->errmsg);
        cr_assert_eq(memcmp(src.buf + 3, back.buf + 7, n), 0);
        canaries_intact(&dst);
        canaries_intact(&back);
        unsigned long long relayed = query_num(a, "relay_bytes"), cma = query_num(a, "cma_bytes");
        unsigned long long served = query_num(b, "relay_served_bytes");
        if (off) {
            cr_assert_eq(relayed, 0, "relay_slots 0 still used the relay");
            cr_assert_eq(cma, 2 * n);
        } else {
            cr_assert_gt(relayed, 2 * n - 2 * (256u << 10), "only %llu bytes relayed", relayed);
            cr_assert_eq(relayed + cma, 2 * n);
            cr_assert_eq(served, relayed, "target served %llu, initiator relayed %llu", served,
                         relayed);
        }
        free(w);
        free(r);
        pair_close(ep, pep, a, b);
    }
}

/* A ring as docs/protocol.md lays it out, made here by hand. */
#define RING_MAGIC 0x31594C52534E5254ULL
typedef struct ring_head {
    uint64_t magic;
    uint32_t rings, slots, slot_size, reserved0;
    uint32_t bell, asleep, gone, reserved[7];
} ring_head;
typedef struct ring_slot {
    uint32_t state, op;
    uint64_t key, addr, len;
    int32_t status;
    uint32_t reserved[7];
} ring_slot;

typedef struct ring {
    int fd;
    uint64_t ino;
    uint8_t *map;
    ring_slot *slot;
    uint8_t *data;
} ring;

/* One ring of 4 slots of 4 KiB; bad: 1 not sealed, 2 bad magic, 3 shorter
 * than its geometry says. */
static ring ring_make(int bad)
{
    ring g = {0};
    size_t size = 4096 + 4 * 4096;
    g.fd = memfd_create("test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    cr_assert(g.fd >= 0);
    cr_assert_eq(ftruncate(g.fd, (off_t)(bad == 3 ? size - 4096 : size)), 0);
    if (bad != 1)
        cr_assert_eq(fcntl(g.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    g.map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, g.fd, 0);
    cr_assert(g.map != MAP_FAILED);
    ring_head *h = (ring_head *)g.map;
    h->magic = bad == 2 ? RING_MAGIC + 1 : RING_MAGIC;
    h->rings = 1;
    h->slots = 4;
    h->slot_size = 4096;
    g.slot = (ring_slot *)(g.map + sizeof *h);
    g.data = g.map + 4096;
    struct stat st;
    cr_assert_eq(fstat(g.fd, &st), 0);
    g.ino = (uint64_t)st.st_ino;
    return g;
}

/* Posts slot i and waits (bounded) for the answer; returns its status. */
static int ring_post(ring *g, unsigned i, uint32_t op, uint64_t key, uint64_t addr, uint64_t len)
{
    ring_slot *s = &g->slot[i];
    s->op = op;
    s->key = key;
    s->addr = addr;
    s->len = len;
    s->status = 12345;
    __atomic_store_n(&s->state, 1 /* POSTED */, __ATOMIC_RELEASE);
    for (int k = 0; k < 4000 && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != 2; k++)
        usleep(500); /* the relay naps 100 ms at most when nobody rings its bell */
    cr_assert_eq(__atomic_load_n(&s->state, __ATOMIC_ACQUIRE), 2, "slot %u never answered", i);
    int st = s->status;
    __atomic_store_n(&s->state, 0 /* FREE */, __ATOMIC_RELEASE);
    return st;
}

/* The target serves a proven initiator's ring: a ring not sealed, with a
 * bad head, or shorter than its geometry is not served (the reply says no
 * relay); a served ring's every request is checked against the target's own
 * table: a bad opcode, a length over a slot, a range past a registration's
 * end or under a wrong key is answered with an error and moves nothing. */
Test(shm_transport, the_relay_checks_every_request_of_a_hostile_ring)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    region dst = reg(b, 16384);
    for (int bad = 3; bad >= 0; bad--) {
        tern_desc *blob = blob_of(b), *fields = tern_desc_new(), *reply = tern_desc_new();
        tern_desc *empty = tern_desc_new();
        void *ep = NULL, *pep = NULL;
        char err[512] = "";
        cr_assert_eq(open_active(a, blob, &ep, err, sizeof err), 0, "%s", err);
        cr_assert_eq(T->ep_describe(ep, fields), 0);
        ring g = ring_make(bad);
        cr_assert_eq(tern_desc_set_u64(fields, "relay_fd", (uint64_t)g.fd), 0);
        cr_assert_eq(tern_desc_set_u64(fields, "relay_ino", g.ino), 0);
        tern_ep_params p = {.struct_size = sizeof p, .peer_name = "127.0.0.1:0",
                            .peer_segment = empty, .passive = 1};
        cr_assert_eq(T->ep_open(b->ctx, &p, &pep, err, sizeof err), 0, "%s", err);
        cr_assert_eq(T->ep_connect(pep, fields, err, sizeof err), 0, "%s", err);
        cr_assert_eq(T->ep_describe(pep, reply), 0);
        uint64_t relay = 0;
        int has = tern_desc_get_u64(reply, "relay", &relay) == 0;
        if (bad) {
            cr_assert(!has, "ring variant %d was served", bad);
        } else {
            cr_assert(has && relay == 1, "a good ring was not served");
            uint64_t base = (uintptr_t)dst.buf;
            memset(g.data, 0x5A, 4 * 4096);
            cr_assert_eq(ring_post(&g, 0, 7, dst.key, base, 16), TERN_ERR_INVAL);
            cr_assert_eq(ring_post(&g, 1, 1, dst.key, base, 4097), TERN_ERR_INVAL);
            cr_assert_eq(ring_post(&g, 2, 1, dst.key, base, 0), TERN_ERR_INVAL);
            cr_assert_eq(ring_post(&g, 3, 1, dst.key, base + 16384 - 100, 200), TERN_ERR_RANGE);
            cr_assert_eq(ring_post(&g, 0, 1, dst.key + 99, base, 16), TERN_ERR_RANGE);
            cr_assert_eq(ring_post(&g, 1, 0, dst.key, base - 1, 16), TERN_ERR_RANGE);
            canaries_intact(&dst);
            for (size_t i = 0; i < 16384; i++)
                cr_assert_eq(dst.buf[i], 0xC3, "a refused request wrote byte %zu", i);
            /* and a good WRITE then READ through the same ring */
            fill(g.data + 2 * 4096, 4096, 9);
            cr_assert_eq(ring_post(&g, 2, 1, dst.key, base + 8192, 4096), 0);
            cr_assert_eq(memcmp(dst.buf + 8192, g.data + 2 * 4096, 4096), 0);
            memset(g.data + 3 * 4096, 0, 4096);
            cr_assert_eq(ring_post(&g, 3, 0, dst.key, base + 8192, 4096), 0);
            cr_assert_eq(memcmp(dst.buf + 8192, g.data + 3 * 4096, 4096), 0);
            canaries_intact(&dst);
        }
        T->ep_close(pep);
        if (!bad) /* the relay says it is gone, so a copier waiting on it stops */
            cr_assert_eq(((ring_head *)g.map)->gone, 1);
        T->ep_close(ep);
        munmap(g.map, 4096 + 4 * 4096);
        close(g.fd);
        tern_desc_free(blob);
        tern_desc_free(fields);
        tern_desc_free(reply);
        tern_desc_free(empty);
    }
    inst_free(a);
    inst_free(b);
}
