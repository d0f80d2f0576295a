/* tools/tern-bench.c: the benchmark users run first.
 *
 *   tern-bench --mode target    [--config F] [--server-name H:P] [--buffer-size S]
 *   tern-bench --mode initiator --segment H:P [--config F] [--op read|write]
 *              [--block-size S] [--batch-size N] [--buffer-size S] [--duration SEC]
 *              [--threads N] [--verify] [--json] [--server-name H:P] [--gpu N]
 *              [--hugepages] [--alloc] [--working-set S]
 *   tern-bench --mode initiator --segment H:P --sweep [FROM..TO] [--seconds SEC]
 *              [--json [FILE]] [--csv FILE] [--plot FILE.svg] [--compare A.json ...]
 *   tern-bench --plot FILE.svg --compare A.json [B.json ...]
 *
 * The target registers one buffer, prints "tern-bench target ready: <server
 * name> ..." on stdout and serves until SIGINT/SIGTERM.  The initiator opens
 * the target's segment, takes the largest buffer of its descriptor, splits
 * it and its own buffer evenly between --threads threads, and each thread
 * keeps submitting batches of --batch-size requests of --block-size bytes,
 * walking through its part of the buffer, with --queue-depth batches in
 * flight (the next is submitted before the oldest is waited for).  Progress goes to stderr once a
 * second; the summary (GB/s, operations/s, p50/p99 latency per block,
 * errors) to stdout, as one JSON object with --json.
 *
 * Latency per block: from the batch's submit until tern_batch_wait
 * returned, recorded once per block of the batch (--batch-size 1
 * --queue-depth 1 gives the pure round trip of one block).
 *
 * --verify: the local buffer holds a pattern that depends on the remote
 * offset and a per-run seed.  write: every block written carries the
 * pattern, and at the end the whole remote range is read back and checked
 * byte by byte.  read: the pattern is first written to the target, then
 * every block read is checked byte by byte (the check is inside the timed
 * loop: verified runs are slower).
 *
 * --stats: at the end, the engine's statistics (tern_engine_stats): per
 * engine, transport and peer, requests, bytes, failures, retries and the
 * latency quantiles of its histogram; one JSON object a line with --json.
 * --linger SEC: the initiator keeps its engine up SEC seconds after the
 * summary (until SIGINT/SIGTERM), e.g. for a scraper of its
 * `metrics_listen` endpoint.
 *
 * --alloc: the host buffer comes from tern_alloc_memory (a shared-memory
 * file that a same-host peer maps, so shm copies with memcpy; docs/
 * transports.md, "Memory tern allocates").
 *
 * --hugepages: the host buffer is advised to be backed by transparent huge
 * pages (madvise MADV_HUGEPAGE).  The same-host transport pins the peer's
 * pages for every copy, so 2 MiB pages instead of 4 KiB ones change its
 * throughput most (docs/protocol.md, Same-host transport).
 *
 * --sweep runs the initiator at every power-of-two block size in a range,
 * both directions, on one engine and one connection; the sweep, its
 * outputs and its charts are tools/bench_sweep.c and tools/bench_plot.c.
 *
 * An initiator without --server-name listens on the config's host with
 * port 0, so it can share a host with a target. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_plot.h"
#include "bench_size.h"
#include "bench_sweep.h"
#include "ephemeral_name.h"
#include "tern/tern.h"

typedef struct opts {
    const char *mode, *config, *segment, *server_name;
    int op;
    uint64_t block, buffer;
    int batch, threads, verify, json, depth, hugepages, alloc;
    uint64_t working_set;      /* --working-set S: offsets wrap at S; 0 off */
    int gpu;                   /* --gpu N: buffers on GPU N; -1 host memory */
    double duration;
    bench_sweep_opts sw;       /* --sweep, its outputs and --plot (bench_sweep.h) */
    int stats;                 /* --stats: print tern_engine_stats at the end */
    double linger;             /* --linger SEC: keep the initiator's engine up after */
} opts;

typedef struct shared {
    const opts *o;
    tern_engine *e;
    tern_segment_id seg;
    uint8_t *local;
    uint64_t remote, remote_len;
    uint32_t seed;
    atomic_uint_fast64_t bytes, ops, errors, verify_bad;
    atomic_int stop;
    char first_error[512];
    pthread_mutex_t mu;
} shared;

typedef struct worker {
    shared *sh;
    int idx;
    pthread_t th;
    uint64_t off, len;      /* its part of both buffers */
    uint64_t slots_used;    /* batches of its part written at least once */
    uint32_t *lat_us;       /* one entry per block */
    size_t nlat, caplat;
} worker;

