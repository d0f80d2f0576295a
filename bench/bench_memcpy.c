/* bench/bench_memcpy.c: the memory-copy baseline for bench/shm_bench.sh.
 *
 *   tern-bench-memcpy [--size S] [--block S] [--threads N] [--duration SEC] [--hugepages]
 *
 * Copies a --size buffer (default 64M) into another in --block pieces
 * (default 1M), the pieces dealt round-robin to --threads threads (default
 * 1), over and over for --duration seconds (default 3), and prints
 *   {"threads": N, "block": B, "size": S, "bytes": moved, "seconds": t, "gb_per_s": x}
 * Both buffers are touched once before timing (no page faults measured),
 * like the registered buffers of tern-bench; --hugepages advises them to be
 * backed by transparent huge pages, like tern-bench --hugepages. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct job {
    uint8_t *src, *dst;
    uint64_t size, block;
    int id, n;
    atomic_int *stop;
    uint64_t bytes;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': return v << 10;
    case 'm': case 'M': return v << 20;
    case 'g': case 'G': return v << 30;
    default: return v;
    }
}

static void *copier(void *arg)
{
    job *j = arg;
    uint64_t nblocks = (j->size + j->block - 1) / j->block;
    while (!atomic_load_explicit(j->stop, memory_order_relaxed))
        for (uint64_t b = (uint64_t)j->id; b < nblocks; b += (uint64_t)j->n) {
            uint64_t off = b * j->block;
            uint64_t len = j->size - off < j->block ? j->size - off : j->block;
            memcpy(j->dst + off, j->src + off, len);
            j->bytes += len;
        }
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t size = 64ull << 20, block = 1ull << 20;
    int threads = 1, hugepages = 0;
    double duration = 3;
    static const struct option opts[] = {
        {"size", 1, 0, 's'}, {"block", 1, 0, 'b'}, {"threads", 1, 0, 't'},
        {"duration", 1, 0, 'd'}, {"hugepages", 0, 0, 'H'}, {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 's') size = parse_size(optarg);
        else if (c == 'b') block = parse_size(optarg);
        else if (c == 't') threads = atoi(optarg);
        else if (c == 'd') duration = atof(optarg);
        else if (c == 'H') hugepages = 1;
        else return 2;
    }
    if (!size || !block || threads < 1 || threads > 256 || duration <= 0) {
        fprintf(stderr, "tern-bench-memcpy: bad arguments\n");
        return 2;
    }
    uint8_t *src = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED) {
        perror("tern-bench-memcpy: mmap");
        return 1;
    }
    if (hugepages && (madvise(src, size, MADV_HUGEPAGE) || madvise(dst, size, MADV_HUGEPAGE)))
        perror("tern-bench-memcpy: madvise(MADV_HUGEPAGE)");
    memset(src, 0x5A, size);
    memset(dst, 0, size);
    atomic_int stop = 0;
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){src, dst, size, block, i, threads, &stop, 0};
        pthread_create(&tid[i], NULL, copier, &jobs[i]);
    }
    struct timespec ts = {(time_t)duration, (long)((duration - (double)(time_t)duration) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, 1);
    uint64_t bytes = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        bytes += jobs[i].bytes;
    }
    double t = now_s() - t0;
    printf("{\"threads\": %d, \"block\": %llu, \"size\": %llu, \"bytes\": %llu, "
           "\"seconds\": %.3f, \"gb_per_s\": %.3f}\n", threads, (unsigned long long)block,
           (unsigned long long)size, (unsigned long long)bytes, t, (double)bytes / t / 1e9);
    free(jobs);
    free(tid);
    return 0;
}
