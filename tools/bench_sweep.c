/* tools/bench_sweep.c: tern-bench --sweep.
 *
 * Block sizes from FROM to TO (powers of two, default 4 KiB to 64 MiB),
 * both directions at each size (write, then read, so a drift of the
 * machine's load hits both alike), --seconds each (default 0.5: the default
 * sweep is 2 x 15 points, about 15 s).  One progress line per point on
 * stderr; then one row per size and direction as a table on stdout, as CSV
 * (--csv) and as JSON (--json [FILE]), and a chart (--plot, bench_plot.c).
 *
 * The batch of each point is --batch-size, cut down where that many blocks
 * per thread do not fit in the buffer (64 MiB blocks in a 64 MiB buffer:
 * one block per batch), so a sweep runs with tern-bench's defaults. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include <unistd.h>

#include "bench_plot.h"
#include "bench_size.h"
#include "bench_sweep.h"
#include "tern/tern.h"

const char bench_sweep_usage[] =
    "sweeps and charts (initiator):\n"
    "  --sweep [FROM..TO]   every power-of-two block size from FROM to TO (default\n"
    "                       4K..64M), write and read at each: one row per size and\n"
    "                       direction (GB/s, ops/s, p50/p99/p99.9 latency, errors)\n"
    "  --seconds SEC        a sweep's time per size and direction (default 0.5)\n"
    "  --json [FILE]        a sweep's rows as JSON, on stdout or in FILE\n"
    "  --csv FILE           a sweep's rows as CSV ('-': stdout)\n"
    "  --label NAME         this run's name in the JSON and on charts (default 'tern <transport>')\n"
    "  --plot FILE          chart (.svg or .png) of GB/s and p50/p99 latency against\n"
    "                       block size, drawn by gnuplot ($GNUPLOT names another)\n"
    "  --compare A.json ... earlier results (tern-bench --json, bench/ scripts) drawn on\n"
    "                       the same chart; without --mode: --plot FILE --compare ... only\n"
    "  --title TEXT         the chart's title\n";

static const char *next_word(const char *arg, int argc, char **argv)
{
    if (arg)
        return arg;
    if (optind < argc && argv[optind][0] != '-')
        return argv[optind++];
    return NULL;
}

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

/* "FROM..TO", both sizes, powers of two, FROM <= TO. */
static int parse_range(bench_sweep_opts *s, const char *r)
{
    const char *dots = strstr(r, "..");
    char from[64];
    if (!dots || (size_t)(dots - r) >= sizeof from)
        goto bad;
    memcpy(from, r, (size_t)(dots - r));
    from[dots - r] = 0;
    if (bench_parse_size(from, &s->from) || bench_parse_size(dots + 2, &s->to) ||
        !is_pow2(s->from) || !is_pow2(s->to) || s->from > s->to)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "tern-bench: --sweep '%s': expected FROM..TO, powers of two with "
                    "FROM <= TO (e.g. 4K..64M)\n", r);
    return -1;
}

int bench_sweep_opt(bench_sweep_opts *s, int c, const char *arg, int argc, char **argv)
{
    const char *w;
    switch (c - BENCH_SWEEP_OPT_BASE) {
    case 0:
        s->on = 1;
        w = arg;
        /* the next word is a range only when it looks like one */
        if (!w && optind < argc && strstr(argv[optind], ".."))
            w = argv[optind++];
        return w && parse_range(s, w) ? -1 : 1;
    case 1: {
        char *end = NULL;
        s->seconds = strtod(arg, &end);
        if (!*arg || *end || !(s->seconds > 0) || s->seconds > 3600) {
            fprintf(stderr, "tern-bench: --seconds '%s' is not a time in (0, 3600]\n", arg);
            return -1;
        }
        return 1;
    }
    case 2: s->csv = arg; return 1;
    case 3: s->plot = arg; return 1;
    case 4:
        while ((w = next_word(arg, argc, argv))) {
            const char **p = realloc(s->compare, (size_t)(s->ncompare + 1) * sizeof *p);
            if (!p)
                return -1;
            s->compare = p;
            s->compare[s->ncompare++] = w;
            arg = NULL;
        }
        if (!s->ncompare) {
            fprintf(stderr, "tern-bench: --compare needs one or more JSON result files\n");
            return -1;
        }
        return 1;
    case 5: s->label = arg; return 1;
    case 6: s->title = arg; return 1;
    default: return 0;
    }
}