static volatile sig_atomic_t g_signalled;
static void on_signal(int sig) { (void)sig; g_signalled = 1; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tern-bench --mode target|initiator [options]\n"
        "  --config FILE        engine YAML (default: $TERN_CONFIG or the built-in one)\n"
        "  --server-name H:P    this engine's server name (overrides the config)\n"
        "  --segment H:P        initiator: the target's server name\n"
        "  --op read|write      initiator: direction (default write)\n"
        "  --block-size S       bytes per request (default 64K; K/M/G suffixes)\n"
        "  --batch-size N       requests per batch (default 16)\n"
        "  --buffer-size S      registered buffer on each side (default 64M; first touch of memory is slow on VMs)\n"
        "  --duration SEC       initiator: how long to run (default 5)\n"
        "  --threads N          initiator: submitting threads (default 1)\n"
        "  --queue-depth N      initiator: batches in flight per thread (default 2)\n"
        "  --verify             fill with a pattern and check every byte\n"
        "  --json               initiator: the summary as one JSON object\n"
        "  --hugepages          back the host buffer with transparent huge pages (madvise)\n"
        "  --working-set S      every request within the first S bytes of both buffers (a\n"
        "                       multiple of --block-size), as iperf3 reuses its one buffer\n"
        "  --alloc              the host buffer from tern_alloc_memory (a shared-memory file\n"
        "                       a same-host peer maps: shm copies with memcpy)\n"
        "  --stats              print the engine's statistics at the end (tern_engine_stats)\n"
        "  --linger SEC         initiator: keep the engine up SEC s after the summary\n"
        "  --gpu N              this side's buffer on GPU N (device memory through the CUDA\n"
        "                       driver tern loads at run time; each side chooses its own)\n");
    fputs(bench_sweep_usage, f);
}

static int parse_opts(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"mode", 1, 0, 'm'}, {"config", 1, 0, 'c'}, {"segment", 1, 0, 's'},
        {"server-name", 1, 0, 'n'}, {"op", 1, 0, 'o'}, {"block-size", 1, 0, 'b'},
        {"batch-size", 1, 0, 'B'}, {"buffer-size", 1, 0, 'S'}, {"duration", 1, 0, 'd'},
        {"threads", 1, 0, 't'}, {"verify", 0, 0, 'v'}, {"json", 2, 0, 'j'},
        {"queue-depth", 1, 0, 'q'}, {"gpu", 1, 0, 'g'}, {"hugepages", 0, 0, 'H'}, {"alloc", 0, 0, 'A'}, {"working-set", 1, 0, 'W'},
        {"stats", 0, 0, 'T'}, {"linger", 1, 0, 'L'},
        {"help", 0, 0, 'h'}, BENCH_SWEEP_LONGOPTS, {0, 0, 0, 0}};
    *o = (opts){.op = TERN_WRITE, .block = 64 << 10, .buffer = 64ull << 20, .batch = 16,
                .threads = 1, .duration = 5, .depth = 2, .gpu = -1};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->mode = optarg; break;
        case 'c': o->config = optarg; break;
        case 's': o->segment = optarg; break;
        case 'n': o->server_name = optarg; break;
        case 'o':
            if (!strcmp(optarg, "read")) o->op = TERN_READ;
            else if (!strcmp(optarg, "write")) o->op = TERN_WRITE;
            else { fprintf(stderr, "tern-bench: --op must be read or write, got '%s'\n", optarg); return -1; }
            break;
        case 'b':
            if (bench_parse_size(optarg, &o->block) || !o->block) {
                fprintf(stderr, "tern-bench: --block-size '%s' is not a size > 0\n", optarg);
                return -1;
            }
            break;
        case 'S':
            if (bench_parse_size(optarg, &o->buffer) || !o->buffer) {
                fprintf(stderr, "tern-bench: --buffer-size '%s' is not a size > 0\n", optarg);
                return -1;
            }
            break;
        case 'B': o->batch = atoi(optarg); break;
        case 't': o->threads = atoi(optarg); break;
        case 'q': o->depth = atoi(optarg); break;
        case 'd': o->duration = atof(optarg); break;
        case 'v': o->verify = 1; break;
        case 'H': o->hugepages = 1; break;
        case 'A': o->alloc = 1; break;
        case 'W':
            if (bench_parse_size(optarg, &o->working_set) || !o->working_set) {
                fprintf(stderr, "tern-bench: --working-set '%s' is not a size > 0\n", optarg);
                return -1;
            }
            break;
        case 'g': {
            char *end = NULL;
            long g = strtol(optarg, &end, 10);
            if (!*optarg || *end || g < 0 || g > 1023) {
                fprintf(stderr, "tern-bench: --gpu '%s' is not a GPU ordinal\n", optarg);
                return -1;
            }
            o->gpu = (int)g;
            break;
        }
        case 'j': o->json = 1; bench_sweep_json_opt(&o->sw, optarg, argc, argv); break;
        case 'T': o->stats = 1; break;
        case 'L': o->linger = atof(optarg); break;
        case 'h': usage(stdout); exit(0);
        default: {
            int r = bench_sweep_opt(&o->sw, c, optarg, argc, argv);
            if (r == 0)
                usage(stderr);
            if (r <= 0)
                return -1;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tern-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (bench_sweep_check(&o->sw, o->mode, o->verify) != 0)
        return -1;
    if (!o->mode && bench_sweep_plot_only(&o->sw))
        return 0;
    if (!o->mode || (strcmp(o->mode, "target") && strcmp(o->mode, "initiator"))) {
        fprintf(stderr, "tern-bench: --mode target|initiator is required\n");
        return -1;
    }
    if (o->batch < 1 || o->batch > 65536 || o->threads < 1 || o->threads > 256 ||
        o->duration <= 0 || o->depth < 1 || o->depth > 16) {
        fprintf(stderr, "tern-bench: --batch-size 1..65536, --threads 1..256, --duration > 0, "
                        "--queue-depth 1..16\n");
        return -1;
    }
    if (o->working_set && (o->verify || o->working_set % o->block)) {
        fprintf(stderr, "tern-bench: --working-set must be a multiple of --block-size, and not "
                        "with --verify (requests share the same bytes)\n");
        return -1;
    }
    if (o->gpu >= 0 && o->verify) {
        fprintf(stderr, "tern-bench: --verify checks the buffer from the CPU: not with --gpu "
                        "(byte-exact GPU transfers are checked by scripts/gpu-check.sh)\n");
        return -1;
    }
    if (!strcmp(o->mode, "initiator") && !o->segment) {
        fprintf(stderr, "tern-bench: the initiator needs --segment <target server name>\n");
        return -1;
    }
    return 0;
}

