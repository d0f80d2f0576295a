/* tools/bench_plot.c: charts of results against block size, drawn by gnuplot.
 *
 * tern-bench --plot FILE is the one plotting helper of the project: its own
 * sweep, earlier sweeps (--compare) and the JSON of the bench/ scripts
 * (baselines such as iperf3 and memcpy) are drawn the same way.  A results
 * document is one series group { "label": L, "rows": [...] }, an object
 * with "series": [groups], or an array of groups.  A row has "block_size"
 * and "gb_per_s", and may have "op" and "lat_p50_us", "lat_p99_us"; each
 * (label, op) is one line, named "L op" ("L" for rows without op).
 *
 * The chart: GB/s against block size on top, p50 (solid) and p99 (dashed)
 * latency per block below, both on log axes; series without latency (most
 * baselines) are only on the top panel.  This file writes a gnuplot script
 * with the data inline and runs gnuplot on it: no drawing by hand. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_plot.h"

typedef struct series {
    char name[200];
    int pt;                    /* gnuplot point type: by op, so colours that repeat still differ */
    int n, cap;
    double *x, *gbs, *p50, *p99;
} series;

typedef struct chart {
    series *s;
    int n, cap;
} chart;

static void chart_free(chart *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->s[i].x);
        free(c->s[i].gbs);
        free(c->s[i].p50);
        free(c->s[i].p99);
    }
    free(c->s);
}

static series *series_get(chart *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->s[i].name, name))
            return &c->s[i];
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 8;
        series *p = realloc(c->s, (size_t)nc * sizeof *p);
        if (!p)
            return NULL;
        c->s = p;
        c->cap = nc;
    }
    series *s = &c->s[c->n++];
    *s = (series){0};
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static int series_add(series *s, double x, double gbs, double p50, double p99)
{
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 16;
        double *a = realloc(s->x, (size_t)nc * sizeof *a), *b, *c, *d;
        if (a) s->x = a;
        b = realloc(s->gbs, (size_t)nc * sizeof *b);
        if (b) s->gbs = b;
        c = realloc(s->p50, (size_t)nc * sizeof *c);
        if (c) s->p50 = c;
        d = realloc(s->p99, (size_t)nc * sizeof *d);
        if (d) s->p99 = d;
        if (!a || !b || !c || !d)
            return -1;
        s->cap = nc;
    }
    s->x[s->n] = x;
    s->gbs[s->n] = gbs;
    s->p50[s->n] = p50;
    s->p99[s->n] = p99;
    s->n++;
    return 0;
}

/* A number field, or NAN when absent or not positive (log axes). */
static double num(json_object *row, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(row, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return NAN;
    double d = json_object_get_double(v);
    return d > 0 ? d : NAN;
}

static int add_group(chart *c, json_object *g, const char *where)
{
    json_object *lab, *rows;
    if (!json_object_is_type(g, json_type_object) ||
        !json_object_object_get_ex(g, "rows", &rows) ||
        !json_object_is_type(rows, json_type_array)) {
        fprintf(stderr, "tern-bench: %s: a series needs \"rows\": [...]\n", where);
        return -1;
    }
    const char *label = json_object_object_get_ex(g, "label", &lab)
                            ? json_object_get_string(lab) : where;
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        json_object *r = json_object_array_get_idx(rows, i), *op;
        double x = num(r, "block_size");
        if (isnan(x)) {
            fprintf(stderr, "tern-bench: %s: row %zu of '%s' has no block_size\n", where, i,
                    label);
            return -1;
        }
        char name[200];
        if (json_object_object_get_ex(r, "op", &op))
            snprintf(name, sizeof name, "%s %s", label, json_object_get_string(op));
        else
            snprintf(name, sizeof name, "%s", label);
        series *s = series_get(c, name);
        if (s && !s->pt)
            s->pt = !json_object_object_get_ex(r, "op", &op) ? 5 /* square: a baseline */
                    : !strcmp(json_object_get_string(op), "read") ? 9 /* triangle */ : 7;
        if (!s || series_add(s, x, num(r, "gb_per_s"), num(r, "lat_p50_us"),
                             num(r, "lat_p99_us")) < 0)
            return -1;
    }
    return 0;
}

static int add_doc(chart *c, json_object *d, const char *where)
{
    json_object *arr = d;
    if (json_object_is_type(d, json_type_object) && !json_object_object_get_ex(d, "series", &arr))
        return add_group(c, d, where);
    if (!json_object_is_type(arr, json_type_array)) {
        fprintf(stderr, "tern-bench: %s: \"series\" must be an array\n", where);
        return -1;
    }
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        if (add_group(c, json_object_array_get_idx(arr, i), where) < 0)
            return -1;
    return 0;
}

