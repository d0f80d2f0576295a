/* bench/bench_select.c (tern-bench-select): nanoseconds per
 * tern_topology_select call and per full two-level tern_path_choose, next to
 * a baseline measured in the same run: the reference's pick,
 * preferred[random() % n] (libc random(), which takes a lock).
 *
 * Usage: tern-bench-select [iterations]   (default 2,000,000; best of 3 runs)
 * The topology is the 4 NUMA nodes x 8 NICs matrix of the test fixtures. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "desc/segment_desc.h"
#include "datapath/route.h"
#include "host/topology.h"
#include "base/util.h"

static const char *MATRIX =
    "{\"cpu:0\":[[\"mlx5_0\",\"mlx5_1\"],[\"mlx5_2\",\"mlx5_3\",\"mlx5_4\",\"mlx5_5\",\"mlx5_6\","
    "\"mlx5_7\"]],"
    "\"cpu:1\":[[\"mlx5_2\",\"mlx5_3\"],[\"mlx5_0\",\"mlx5_1\",\"mlx5_4\",\"mlx5_5\",\"mlx5_6\","
    "\"mlx5_7\"]],"
    "\"cpu:2\":[[\"mlx5_4\"],[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\",\"mlx5_5\",\"mlx5_6\","
    "\"mlx5_7\"]],"
    "\"cpu:3\":[[\"mlx5_6\",\"mlx5_7\"],[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\",\"mlx5_4\","
    "\"mlx5_5\"]],"
    "\"*\":[[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\",\"mlx5_4\",\"mlx5_5\",\"mlx5_6\","
    "\"mlx5_7\"],[]]}";

#define NBUF 64
#define NDEV 8

static volatile long sink;

typedef struct side {
    tern_device_desc dev[NDEV];
    tern_buffer_keys keys[NBUF];
    tern_buffer_desc buf[NBUF];
    tern_seg_transport tr;
    tern_segment_desc seg;
    tern_topology *topo;
} side;

static tern_topology *make_topo(int policy)
{
    char err[256];
    tern_topology *t = NULL;
    if (tern_topology_from_json(MATRIX, NULL, 0, policy, &t, err, sizeof err)) {
        fprintf(stderr, "tern-bench-select: %s\n", err);
        exit(1);
    }
    return t;
}

/* A segment with NBUF buffers of 1 MiB spread over the 4 nodes. */
static void make_side(side *s, const char *name, uint64_t base)
{
    memset(s, 0, sizeof *s);
    s->topo = make_topo(TERN_SELECT_RANDOM);
    for (int d = 0; d < NDEV; d++)
        snprintf(s->dev[d].name, sizeof s->dev[d].name, "mlx5_%d", d);
    for (int i = 0; i < NBUF; i++) {
        snprintf(s->keys[i].transport, sizeof s->keys[i].transport, "rdma");
        s->keys[i].ndev = NDEV;
        for (int d = 0; d < NDEV; d++) {
            s->keys[i].lkey[d] = (uint64_t)(i * 100 + d);
            s->keys[i].rkey[d] = (uint64_t)(i * 100 + d + 50);
        }
        snprintf(s->buf[i].location, sizeof s->buf[i].location, "cpu:%d", i % 4);
        s->buf[i].addr = base + (uint64_t)i * (1u << 20);
        s->buf[i].length = 1u << 20;
        s->buf[i].keys = &s->keys[i];
        s->buf[i].nkeys = 1;
    }
    snprintf(s->tr.name, sizeof s->tr.name, "rdma");
    s->tr.devices = s->dev;
    s->tr.ndevices = NDEV;
    s->tr.topology = s->topo;
    snprintf(s->seg.name, sizeof s->seg.name, "%s", name);
    s->seg.buffers = s->buf;
    s->seg.nbuffers = NBUF;
    s->seg.transports = &s->tr;
    s->seg.ntransports = 1;
}

static double per_call(uint64_t t0, long n) { return (double)(tern_now_ns() - t0) / (double)n; }

/* Best of 3 runs: the machine is shared, the minimum is the least disturbed. */
#define BEST3(var, expr)                                     \
    do {                                                     \
        var = (expr);                                        \
        for (int rep_ = 1; rep_ < 3; rep_++) {               \
            double v_ = (expr);                              \
            if (v_ < var)                                    \
                var = v_;                                    \
        }                                                    \
    } while (0)