/* ---- engine with an optional server_name override ------------------------- */

/* "<configured host>:0" from the resolved configuration (the file is read
 * through the library, so $TERN_CONFIG and the embedded default apply). */
static int ephemeral_name(const char *config, char *out, size_t outlen, char *err,
                          size_t errlen)
{
    char *text = NULL;
    int rc = tern_config_describe(config, TERN_DESCRIBE_CONFIG_ONLY, &text, err, errlen);
    if (rc < 0)
        return rc;
    json_object *o = json_tokener_parse(text), *cfg = NULL, *sn = NULL;
    free(text);
    const char *name = "127.0.0.1:12001";
    if (json_object_object_get_ex(o, "config", &cfg) &&
        json_object_object_get_ex(cfg, "server_name", &sn))
        name = json_object_get_string(sn);
    tool_ephemeral_name(name, out, outlen);
    json_object_put(o);
    return 0;
}

/* The engine of the config (--config, else $TERN_CONFIG, else the embedded
 * default) under --server-name; an initiator without one takes a free port
 * on the configured host, so it runs beside a target holding that port. */
static tern_engine *make_engine(const opts *o, int initiator)
{
    char err[2048] = "", p0[300];
    const char *sn = o->server_name;
    if (!sn && initiator) {
        if (ephemeral_name(o->config, p0, sizeof p0, err, sizeof err) < 0) {
            fprintf(stderr, "tern-bench: %s\n", err);
            return NULL;
        }
        sn = p0;
    }
    tern_engine *e = tern_engine_create_as(o->config, sn, err, sizeof err);
    if (!e)
        fprintf(stderr, "tern-bench: cannot create the engine: %s\n", err);
    return e;
}

/* "cuda:N" or "host", for the summaries. */
static const char *mem_name(const opts *o, char *buf, size_t len)
{
    if (o->gpu < 0)
        return "host";
    snprintf(buf, len, "cuda:%d", o->gpu);
    return buf;
}

/* --gpu N: device memory on GPU N, zeroed; freed with tern_gpu_free before
 * the engine goes. */
static uint8_t *alloc_gpu_buffer(tern_engine *e, int gpu, uint64_t len)
{
    void *p = NULL;
    if (tern_gpu_alloc(e, gpu, len, &p) != 0) {
        fprintf(stderr, "tern-bench: cannot allocate %" PRIu64 " bytes on GPU %d: %s\n", len,
                gpu, tern_engine_last_error(e));
        return NULL;
    }
    void *zero = calloc(1, len);
    if (!zero || tern_gpu_copy(e, p, zero, len) != 0) {
        fprintf(stderr, "tern-bench: cannot clear the GPU buffer: %s\n",
                zero ? tern_engine_last_error(e) : "out of memory");
        free(zero);
        tern_gpu_free(e, p);
        return NULL;
    }
    free(zero);
    return p;
}

/* --alloc: memory tern allocates (tern_alloc_memory: a shared-memory file
 * a same-host peer maps), registered by that call; touched before timing. */
static uint8_t *alloc_tern_buffer(tern_engine *e, uint64_t len)
{
    void *p = NULL;
    if (tern_alloc_memory(e, len, NULL, NULL, &p) != 0) {
        fprintf(stderr, "tern-bench: tern_alloc_memory(%" PRIu64 "): %s\n", len,
                tern_engine_last_error(e));
        return NULL;
    }
    memset(p, 0, len);
    return p;
}

/* Frees a buffer of alloc_*_buffer; --alloc's (tern_free_memory) is also
 * unregistered, the others are unregistered before. */
static void free_buffer(tern_engine *e, const opts *o, void *p, uint64_t len)
{
    int gpu = o->gpu;
    if (p && o->alloc)
        tern_free_memory(e, p);
    else if (p && gpu >= 0)
        tern_gpu_free(e, p);
    else if (p)
        munmap(p, len);
}

static uint8_t *alloc_buffer(uint64_t len, int hugepages)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "tern-bench: cannot allocate %" PRIu64 " bytes: %s\n", len,
                strerror(errno));
        return NULL;
    }
    if (hugepages && madvise(p, len, MADV_HUGEPAGE) != 0)
        fprintf(stderr, "tern-bench: madvise(MADV_HUGEPAGE): %s (4 KiB pages)\n",
                strerror(errno));
    memset(p, 0, len); /* fault it in before timing */
    return p;
}

/* ---- --stats: the engine's counters at the end ------------------------------- */

/* The latency below which a fraction q of the completed requests fell,
 * read from the histogram: its bucket's upper bound. */