json_object *bench_plot_load(const char *path)
{
    json_object *d = json_object_from_file(path);
    if (!d)
        fprintf(stderr, "tern-bench: --compare %s: not readable as JSON (%s)\n", path,
                json_util_get_last_err() ? json_util_get_last_err() : "?");
    return d;
}

/* ---- the gnuplot script -------------------------------------------------------- */

/* A gnuplot single-quoted string: only ' is special (doubled). */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++)
        fputs(*s == '\'' ? "''" : (char[2]){*s, 0}, f);
    fputc('\'', f);
}

static int has_any(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]))
            return 1;
    return 0;
}

/* 20 colours that stay apart (Tableau 10, then darker and lighter tones). */
static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                     "#000000", "#aec7e8", "#98df8a", "#ff9896", "#c5b0d5",
                                     "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79"};
#define NCOLORS (sizeof colors / sizeof colors[0])

static void put_size_tics(FILE *f, double lo, double hi)
{
    fprintf(f, "set xtics (");
    int first = 1;
    for (double x = 1; x <= hi * 1.01; x *= 4) {
        if (x < lo / 1.01)
            continue;
        uint64_t v = (uint64_t)x;
        const char *u = v >= 1u << 30 ? "G" : v >= 1u << 20 ? "M" : v >= 1u << 10 ? "K" : "";
        uint64_t d = v >= 1u << 30 ? v >> 30 : v >= 1u << 20 ? v >> 20 : v >= 1u << 10 ? v >> 10 : v;
        fprintf(f, "%s'%" PRIu64 "%s' %" PRIu64, first ? "" : ", ", d, u, v);
        first = 0;
    }
    fprintf(f, ")\n");
}

static void put_plot(FILE *f, const chart *c, int latency)
{
    int first = 1;
    fprintf(f, "plot ");
    for (int i = 0; i < c->n; i++) {
        const series *s = &c->s[i];
        const char *col = colors[(size_t)i % NCOLORS];
        if (!latency && has_any(s->gbs, s->n)) {
            fprintf(f, "%s$s%d using 1:2 with linespoints lw 2 pt %d ps 0.8 lc rgb '%s' title ",
                    first ? "" : ", \\\n     ", i, s->pt, col);
            put_quoted(f, s->name);
            first = 0;
        }
        if (latency && has_any(s->p50, s->n)) {
            char t[240];
            fprintf(f, "%s$s%d using 1:3 with linespoints lw 2 pt %d ps 0.8 lc rgb '%s' title ",
                    first ? "" : ", \\\n     ", i, s->pt, col);
            snprintf(t, sizeof t, "%s p50", s->name);
            put_quoted(f, t);
            fprintf(f, ", \\\n     $s%d using 1:4 with lines lw 2 dt 2 lc rgb '%s' title ", i, col);
            snprintf(t, sizeof t, "%s p99", s->name);
            put_quoted(f, t);
            first = 0;
        }
    }
    fprintf(f, "\n");
}

