/* bench/bench_core_path.c: what the core's own data path costs per small
 * operation, with a transport that costs nothing (plugins/memcpy copies
 * inside submit() and calls complete() at once), beside a baseline
 * measured in the same run: the same 8-byte copy plus the lock, condition
 * broadcast and wait a completion needs at the least.
 *
 *   tern-bench-core-path [ops]      (default 200000)
 *
 * Prints p50 and p99 in nanoseconds for both and their ratio.  One engine
 * writes 8 bytes into another engine's buffer in the same process, batch
 * of 1, one in flight: alloc, submit (validate, cut, route, submit),
 * complete (wake), wait, free. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tern/tern.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *t, size_t n, uint64_t *p50)
{
    qsort(t, n, sizeof *t, cmp_u64);
    *p50 = t[n / 2];
    printf("%-28s p50 %8llu ns  p99 %8llu ns\n", what, (unsigned long long)t[n / 2],
           (unsigned long long)t[n * 99 / 100]);
}

int main(int argc, char **argv)
{
    size_t ops = argc > 1 ? strtoul(argv[1], NULL, 10) : 200000;
    const char *yaml = "server_name: 127.0.0.1:0\ntransports:\n  - name: memcpy\n"
                       "log_level: warn\n";
    char err[1024];
    tern_engine *a = tern_engine_create_from_yaml(yaml, "bench", err, sizeof err);
    tern_engine *b = a ? tern_engine_create_from_yaml(yaml, "bench", err, sizeof err) : NULL;
    if (!a || !b) {
        fprintf(stderr, "engine: %s\n", err);
        return 1;
    }
    static char src[4096], dst[4096];
    if (tern_register_memory(a, src, sizeof src, NULL) ||
        tern_register_memory(b, dst, sizeof dst, NULL))
        return 1;
    tern_segment_id seg = tern_segment_open(a, tern_engine_server_name(b));
    if (seg < 0)
        return 1;
    uint64_t *t = malloc(ops * sizeof *t);
    tern_request r = {.opcode = TERN_WRITE, .local = src, .segment = seg,
                      .remote = (uintptr_t)dst, .length = 8};
    for (size_t i = 0; i < ops + ops / 10; i++) { /* the first tenth warms up */
        uint64_t t0 = now_ns();
        tern_batch *bt = tern_batch_alloc(a, 1);
        tern_batch_submit(bt, &r, 1);
        if (tern_batch_wait(bt, 10000) != 0)
            return fprintf(stderr, "wait: %s\n", tern_engine_last_error(a)), 1;
        tern_batch_free(bt);
        if (i >= ops / 10)
            t[i - ops / 10] = now_ns() - t0;
    }
    uint64_t core50, base50;
    report("tern 8-byte WRITE (memcpy)", t, ops, &core50);
    /* baseline: copy, then what any completion must do: lock, mark done,
     * broadcast, and the waiter's lock + check */
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    volatile int done = 0;
    for (size_t i = 0; i < ops; i++) {
        uint64_t t0 = now_ns();
        memcpy(dst, src, 8);
        pthread_mutex_lock(&m);
        done = 1;
        pthread_cond_broadcast(&c);
        pthread_mutex_unlock(&m);
        pthread_mutex_lock(&m);
        while (!done)
            pthread_cond_wait(&c, &m);
        done = 0;
        pthread_mutex_unlock(&m);
        t[i] = now_ns() - t0;
    }
    report("baseline copy + wake", t, ops, &base50);
    printf("core path over baseline: %.1f x, %lld ns per operation\n",
           base50 ? (double)core50 / (double)base50 : 0.0,
           (long long)core50 - (long long)base50);
    free(t);
    tern_segment_close(a, seg);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    return 0;
}