static double stats_quantile(const tern_stats *s, int op, double q)
{
    uint64_t n = s->latency_count[op], seen = 0;
    for (int k = 0; n && k < TERN_STATS_BUCKETS; k++) {
        seen += s->latency[op][k];
        if ((double)seen >= q * (double)n)
            return tern_stats_bucket_le(k);
    }
    return 0;
}

static int stats_line(const tern_stats *s, void *arg)
{
    static const char *const kinds[] = {"engine", "transport", "peer"};
    const char *kind = s->kind < 3 ? kinds[s->kind] : "?";
    uint64_t errs = 0;
    for (int i = 0; i < TERN_STATS_ERRORS; i++)
        errs += s->errors[i];
    if (*(int *)arg) { /* json-c: a peer's name is any text */
        json_object *j = json_object_new_object();
        json_object_object_add(j, "stats", json_object_new_string(kind));
        json_object_object_add(j, "name", json_object_new_string(s->name));
        const char *keys[] = {"read_ops", "write_ops", "read_bytes", "write_bytes", "failures",
                              "retries", "refetches", "fallbacks", "heals", "in_flight"};
        int64_t v[] = {(int64_t)s->ops[TERN_READ], (int64_t)s->ops[TERN_WRITE],
                       (int64_t)s->bytes[TERN_READ], (int64_t)s->bytes[TERN_WRITE],
                       (int64_t)(s->failures[TERN_READ] + s->failures[TERN_WRITE]),
                       (int64_t)s->retries, (int64_t)s->refetches, (int64_t)s->fallbacks,
                       (int64_t)s->heals, s->in_flight};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            json_object_object_add(j, keys[i], json_object_new_int64(v[i]));
        printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
        json_object_put(j);
        return 0;
    }
    printf("  %-9s %s\n", kind, s->name);
    for (int op = 0; op < 2; op++) {
        if (!s->ops[op] && !s->bytes[op] && !s->failures[op])
            continue;
        printf("    %-5s    %" PRIu64 " requests, %" PRIu64 " bytes, %" PRIu64 " failed",
               op == TERN_READ ? "read" : "write", s->ops[op], s->bytes[op], s->failures[op]);
        if (s->latency_count[op])
            printf(", latency p50 <= %.0f us, p99 <= %.0f us, mean %.0f us",
                   stats_quantile(s, op, 0.5) * 1e6, stats_quantile(s, op, 0.99) * 1e6,
                   (double)s->latency_sum_ns[op] / 1e3 / (double)s->latency_count[op]);
        printf("\n");
    }
    printf("    healing  %" PRIu64 " retries, %" PRIu64 " refetches, %" PRIu64 " heals, %" PRIu64
           " fallbacks, %" PRIu64 " errors, %" PRId64 " in flight\n",
           s->retries, s->refetches, s->heals, s->fallbacks, errs, s->in_flight);
    return 0;
}

static void print_stats(tern_engine *e, int json)
{
    if (!json)
        printf("tern-bench: statistics (tern_engine_stats)\n");
    tern_engine_stats(e, stats_line, &json);
    fflush(stdout);
}

/* ---- target ----------------------------------------------------------------- */

static int run_target(const opts *o)
{
    tern_engine *e = make_engine(o, 0);
    if (!e)
        return 1;
    uint8_t *buf = o->alloc      ? alloc_tern_buffer(e, o->buffer)
                   : o->gpu >= 0 ? alloc_gpu_buffer(e, o->gpu, o->buffer)
                                 : alloc_buffer(o->buffer, o->hugepages);
    if (!buf) {
        tern_engine_destroy(e);
        return 1;
    }
    int rc = o->alloc ? 0 : tern_register_memory(e, buf, o->buffer, NULL);
    if (rc) {
        fprintf(stderr, "tern-bench: registering %" PRIu64 " bytes failed: %s\n", o->buffer,
                tern_engine_last_error(e));
        tern_engine_destroy(e);
        return 1;
    }
    char mem[32];
    printf("tern-bench target ready: %s buffer 0x%" PRIxPTR " size %" PRIu64 " memory %s\n",
           tern_engine_server_name(e), (uintptr_t)buf, o->buffer, mem_name(o, mem, sizeof mem));
    fflush(stdout);
    while (!g_signalled)
        pause();
    fprintf(stderr, "tern-bench target: stopping\n");
    if (o->stats)
        print_stats(e, o->json);
    if (!o->alloc)
        tern_unregister_memory(e, buf);
    free_buffer(e, o, buf, o->buffer);
    tern_engine_destroy(e);
    return 0;
}

/* ---- initiator ------------------------------------------------------------ */

static inline uint8_t pattern(uint64_t off, uint32_t seed)
{
    uint64_t x = (off >> 3) * 0x9E3779B97F4A7C15ull + seed;
    return (uint8_t)((x >> 29) ^ (off & 7) ^ (x >> 51));
}

static void fill_pattern(uint8_t *p, uint64_t off, uint64_t len, uint32_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = pattern(off + i, seed);
}

/* The 8 pattern bytes of the aligned word at off (off % 8 == 0): one base
 * byte per word, XORed with the byte's index (little-endian layout). */
static inline uint64_t pattern_word(uint64_t off, uint32_t seed)
{
    uint64_t x = (off >> 3) * 0x9E3779B97F4A7C15ull + seed;
    uint64_t b = (uint8_t)((x >> 29) ^ (x >> 51));
    return (b * 0x0101010101010101ull) ^ 0x0706050403020100ull;
}