void bench_sweep_json_opt(bench_sweep_opts *s, const char *arg, int argc, char **argv)
{
    const char *f = next_word(arg, argc, argv);
    if (f)
        s->json_file = f;
    else
        s->json_stdout = 1;
}

void bench_sweep_opts_free(bench_sweep_opts *s)
{
    free(s->compare);
    s->compare = NULL;
    s->ncompare = 0;
}

int bench_sweep_plot_only(const bench_sweep_opts *s)
{
    return !s->on && s->plot && s->ncompare > 0;
}

int bench_sweep_check(bench_sweep_opts *s, const char *mode, int verify)
{
    if (s->ncompare && !s->plot) {
        fprintf(stderr, "tern-bench: --compare adds series to a chart: give --plot FILE.svg\n");
        return -1;
    }
    if (s->seconds && !s->on) {
        fprintf(stderr, "tern-bench: --seconds is a sweep's time per point (a single run "
                        "takes --duration)\n");
        return -1;
    }
    if (!s->from) {
        s->from = 4u << 10;
        s->to = 64u << 20;
    }
    if (!s->seconds)
        s->seconds = 0.5;
    if (s->json_stdout && s->csv && !strcmp(s->csv, "-")) {
        fprintf(stderr, "tern-bench: --json and --csv - would both write to stdout: "
                        "give one of them a FILE\n");
        return -1;
    }
    if (!mode)
        return 0;
    int initiator = !strcmp(mode, "initiator");
    if (s->on && !initiator) {
        fprintf(stderr, "tern-bench: --sweep is the initiator's (--mode initiator)\n");
        return -1;
    }
    if (s->on && verify) {
        fprintf(stderr, "tern-bench: --verify checks one size per run: not with --sweep\n");
        return -1;
    }
    if (!s->on && (s->csv || s->json_file || s->plot)) {
        fprintf(stderr, "tern-bench: --csv, --json FILE and --plot write a sweep's rows: "
                        "add --sweep (or, without --mode, --plot FILE --compare A.json ...)\n");
        return -1;
    }
    return 0;
}

/* ---- running --------------------------------------------------------------- */

static const char *op_name(int op) { return op == TERN_READ ? "read" : "write"; }

/* "4K", "64M": sizes in the table and on the progress line. */
static const char *size_name(uint64_t v, char *buf, size_t len)
{
    static const char sfx[] = "BKMGT";
    int i = 0;
    while (v >= 1024 && !(v & 1023) && i < 4) {
        v >>= 10;
        i++;
    }
    if (i)
        snprintf(buf, len, "%" PRIu64 "%c", v, sfx[i]);
    else
        snprintf(buf, len, "%" PRIu64, v);
    return buf;
}

static double gbps(const bench_point *p) { return p->secs > 0 ? (double)p->bytes / p->secs / 1e9 : 0; }
static double opsps(const bench_point *p) { return p->secs > 0 ? (double)p->ops / p->secs : 0; }

static void progress_line(const bench_point *p, int i, int n)
{
    char sz[32];
    fprintf(stderr, "sweep %2d/%d  %-5s %5s  %8.3f GB/s  %9.0f ops/s  p50 %6.0f us  "
            "p99 %6.0f us  errors %" PRIu64 "\n", i, n, op_name(p->op),
            size_name(p->block, sz, sizeof sz), gbps(p), opsps(p), p->p50, p->p99, p->errors);
}

/* The batch of one point: --batch-size, fewer where a thread's share of the
 * buffer holds fewer blocks; 0 when not even one fits. */
static int point_batch(const bench_sweep_info *in, uint64_t block)
{
    uint64_t fit = in->usable / (uint64_t)in->threads / block;
    return fit < (uint64_t)in->batch ? (int)fit : in->batch;
}

