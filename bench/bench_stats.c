/* bench/bench_stats.c: what counting statistics costs on the data path:
 * the same requests in one run with
 * `stats: true` (the default) and with `stats: false`, over the
 * memcpy transport (it copies inside submit() and completes at once, so
 * nothing hides the core's own cost), at 8 B and 64 KiB.  One engine
 * pair, counting switched on and off between rounds (the run-time switch
 * behind `stats: false`), so both halves run on the same engines,
 * threads and buffers.
 *
 *   tern-bench-stats [ops per round] [rounds]     (default 20000, 15)
 *
 * Rounds alternate which goes first; each round gives the mean CPU time
 * of the submitting thread per request, on and off; the report is the
 * median of the rounds for each and the overhead (on / off - 1), and the
 * same for the fastest rounds.  A request: one batch of 16
 * requests submitted and waited for, so the figure is per request of a
 * batch, as an application moves data (alloc and free once per batch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_state.h"
#include "obs/stats.h"
#include "tern/tern.h"

#define BATCH 16
#define BUF (BATCH * 65536)

typedef struct pair {
    tern_engine *a, *b;
    char *src, *dst;
    tern_segment_id seg;
} pair;

/* The calling thread's CPU time: the memcpy transport copies and
 * completes on the submitting thread, so this is the request's whole cost,
 * and a machine loaded by other processes (preemption) disturbs it far
 * less than the wall clock. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int pair_open(pair *p, int stats)
{
    char yaml[256], err[1024];
    snprintf(yaml, sizeof yaml, "server_name: 127.0.0.1:0\ntransports:\n  - name: memcpy\n"
             "log_level: warn\nstats: %s\n", stats ? "true" : "false");
    p->a = tern_engine_create_from_yaml(yaml, "bench", err, sizeof err);
    p->b = p->a ? tern_engine_create_from_yaml(yaml, "bench", err, sizeof err) : NULL;
    if (!p->b)
        return fprintf(stderr, "engine: %s\n", err), -1;
    p->src = calloc(1, BUF);
    p->dst = calloc(1, BUF);
    if (tern_register_memory(p->a, p->src, BUF, NULL) ||
        tern_register_memory(p->b, p->dst, BUF, NULL))
        return fprintf(stderr, "register: %s\n", tern_engine_last_error(p->a)), -1;
    p->seg = tern_segment_open(p->a, tern_engine_server_name(p->b));
    return p->seg < 0 ? -1 : 0;
}

static void pair_close(pair *p)
{
    tern_engine_destroy(p->a);
    tern_engine_destroy(p->b);
    free(p->src);
    free(p->dst);
}

/* Mean ns per request over n requests of len bytes, in batches of BATCH. */
static double round_ns(pair *p, uint64_t len, size_t n)
{
    tern_request r[BATCH];
    for (int i = 0; i < BATCH; i++)
        r[i] = (tern_request){.opcode = TERN_WRITE, .local = p->src + i * len,
                              .segment = p->seg, .remote = (uintptr_t)p->dst + i * len,
                              .length = len};
    uint64_t t0 = now_ns();
    for (size_t done = 0; done < n; done += BATCH) {
        tern_batch *bt = tern_batch_alloc(p->a, BATCH);
        tern_batch_submit(bt, r, BATCH);
        if (tern_batch_wait(bt, 10000) != 0) {
            fprintf(stderr, "wait: %s\n", tern_engine_last_error(p->a));
            exit(1);
        }
        tern_batch_free(bt);
    }
    return (double)(now_ns() - t0) / (double)n;
}

static double round_on(pair *p, int on, uint64_t len, size_t n)
{
    tern_stats_enable(p->a->stats, on);
    return round_ns(p, len, n);
}

static void measure(pair *p, uint64_t len, size_t ops, int rounds)
{
    double *von = calloc((size_t)rounds, sizeof *von), *voff = calloc((size_t)rounds, sizeof *voff);
    round_on(p, 1, len, ops / 4); /* warm up */
    for (int k = 0; k < rounds; k++) {
        if (k & 1) {
            voff[k] = round_on(p, 0, len, ops);
            von[k] = round_on(p, 1, len, ops);
        } else {
            von[k] = round_on(p, 1, len, ops);
            voff[k] = round_on(p, 0, len, ops);
        }
    }
    qsort(von, (size_t)rounds, sizeof *von, cmp_d);
    qsort(voff, (size_t)rounds, sizeof *voff, cmp_d);
    double a = von[rounds / 2], b = voff[rounds / 2];
    printf("%6llu B WRITE: stats on %7.0f CPU ns/request, off %7.0f (medians of %d rounds of %zu): "
           "overhead %+.2f %%; fastest rounds %7.0f vs %7.0f: %+.2f %%\n",
           (unsigned long long)len, a, b, rounds, ops, (a / b - 1) * 100, von[0], voff[0],
           (von[0] / voff[0] - 1) * 100);
    free(von);
    free(voff);
}

int main(int argc, char **argv)
{
    size_t ops = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    ops -= ops % BATCH;
    if (!ops || rounds < 1)
        return fprintf(stderr, "usage: tern-bench-stats [ops per round] [rounds]\n"), 64;
    pair p;
    if (pair_open(&p, 1))
        return 1;
    printf("tern-bench-stats: memcpy transport, batches of %d, one thread\n", BATCH);
    measure(&p, 8, ops, rounds);
    measure(&p, 65536, ops / 8, rounds);
    pair_close(&p);
    return 0;
}
