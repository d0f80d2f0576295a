/* tools/bench_sweep.h: tern-bench's size sweeps, their table, CSV and JSON
 * (tools/bench_sweep.c; the charts drawn from them: bench_plot.h).
 *
 * tern-bench.c owns the engine and the timed loop; it hands the sweep one
 * callback that measures one (direction, block size) point.  The sweep
 * owns the list of points, the progress line and every output format, so
 * the single-run code of tern-bench.c stays as it was. */
#ifndef TERN_TOOLS_BENCH_SWEEP_H
#define TERN_TOOLS_BENCH_SWEEP_H

#include <stdint.h>

typedef struct bench_sweep_opts {
    int on;                    /* --sweep given */
    uint64_t from, to;         /* block sizes, powers of two between */
    double seconds;            /* --seconds: per size and direction */
    int json_stdout;           /* --json without a file */
    const char *json_file;     /* --json FILE */
    const char *csv;           /* --csv FILE ("-": stdout) */
    const char *plot;          /* --plot FILE.svg|FILE.png */
    const char *label;         /* --label: this run's series name */
    const char *title;         /* --title: the chart's title */
    const char **compare;      /* --compare A.json B.json ...: earlier results */
    int ncompare;
} bench_sweep_opts;

/* Long options of the sweep and the charts, for tern-bench's option table.
 * --json stays tern-bench's own (it also serves single runs). */
#define BENCH_SWEEP_OPT_BASE 0x100
#define BENCH_SWEEP_LONGOPTS                                                          \
    {"sweep", 2, 0, BENCH_SWEEP_OPT_BASE + 0}, {"seconds", 1, 0, BENCH_SWEEP_OPT_BASE + 1}, \
    {"csv", 1, 0, BENCH_SWEEP_OPT_BASE + 2}, {"plot", 1, 0, BENCH_SWEEP_OPT_BASE + 3},     \
    {"compare", 2, 0, BENCH_SWEEP_OPT_BASE + 4}, {"label", 1, 0, BENCH_SWEEP_OPT_BASE + 5}, \
    {"title", 1, 0, BENCH_SWEEP_OPT_BASE + 6}

/* The usage lines of those options. */
extern const char bench_sweep_usage[];

/* One measured point.  The sweep fills op, block, batch and secs (the time
 * asked for); the measure callback fills the rest (secs: the time taken). */
typedef struct bench_point {
    int op;                    /* TERN_READ or TERN_WRITE */
    uint64_t block;
    int batch;
    double secs;
    uint64_t bytes, ops, errors;
    double p50, p99, p999;     /* microseconds per block */
    char first_error[512];
    char transport[64];        /* the transport the point went over */
} bench_point;

/* Measures one point; returns 0, or < 0 when it could not run at all. */
typedef int (*bench_measure_fn)(void *ctx, bench_point *pt);

/* What the sweep reports about the run as a whole. */
typedef struct bench_sweep_info {
    const char *segment;
    int threads, batch, depth;
    uint64_t usable;           /* bytes each side may use: min(--buffer-size, target's) */
} bench_sweep_info;

/* The option code c with its argument: 1 taken, 0 not a sweep option,
 * -1 invalid (message printed).  Optional arguments may also come as the
 * next word (--sweep 4K..1M, --json out.json, --compare a.json b.json):
 * tern-bench has no positional arguments. */
int bench_sweep_opt(bench_sweep_opts *s, int c, const char *arg, int argc, char **argv);
/* --json's optional FILE (the next word when not an option). */
void bench_sweep_json_opt(bench_sweep_opts *s, const char *arg, int argc, char **argv);
/* After parsing: 0 when the options fit together with mode (NULL: none
 * given), else -1 with a message. */
int bench_sweep_check(bench_sweep_opts *s, const char *mode, int verify);
/* Frees what parsing allocated (the --compare list). */
void bench_sweep_opts_free(bench_sweep_opts *s);
/* Without --mode: only --plot with --compare, drawing earlier results. */
int bench_sweep_plot_only(const bench_sweep_opts *s);

/* Runs the sweep through fn and writes every output asked for; returns
 * tern-bench's exit status (0, 1 failed to run, 2 errors during the run,
 * BENCH_EXIT_NO_PLOTTER of bench_plot.h). */
int bench_sweep_run(const bench_sweep_opts *s, const bench_sweep_info *info,
                    bench_measure_fn fn, void *ctx);

#endif