static int cmp_x(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Rows of each series in size order (lines join neighbours). */
static void series_sort(series *s)
{
    double *t = malloc((size_t)s->n * 4 * sizeof *t);
    if (!t)
        return;
    for (int i = 0; i < s->n; i++) {
        t[4 * i] = s->x[i];
        t[4 * i + 1] = s->gbs[i];
        t[4 * i + 2] = s->p50[i];
        t[4 * i + 3] = s->p99[i];
    }
    qsort(t, (size_t)s->n, 4 * sizeof *t, cmp_x);
    for (int i = 0; i < s->n; i++) {
        s->x[i] = t[4 * i];
        s->gbs[i] = t[4 * i + 1];
        s->p50[i] = t[4 * i + 2];
        s->p99[i] = t[4 * i + 3];
    }
    free(t);
}

static int write_script(FILE *f, const char *out, const char *title, chart *c, int png)
{
    double lo = INFINITY, hi = 0;
    int lat = 0, bw = 0;
    for (int i = 0; i < c->n; i++) {
        series *s = &c->s[i];
        series_sort(s);
        fprintf(f, "$s%d << EOD\n", i);
        for (int k = 0; k < s->n; k++) {
            fprintf(f, "%.0f %.6g %.6g %.6g\n", s->x[k], s->gbs[k], s->p50[k], s->p99[k]);
            lo = s->x[k] < lo ? s->x[k] : lo;
            hi = s->x[k] > hi ? s->x[k] : hi;
        }
        fprintf(f, "EOD\n");
        lat |= has_any(s->p50, s->n);
        bw |= has_any(s->gbs, s->n);
    }
    if (!bw) {
        fprintf(stderr, "tern-bench: --plot: no row has a bandwidth (gb_per_s > 0)\n");
        return -1;
    }
    int h = lat ? 900 : 480;
    if (png)
        fprintf(f, "set terminal pngcairo size 1000,%d font 'sans,10' background rgb 'white'\n", h);
    else
        fprintf(f, "set terminal svg size 1000,%d dynamic font 'sans,11' background rgb 'white'\n", h);
    fprintf(f, "set termoption noenhanced\nset output ");
    put_quoted(f, out);
    fprintf(f, "\nset multiplot layout %d,1 title ", lat ? 2 : 1);
    put_quoted(f, title ? title : "");
    /* fixed margins: both panels share one x axis position whatever their keys */
    fprintf(f, "\nset logscale xy\nset grid lc rgb '#dddddd'\nset format y '%%g'\n"
               "set lmargin at screen 0.09\nset rmargin at screen 0.68\n"
               "set key at screen 0.70, graph 1 left top Left reverse\nset xrange [%g:%g]\n", lo / 1.4, hi * 1.4);
    put_size_tics(f, lo, hi);
    fprintf(f, "set xlabel 'block size (bytes)'\nset ylabel 'GB/s (1e9 bytes/s)'\n"
               "set title 'bandwidth'\n");
    put_plot(f, c, 0);
    if (lat) {
        fprintf(f, "set format y '%%.0f'\nset ylabel 'latency per block (us)'\n"
                   "set title 'latency per block: p50 solid, p99 dashed'\n");
        put_plot(f, c, 1);
    }
    fprintf(f, "unset multiplot\nset output\n");
    return ferror(f) ? -1 : 0;
}

/* ---- running gnuplot ----------------------------------------------------------- */

/* $GNUPLOT (a path or a name on $PATH), else gnuplot from $PATH. */
static int find_plotter(char *out, size_t len)
{
    const char *name = getenv("GNUPLOT");
    if (!name || !*name)
        name = "gnuplot";
    if (strchr(name, '/')) {
        snprintf(out, len, "%s", name);
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(out, len, "%.*s/%s", (int)n, n ? p : ".", name);
        if (access(out, X_OK) == 0)
            return 0;
        p += n + (p[n] == ':');
    }
    return -1;
}

static int run_plotter(const char *gp, const char *script)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execl(gp, gp, script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int plot_kind(const char *file)
{
    size_t n = strlen(file);
    if (n > 4 && !strcasecmp(file + n - 4, ".svg"))
        return 0;
    if (n > 4 && !strcasecmp(file + n - 4, ".png"))
        return 1;
    return -1;
}

static int draw(const char *file, const char *title, chart *c, const char *gp)
{
    int png = plot_kind(file);
    const char *tmp = getenv("TMPDIR");
    char script[4096];
    snprintf(script, sizeof script, "%s/tern-bench-plot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(script);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "tern-bench: --plot: cannot write the gnuplot script %s: %s\n", script,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    int rc = write_script(f, file, title, c, png);
    rc |= fclose(f);
    struct stat st;
    if (!rc && (run_plotter(gp, script) != 0 || stat(file, &st) != 0 || st.st_size == 0)) {
        fprintf(stderr, "tern-bench: --plot: %s did not draw %s (its message is above; the "
                        "script it ran was %s)\n", gp, file, script);
        unlink(file);
        return 1; /* the script stays for the look it needs */
    }
    unlink(script);
    return rc ? 1 : 0;
}

int bench_plot(const char *file, const char *title, json_object **docs, const char **names,
               int n)
{
    if (plot_kind(file) < 0) {
        fprintf(stderr, "tern-bench: --plot '%s': the file must end in .svg or .png\n", file);
        return 1;
    }
    char gp[4096];
    if (find_plotter(gp, sizeof gp) != 0) {
        fprintf(stderr, "tern-bench: --plot needs gnuplot, and %s was not found (or is not executable) "
                        "(Debian: apt-get install gnuplot-nox; $GNUPLOT names another); the "
                        "rows themselves are in the --json/--csv output\n",
                getenv("GNUPLOT") && *getenv("GNUPLOT") ? getenv("GNUPLOT") : "gnuplot");
        return BENCH_EXIT_NO_PLOTTER;
    }
    chart c = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = add_doc(&c, docs[i], names[i]) < 0;
    if (!rc)
        rc = draw(file, title, &c, gp);
    chart_free(&c);
    return rc;
}

int bench_plot_files(const bench_sweep_opts *s)
{
    json_object **docs = calloc((size_t)s->ncompare, sizeof *docs);
    int rc = docs ? 0 : 1;
    for (int i = 0; i < s->ncompare && !rc; i++)
        rc = !(docs[i] = bench_plot_load(s->compare[i]));
    if (!rc)
        rc = bench_plot(s->plot, s->title, docs, s->compare, s->ncompare);
    for (int i = 0; docs && i < s->ncompare; i++)
        json_object_put(docs[i]);
    free(docs);
    return rc;
}