static double bench_baseline(long n)
{
    const int preferred[2] = {6, 7};
    long acc = 0;
    uint64_t t0 = tern_now_ns();
    for (long i = 0; i < n; i++)
        acc += preferred[random() % 2];
    sink = acc;
    return per_call(t0, n);
}

static double bench_select(tern_topology *t, const char *loc, int retry_mod, long n)
{
    long acc = 0;
    uint64_t t0 = tern_now_ns();
    for (long i = 0; i < n; i++)
        acc += tern_topology_select(t, loc, retry_mod ? (int)(i % retry_mod) + 1 : 0, NULL);
    sink = acc;
    return per_call(t0, n);
}

static double bench_path(side *l, side *p, long n)
{
    char err[256];
    tern_path path;
    long acc = 0;
    uint64_t t0 = tern_now_ns();
    for (long i = 0; i < n; i++) {
        uint64_t off = (uint64_t)(i % NBUF) * (1u << 20) + 4096;
        if (tern_path_choose(&l->seg, l->topo, &p->seg, p->topo, "rdma", l->buf[0].addr + off,
                             p->buf[0].addr + off, 65536, 0, &path, err, sizeof err)) {
            fprintf(stderr, "tern-bench-select: path choice failed: %s\n", err);
            exit(1);
        }
        acc += path.local_dev + path.peer_dev;
    }
    sink = acc;
    return per_call(t0, n);
}

struct mt_arg {
    tern_topology *t;
    long n;
    double ns;
};

static void *mt_thread(void *p)
{
    struct mt_arg *a = p;
    a->ns = bench_select(a->t, "cpu:3", 0, a->n);
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    if (n <= 0) {
        fprintf(stderr, "usage: tern-bench-select [iterations > 0]\n");
        return 2;
    }
    srandom(1);
    tern_topology *rnd = make_topo(TERN_SELECT_RANDOM);
    tern_topology *rr = make_topo(TERN_SELECT_ROUND_ROBIN);
    side l, p;
    make_side(&l, "10.0.0.1:12001", 0x7f0000000000ULL);
    make_side(&p, "10.0.0.2:12001", 0x7e0000000000ULL);

    double base, sel, selrr, selretry, selwild, seldown, path;
    bench_baseline(n / 10); /* warm up */
    BEST3(base, bench_baseline(n));
    BEST3(sel, bench_select(rnd, "cpu:3", 0, n));
    BEST3(selrr, bench_select(rr, "cpu:3", 0, n));
    BEST3(selretry, bench_select(rnd, "cpu:3", 8, n));
    BEST3(selwild, bench_select(rnd, "gpu:9", 0, n));
    tern_topology_mark_down(rnd, 6, 1);
    BEST3(seldown, bench_select(rnd, "cpu:3", 0, n));
    tern_topology_mark_down(rnd, 6, 0);
    BEST3(path, bench_path(&l, &p, n));

    struct mt_arg a[2] = {{rnd, n, 0}, {rnd, n, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, mt_thread, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);

    printf("tern-bench-select: %ld calls each, best of 3; topology 4 nodes x 8 NICs; "
           "64 buffers a side\n", n);
    printf("%-46s %8.1f ns/call  (1.00x)\n", "baseline: preferred[random() % n]", base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "select retry 0, random", sel, sel / base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "select retry 0, round-robin", selrr, selrr / base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "select retry 1..8 (ordered walk)", selretry,
           selretry / base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "select unknown location -> \"*\"", selwild,
           selwild / base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "select retry 0, one preferred device down",
           seldown, seldown / base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "select, 2 threads on one topology (each)",
           (a[0].ns + a[1].ns) / 2, (a[0].ns + a[1].ns) / 2 / base);
    printf("%-46s %8.1f ns/call  (%.2fx)\n", "path_choose (two-level, 64 buffers a side)", path,
           path / base);
    tern_topology_free(rnd);
    tern_topology_free(rr);
    tern_topology_free(l.topo);
    tern_topology_free(p.topo);
    return 0;
}