static json_object *row_json(const bench_point *p)
{
    json_object *r = json_object_new_object();
    json_object_object_add(r, "op", json_object_new_string(op_name(p->op)));
    json_object_object_add(r, "block_size", json_object_new_uint64(p->block));
    json_object_object_add(r, "batch_size", json_object_new_int(p->batch));
    json_object_object_add(r, "duration_s", json_object_new_double(p->secs));
    json_object_object_add(r, "bytes", json_object_new_uint64(p->bytes));
    json_object_object_add(r, "gb_per_s", json_object_new_double(gbps(p)));
    json_object_object_add(r, "ops_per_s", json_object_new_double(opsps(p)));
    json_object_object_add(r, "lat_p50_us", json_object_new_double(p->p50));
    json_object_object_add(r, "lat_p99_us", json_object_new_double(p->p99));
    json_object_object_add(r, "lat_p999_us", json_object_new_double(p->p999));
    json_object_object_add(r, "errors", json_object_new_uint64(p->errors));
    if (p->first_error[0])
        json_object_object_add(r, "first_error", json_object_new_string(p->first_error));
    return r;
}

static json_object *sweep_json(const bench_sweep_opts *s, const bench_sweep_info *in,
                               const char *label, const char *transport,
                               const bench_point *pts, int n)
{
    json_object *d = json_object_new_object(), *rows = json_object_new_array();
    json_object_object_add(d, "tern_bench", json_object_new_string("sweep"));
    json_object_object_add(d, "label", json_object_new_string(label));
    json_object_object_add(d, "transport", json_object_new_string(transport));
    json_object_object_add(d, "segment", json_object_new_string(in->segment));
    json_object_object_add(d, "threads", json_object_new_int(in->threads));
    json_object_object_add(d, "batch_size", json_object_new_int(in->batch));
    json_object_object_add(d, "queue_depth", json_object_new_int(in->depth));
    json_object_object_add(d, "seconds_per_point", json_object_new_double(s->seconds));
    for (int i = 0; i < n; i++)
        json_object_array_add(rows, row_json(&pts[i]));
    json_object_object_add(d, "rows", rows);
    return d;
}

static int write_json(const char *path, json_object *d)
{
    const char *txt = json_object_to_json_string_ext(d, JSON_C_TO_STRING_PRETTY |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE);
    FILE *f = path ? fopen(path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "tern-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "%s\n", txt);
    int bad = ferror(f);
    if (path)
        bad |= fclose(f);
    else
        fflush(f);
    if (bad)
        fprintf(stderr, "tern-bench: writing %s failed\n", path ? path : "stdout");
    return bad ? -1 : 0;
}

static int write_csv(const char *path, const char *label, const char *transport,
                     const bench_point *pts, int n)
{
    int out = !strcmp(path, "-");
    FILE *f = out ? stdout : fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tern-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "label,transport,op,block_size,batch_size,duration_s,gb_per_s,ops_per_s,"
               "lat_p50_us,lat_p99_us,lat_p999_us,errors\n");
    for (int i = 0; i < n; i++) {
        const bench_point *p = &pts[i];
        /* labels are the user's: quote them, doubling quotes (RFC 4180) */
        fputc('"', f);
        for (const char *c = label; *c; c++)
            fputs(*c == '"' ? "\"\"" : (char[2]){*c, 0}, f);
        fprintf(f, "\",%s,%s,%" PRIu64 ",%d,%.3f,%.4f,%.1f,%.0f,%.0f,%.0f,%" PRIu64 "\n",
                transport, op_name(p->op), p->block, p->batch, p->secs, gbps(p), opsps(p),
                p->p50, p->p99, p->p999, p->errors);
    }
    int bad = ferror(f);
    bad |= out ? fflush(f) : fclose(f);
    if (bad)
        fprintf(stderr, "tern-bench: writing %s failed\n", path);
    return bad ? -1 : 0;
}

static void print_table(const char *label, const char *transport, const bench_sweep_info *in,
                        const bench_point *pts, int n, double secs)
{
    printf("tern-bench sweep: %s over %s to %s, %d thread(s), batch up to %d, depth %d, "
           "%.2f s per point\n", label, transport, in->segment, in->threads, in->batch,
           in->depth, secs);
    printf("%-5s %6s %5s %9s %11s %9s %9s %9s %7s\n", "op", "block", "batch", "GB/s",
           "ops/s", "p50 us", "p99 us", "p99.9 us", "errors");
    for (int i = 0; i < n; i++) {
        const bench_point *p = &pts[i];
        char sz[32];
        printf("%-5s %6s %5d %9.3f %11.0f %9.0f %9.0f %9.0f %7" PRIu64 "\n", op_name(p->op),
               size_name(p->block, sz, sizeof sz), p->batch, gbps(p), opsps(p), p->p50, p->p99,
               p->p999, p->errors);
    }
    fflush(stdout);
}

