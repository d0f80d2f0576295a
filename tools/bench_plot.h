/* tools/bench_plot.h: charts of tern-bench's results against block size,
 * drawn by gnuplot (tools/bench_plot.c). */
#ifndef TERN_TOOLS_BENCH_PLOT_H
#define TERN_TOOLS_BENCH_PLOT_H

#include <json-c/json.h>

#include "bench_sweep.h"

/* Exit status of tern-bench when --plot cannot run its plotting tool. */
#define BENCH_EXIT_NO_PLOTTER 69

/* Draws the series of docs[0..n) (sweep results, or bench/ results: an
 * object with "rows", one with "series", or an array of series) to file
 * with gnuplot (names[i]: where docs[i] came from, for messages): 0,
 * BENCH_EXIT_NO_PLOTTER, or 1 on another failure. */
int bench_plot(const char *file, const char *title, json_object **docs, const char **names,
               int n);
/* Without --mode: --plot FILE --compare A.json ...; tern-bench's exit status. */
int bench_plot_files(const bench_sweep_opts *s);
/* Reads one results file; NULL with a message when it is not one. */
json_object *bench_plot_load(const char *path);

#endif