/* Counts differing bytes; word at a time on the aligned middle so that
 * --verify does not turn a READ benchmark into a byte loop. */
static uint64_t check_pattern(const uint8_t *p, uint64_t off, uint64_t len, uint32_t seed)
{
    uint64_t bad = 0, i = 0;
    for (; i < len && ((off + i) & 7); i++)
        bad += p[i] != pattern(off + i, seed);
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t d = w ^ pattern_word(off + i, seed);
        for (; d; d >>= 8) /* rare: count the differing bytes */
            bad += (d & 0xff) != 0;
    }
    for (; i < len; i++)
        bad += p[i] != pattern(off + i, seed);
    return bad;
}

static void note_error(shared *sh, const char *msg)
{
    pthread_mutex_lock(&sh->mu);
    if (!sh->first_error[0])
        snprintf(sh->first_error, sizeof sh->first_error, "%s", msg);
    pthread_mutex_unlock(&sh->mu);
}

/* A batch of n requests covering [off, off + n*block) of the buffers. */
typedef struct flight {
    tern_batch *b;
    uint64_t off;
    int n, submit_rc;
    double t0;
} flight;

/* Offset of request i of the batch at off: with --working-set, every
 * request falls in the first S bytes of both buffers (as iperf3 sends its
 * one buffer again and again), else each has its own block. */
static uint64_t block_at(const opts *o, uint64_t off, int i)
{
    uint64_t at = off + (uint64_t)i * o->block;
    return o->working_set ? at % o->working_set : at;
}

static void batch_start(worker *w, flight *f, int op, uint64_t off, int n)
{
    shared *sh = w->sh;
    const opts *o = sh->o;
    *f = (flight){.off = off, .n = n, .t0 = now_s()};
    f->b = tern_batch_alloc(sh->e, (size_t)n);
    if (!f->b) {
        note_error(sh, tern_engine_last_error(sh->e));
        return;
    }
    tern_request reqs[n];
    for (int i = 0; i < n; i++)
        reqs[i] = (tern_request){.opcode = op, .local = sh->local + block_at(o, off, i),
                                 .segment = sh->seg,
                                 .remote = sh->remote + block_at(o, off, i),
                                 .length = o->block};
    f->submit_rc = tern_batch_submit(f->b, reqs, (size_t)n);
}

/* Wait for a started batch; returns the number of requests that completed. */
static int batch_finish(worker *w, flight *f, int op, int timeout_ms)
{
    shared *sh = w->sh;
    const opts *o = sh->o;
    int n = f->n, ok = 0, rc = f->submit_rc;
    if (!f->b) {
        atomic_fetch_add(&sh->errors, (uint64_t)n);
        return 0;
    }
    if (rc >= 0)
        rc = tern_batch_wait(f->b, timeout_ms);
    for (int i = 0; i < n; i++) {
        tern_request_state st;
        if (tern_batch_state(f->b, (size_t)i, &st) == 0 && st.status == TERN_COMPLETED) {
            ok++;
            continue;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "request %d (%s %" PRIu64 " B at remote 0x%" PRIx64 "): %s",
                 i, op == TERN_READ ? "READ" : "WRITE", o->block,
                 sh->remote + block_at(o, f->off, i), tern_batch_error(f->b, (size_t)i));
        note_error(sh, msg);
    }
    if (rc == TERN_ERR_TIMEOUT)
        note_error(sh, "a batch did not finish within the wait timeout");
    /* Only after a wait that timed out can slices still be in flight (a
     * request ends once none of its slices is held): free refuses (BUSY)
     * until they are back. */
    for (int tries = 0; tern_batch_free(f->b) == TERN_ERR_BUSY && tries < 1000; tries++)
        usleep(10000);
    f->b = NULL;
    atomic_fetch_add(&sh->errors, (uint64_t)(n - ok));
    return ok;
}

static int one_batch(worker *w, int op, uint64_t off, int n, int timeout_ms)
{
    flight f;
    batch_start(w, &f, op, off, n);
    return batch_finish(w, &f, op, timeout_ms);
}

static void lat_add(worker *w, uint32_t us, int n)
{
    if (w->nlat + (size_t)n > w->caplat) {
        size_t nc = (w->caplat ? w->caplat * 2 : 65536) + (size_t)n;
        uint32_t *p = realloc(w->lat_us, nc * sizeof *p);
        if (!p)
            return;
        w->lat_us = p;
        w->caplat = nc;
    }
    for (int i = 0; i < n; i++)
        w->lat_us[w->nlat++] = us;
}

/* Keeps --queue-depth batches in flight so the pipe never drains between
 * batches (iperf3 never pauses either). */