/* Every point, write and read at each size; rows sorted by direction, then size. */
static int measure_all(const bench_sweep_opts *s, const bench_sweep_info *in,
                       bench_measure_fn fn, void *ctx, bench_point *pts, int nsizes,
                       char *transport, size_t tlen)
{
    /* A short unrecorded run first: the connection is made and the pages of
     * both buffers are touched before the first point counts. */
    bench_point warm = {.op = TERN_WRITE, .block = s->from, .batch = point_batch(in, s->from),
                        .secs = 0.2};
    if (fn(ctx, &warm) < 0)
        return -1;
    snprintf(transport, tlen, "%s", warm.transport[0] ? warm.transport : "?");
    int total = 2 * nsizes, done = 0;
    for (int k = 0; k < nsizes; k++) {
        for (int d = 0; d < 2; d++) {
            bench_point *p = &pts[d * nsizes + k];
            *p = (bench_point){.op = d ? TERN_READ : TERN_WRITE, .block = s->from << k,
                               .secs = s->seconds};
            p->batch = point_batch(in, p->block);
            if (fn(ctx, p) < 0)
                return -1;
            progress_line(p, ++done, total);
        }
    }
    return 0;
}

int bench_sweep_run(const bench_sweep_opts *s, const bench_sweep_info *in,
                    bench_measure_fn fn, void *ctx)
{
    if (point_batch(in, s->to) < 1) {
        fprintf(stderr, "tern-bench: --sweep up to %" PRIu64 " B needs that much buffer per "
                "thread; the smaller of --buffer-size and the target's buffer is %" PRIu64
                " B for %d thread(s)\n", s->to, in->usable, in->threads);
        return 1;
    }
    int nsizes = 0;
    for (uint64_t b = s->from; b <= s->to; b <<= 1)
        nsizes++;
    bench_point *pts = calloc((size_t)(2 * nsizes), sizeof *pts);
    char transport[64];
    if (!pts || measure_all(s, in, fn, ctx, pts, nsizes, transport, sizeof transport) < 0) {
        free(pts);
        return 1;
    }
    char deflabel[96];
    snprintf(deflabel, sizeof deflabel, "tern %s", transport);
    const char *label = s->label ? s->label : deflabel;
    int n = 2 * nsizes, rc = 0;
    uint64_t errors = 0;
    for (int i = 0; i < n; i++) {
        errors += pts[i].errors;
        if (pts[i].first_error[0] && errors == pts[i].errors)
            fprintf(stderr, "tern-bench: first error: %s\n", pts[i].first_error);
    }
    /* stdout carries one format: the JSON, the CSV or the table */
    if (!s->json_stdout && !(s->csv && !strcmp(s->csv, "-")))
        print_table(label, transport, in, pts, n, s->seconds);
    json_object *doc = sweep_json(s, in, label, transport, pts, n);
    if (s->json_stdout && write_json(NULL, doc) < 0)
        rc = 1;
    if (s->json_file && write_json(s->json_file, doc) < 0)
        rc = 1;
    if (s->csv && write_csv(s->csv, label, transport, pts, n) < 0)
        rc = 1;
    if (!rc && s->plot) {
        json_object **docs = calloc((size_t)s->ncompare + 1, sizeof *docs);
        const char **names = calloc((size_t)s->ncompare + 1, sizeof *names);
        int nd = 0;
        rc = !docs || !names;
        for (int i = 0; !rc && i < s->ncompare; i++) {
            names[nd] = s->compare[i];
            if (!(docs[nd++] = bench_plot_load(s->compare[i])))
                rc = 1;
        }
        if (!rc) {
            names[nd] = "this run";
            docs[nd++] = json_object_get(doc);
            rc = bench_plot(s->plot, s->title, docs, names, nd);
        }
        for (int i = 0; docs && i < nd; i++)
            json_object_put(docs[i]);
        free(docs);
        free(names);
    }
    json_object_put(doc);
    free(pts);
    return rc ? rc : errors ? 2 : 0;
}