static void batch_done(worker *w, flight *f)
{
    shared *sh = w->sh;
    const opts *o = sh->o;
    int ok = batch_finish(w, f, o->op, 30000);
    lat_add(w, (uint32_t)((now_s() - f->t0) * 1e6), ok);
    atomic_fetch_add(&sh->ops, (uint64_t)ok);
    atomic_fetch_add(&sh->bytes, (uint64_t)ok * o->block);
    if (o->verify && o->op == TERN_READ && ok == f->n) {
        uint64_t bad = check_pattern(sh->local + f->off, f->off, (uint64_t)f->n * o->block,
                                     sh->seed);
        if (bad) {
            atomic_fetch_add(&sh->verify_bad, bad);
            note_error(sh, "verify: READ returned bytes that differ from the pattern");
        }
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    shared *sh = w->sh;
    const opts *o = sh->o;
    uint64_t per_batch = (uint64_t)o->batch * o->block;
    uint64_t nslots = w->len / per_batch, slot = 0;
    int depth = (uint64_t)o->depth < nslots ? o->depth : (int)nslots;
    flight q[16];
    for (int i = 0; i < depth; i++, slot++)
        batch_start(w, &q[i], o->op, w->off + (slot % nslots) * per_batch, o->batch);
    for (int i = 0; !atomic_load(&sh->stop); i = (i + 1) % depth, slot++) {
        batch_done(w, &q[i]);
        w->slots_used = slot < nslots ? slot : nslots;
        batch_start(w, &q[i], o->op, w->off + (slot % nslots) * per_batch, o->batch);
    }
    for (int i = 0; i < depth; i++)
        if (q[i].b)
            batch_done(w, &q[i]);
    w->slots_used = slot < nslots ? slot : nslots;
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Largest buffer of the target's descriptor. */
static int remote_buffer(tern_engine *e, tern_segment_id seg, uint64_t *addr, uint64_t *len)
{
    char *js = NULL;
    int rc = tern_segment_descriptor(e, seg, &js);
    if (rc)
        return rc;
    json_object *root = json_tokener_parse(js), *bufs;
    free(js);
    *len = 0;
    if (root && json_object_object_get_ex(root, "buffers", &bufs) &&
        json_object_is_type(bufs, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(bufs); i++) {
            json_object *b = json_object_array_get_idx(bufs, i), *a, *l;
            if (json_object_object_get_ex(b, "addr", &a) &&
                json_object_object_get_ex(b, "length", &l) &&
                json_object_get_uint64(l) > *len) {
                *addr = json_object_get_uint64(a);
                *len = json_object_get_uint64(l);
            }
        }
    }
    json_object_put(root);
    return *len ? 0 : TERN_ERR_NOT_FOUND;
}

/* Move the part of each thread's range the run used (all of it for the
 * pattern written before a read run): op WRITE puts the pattern there,
 * op READ brings it back for the check. */
static int verify_pass(shared *sh, worker *ws, int op)
{
    const opts *o = sh->o;
    for (int t = 0; t < o->threads; t++) {
        worker *w = &ws[t];
        uint64_t per_batch = (uint64_t)o->batch * o->block;
        uint64_t used = op == TERN_READ ? w->slots_used * per_batch : w->len;
        for (uint64_t off = 0; off + per_batch <= used; off += per_batch)
            if (one_batch(w, op, w->off + off, o->batch, 60000) != o->batch)
                return -1;
    }
    return 0;
}

static void progress(shared *sh, double t0, uint64_t *last_b, double *last_t)
{
    double t = now_s();
    uint64_t b = atomic_load(&sh->bytes);
    double gbs = (double)(b - *last_b) / (t - *last_t) / 1e9;
    fprintf(stderr, "[%5.1fs] %7.3f GB/s  %9.0f ops/s  errors %" PRIu64 "\n", t - t0, gbs,
            gbs * 1e9 / (double)sh->o->block, (uint64_t)atomic_load(&sh->errors));
    *last_b = b;
    *last_t = t;
}

/* Nearest-rank percentile of sorted a[0..n): the same rule for every q, so
 * p99 >= p50 even with a couple of samples. */
static double percentile(const uint32_t *a, size_t n, double q)
{
    if (!n)
        return 0;
    size_t r = (size_t)(q * (double)n);
    if ((double)r < q * (double)n)
        r++;
    return a[r ? r - 1 : 0];
}

/* out[i]: the q[i] percentile of every worker's latencies together. */
static void lat_percentiles(const worker *ws, int threads, const double *q, double *out, int nq)
{
    size_t n = 0;
    for (int t = 0; t < threads; t++)
        n += ws[t].nlat;
    uint32_t *all = malloc((n ? n : 1) * sizeof *all);
    size_t k = 0;
    for (int t = 0; all && t < threads; t++) {
        memcpy(all + k, ws[t].lat_us, ws[t].nlat * sizeof *all);
        k += ws[t].nlat;
    }
    if (all)
        qsort(all, n, sizeof *all, cmp_u32);
    for (int i = 0; i < nq; i++)
        out[i] = all ? percentile(all, n, q[i]) : 0;
    free(all);
}

static void summary(shared *sh, worker *ws, double secs, const char *verdict)
{
    const opts *o = sh->o;
    double pq[2];
    lat_percentiles(ws, o->threads, (const double[]){0.50, 0.99}, pq, 2);
    double p50 = pq[0], p99 = pq[1];
    uint64_t bytes = atomic_load(&sh->bytes), ops = atomic_load(&sh->ops);
    uint64_t errs = atomic_load(&sh->errors);
    double gbs = (double)bytes / secs / 1e9, opss = (double)ops / secs;
    char xport[64] = "?";
    tern_segment_transport(sh->e, sh->seg, xport, sizeof xport);
    if (o->json) {
        printf("{\"mode\":\"initiator\",\"op\":\"%s\",\"transport\":\"%s\",\"segment\":\"%s\","
               "\"block_size\":%" PRIu64 ",\"batch_size\":%d,\"threads\":%d,"
               "\"duration_s\":%.3f,\"bytes\":%" PRIu64 ",\"gb_per_s\":%.4f,"
               "\"ops\":%" PRIu64 ",\"ops_per_s\":%.1f,\"lat_p50_us\":%.0f,"
               "\"lat_p99_us\":%.0f,\"errors\":%" PRIu64 ",\"verify\":\"%s\",\"gpu\":%d}\n",
               o->op == TERN_READ ? "read" : "write", xport, o->segment, o->block, o->batch,
               o->threads, secs, bytes, gbs, ops, opss, p50, p99, errs, verdict, o->gpu);
    } else {
        char mem[32];
        printf("tern-bench: %s over %s to %s, %d thread(s), batch %d x %" PRIu64 " B, %.1f s, "
               "local memory %s\n",
               o->op == TERN_READ ? "READ" : "WRITE", xport, o->segment, o->threads, o->batch,
               o->block, secs, mem_name(o, mem, sizeof mem));
        printf("  moved      %" PRIu64 " bytes in %" PRIu64 " requests\n", bytes, ops);
        printf("  throughput %.3f GB/s (%.2f Gbit/s), %.0f ops/s\n", gbs, gbs * 8, opss);
        printf("  latency    p50 %.0f us, p99 %.0f us per block\n", p50, p99);
        printf("  errors     %" PRIu64 "%s%s\n", errs, sh->first_error[0] ? ": first: " : "",
               sh->first_error);
        printf("  verify     %s\n", verdict);
    }
    fflush(stdout);
}

/* The segment, the target's buffer and the local one, registered: what
 * every run of this initiator shares, whatever its block size. */
static int open_target(shared *sh)
{
    const opts *o = sh->o;
    sh->seg = tern_segment_open(sh->e, o->segment);
    if (sh->seg < 0) {
        fprintf(stderr, "tern-bench: cannot open segment %s: %s\n", o->segment,
                tern_engine_last_error(sh->e));
        return -1;
    }
    if (remote_buffer(sh->e, sh->seg, &sh->remote, &sh->remote_len)) {
        fprintf(stderr, "tern-bench: segment %s has no registered buffer\n", o->segment);
        return -1;
    }
    uint64_t len = o->buffer < sh->remote_len ? o->buffer : sh->remote_len;
    sh->remote_len = 0; /* set once the local buffer is there (freed by that length) */
    sh->local = o->alloc      ? alloc_tern_buffer(sh->e, len)
                : o->gpu >= 0 ? alloc_gpu_buffer(sh->e, o->gpu, len)
                              : alloc_buffer(len, o->hugepages);
    if (!sh->local)
        return -1;
    sh->remote_len = len;
    if (!o->alloc && tern_register_memory(sh->e, sh->local, len, NULL) != 0) {
        fprintf(stderr, "tern-bench: registering the local buffer failed: %s\n",
                tern_engine_last_error(sh->e));
        return -1;
    }
    return 0;
}

/* The buffers split evenly between --threads workers, in whole batches. */
static int make_workers(shared *sh, worker **wsp)
{
    const opts *o = sh->o;
    uint64_t len = sh->remote_len;
    uint64_t per_thread = len / (uint64_t)o->threads;
    uint64_t per_batch = (uint64_t)o->batch * o->block;
    per_thread -= per_thread % per_batch;
    if (per_thread == 0) {
        fprintf(stderr, "tern-bench: a batch (%d x %" PRIu64 " B) per thread does not fit in "
                "%" PRIu64 " B (the smaller of --buffer-size and the target's buffer) split "
                "over %d threads\n", o->batch, o->block, len, o->threads);
        return -1;
    }
    worker *ws = calloc((size_t)o->threads, sizeof *ws);
    if (!ws)
        return -1;
    for (int t = 0; t < o->threads; t++)
        ws[t] = (worker){.sh = sh, .idx = t, .off = (uint64_t)t * per_thread, .len = per_thread};
    *wsp = ws;
    return 0;
}

static void free_workers(worker *ws, int threads)
{
    for (int t = 0; ws && t < threads; t++)
        free(ws[t].lat_us);
    free(ws);
}

static int setup_initiator(shared *sh, worker **wsp)
{
    const opts *o = sh->o;
    if (open_target(sh) != 0 || make_workers(sh, wsp) != 0)
        return -1;
    worker *ws = *wsp;
    uint64_t len = sh->remote_len;
    if (o->verify) {
        sh->seed = (uint32_t)time(NULL) ^ (uint32_t)getpid() << 8;
        fill_pattern(sh->local, 0, len, sh->seed);
        if (o->op == TERN_READ && verify_pass(sh, ws, TERN_WRITE) != 0) {
            fprintf(stderr, "tern-bench: writing the verify pattern failed: %s\n",
                    sh->first_error);
            return -1;
        }
    }
    return 0;
}

static const char *verify_after(shared *sh, worker *ws)
{
    const opts *o = sh->o;
    if (!o->verify)
        return "off";
    if (o->op == TERN_WRITE) {
        /* Read every written byte back into a zeroed local buffer. */
        memset(sh->local, 0, sh->remote_len);
        if (verify_pass(sh, ws, TERN_READ) != 0)
            return "failed (read back did not complete)";
        /* Only the part each thread reached was written this run. */
        uint64_t per_batch = (uint64_t)o->batch * o->block;
        for (int t = 0; t < o->threads; t++) {
            uint64_t n = ws[t].slots_used * per_batch;
            uint64_t bad = check_pattern(sh->local + ws[t].off, ws[t].off, n, sh->seed);
            atomic_fetch_add(&sh->verify_bad, bad);
        }
    }
    return atomic_load(&sh->verify_bad) ? "FAILED: bytes differ from the pattern" : "ok";
}

/* Runs the workers for sh->o->duration; returns the seconds it took.
 * progress: a line on stderr every second. */
static double timed_run(shared *sh, worker *ws, int show_progress)
{
    const opts *o = sh->o;
    double t0 = now_s(), last_t = t0, next = t0 + 1, left;
    uint64_t last_b = 0;
    atomic_store(&sh->stop, 0);
    for (int t = 0; t < o->threads; t++)
        pthread_create(&ws[t].th, NULL, worker_main, &ws[t]);
    while (!g_signalled && (left = o->duration - (now_s() - t0)) > 0) {
        /* short sweep points end within 2 ms of their time */
        usleep(left < 0.02 ? (useconds_t)(left * 1e6) + 1 : 20000);
        if (show_progress && now_s() >= next) {
            progress(sh, t0, &last_b, &last_t);
            next += 1;
        }
    }
    atomic_store(&sh->stop, 1);
    for (int t = 0; t < o->threads; t++)
        pthread_join(ws[t].th, NULL);
    return now_s() - t0;
}

/* ---- --sweep: one point per call, on the engine and buffers of the run ----- */

typedef struct sweep_ctx {
    shared *sh;
    const opts *o;   /* the command line's options; each point runs a copy */
} sweep_ctx;

static int measure_point(void *arg, bench_point *pt)
{
    sweep_ctx *c = arg;
    shared *sh = c->sh;
    opts po = *c->o;
    po.op = pt->op;
    po.block = pt->block;
    po.batch = pt->batch;
    po.duration = pt->secs;
    sh->o = &po;
    atomic_store(&sh->bytes, 0);
    atomic_store(&sh->ops, 0);
    atomic_store(&sh->errors, 0);
    sh->first_error[0] = 0;
    worker *ws = NULL;
    int rc = -1;
    if (make_workers(sh, &ws) == 0) {
        pt->secs = timed_run(sh, ws, 0);
        pt->bytes = atomic_load(&sh->bytes);
        pt->ops = atomic_load(&sh->ops);
        pt->errors = atomic_load(&sh->errors);
        double pq[3];
        lat_percentiles(ws, po.threads, (const double[]){0.50, 0.99, 0.999}, pq, 3);
        pt->p50 = pq[0];
        pt->p99 = pq[1];
        pt->p999 = pq[2];
        snprintf(pt->first_error, sizeof pt->first_error, "%s", sh->first_error);
        tern_segment_transport(sh->e, sh->seg, pt->transport, sizeof pt->transport);
        rc = g_signalled ? -1 : 0;
        if (g_signalled)
            fprintf(stderr, "tern-bench: sweep interrupted\n");
    }
    free_workers(ws, po.threads);
    sh->o = c->o;
    return rc;
}

static int run_sweep(shared *sh)
{
    const opts *o = sh->o;
    if (open_target(sh) != 0)
        return 1;
    sweep_ctx ctx = {.sh = sh, .o = o};
    bench_sweep_info info = {.segment = o->segment, .threads = o->threads, .batch = o->batch,
                             .depth = o->depth, .usable = sh->remote_len};
    return bench_sweep_run(&o->sw, &info, measure_point, &ctx);
}

static int run_single(shared *sh)
{
    const opts *o = sh->o;
    worker *ws = NULL;
    if (setup_initiator(sh, &ws) != 0)
        return 1;
    double secs = timed_run(sh, ws, 1);
    const char *verdict = verify_after(sh, ws);
    summary(sh, ws, secs, verdict);
    free_workers(ws, o->threads);
    return atomic_load(&sh->errors) || atomic_load(&sh->verify_bad) ? 2 : 0;
}

static int run_initiator(const opts *o)
{
    shared sh = {.o = o, .seg = -1};
    pthread_mutex_init(&sh.mu, NULL);
    sh.e = make_engine(o, 1);
    if (!sh.e)
        return 1;
    int rc = o->sw.on ? run_sweep(&sh) : run_single(&sh);
    if (o->stats)
        print_stats(sh.e, o->json);
    for (double end = now_s() + o->linger; !g_signalled && now_s() < end;)
        usleep(20000);
    if (sh.local && sh.remote_len) {
        if (!o->alloc)
            tern_unregister_memory(sh.e, sh.local);
        free_buffer(sh.e, o, sh.local, sh.remote_len);
    }
    if (sh.seg >= 0)
        tern_segment_close(sh.e, sh.seg);
    tern_engine_destroy(sh.e);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o) != 0) {
        bench_sweep_opts_free(&o.sw);
        return 64;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = !o.mode ? bench_plot_files(&o.sw)
             : !strcmp(o.mode, "target") ? run_target(&o) : run_initiator(&o);
    bench_sweep_opts_free(&o.sw);
    return rc;
}
