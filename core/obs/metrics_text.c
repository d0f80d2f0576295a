/* core/obs/metrics_text.c: the counter sets as Prometheus text exposition
 * format 0.0.4 (see metrics_text.h).  Each family is written once with every
 * series of it (the format wants a family's lines together), so the sets
 * are copied first and the families walked second. */
#include "obs/metrics_text.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 16384;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label(sbuf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            put(b, "\\\\");
        else if (*v == '"')
            put(b, "\\\"");
        else if (*v == '\n')
            put(b, "\\n");
        else
            put(b, "%c", *v);
    }
}

/* ---- collecting the sets ------------------------------------------------------------ */

typedef struct sets {
    tern_stats *v;
    char **names;
    size_t n, cap;
    int oom;
} sets;

static int collect(const tern_stats *st, void *arg)
{
    sets *s = arg;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        tern_stats *v = realloc(s->v, cap * sizeof *v);
        if (v)
            s->v = v;
        char **names = v ? realloc(s->names, cap * sizeof *names) : NULL;
        if (names)
            s->names = names;
        if (!v || !names) {
            s->oom = 1;
            return 1;
        }
        s->cap = cap;
    }
    char *name = strdup(st->name ? st->name : "");
    if (!name) {
        s->oom = 1;
        return 1;
    }
    s->v[s->n] = *st;
    s->names[s->n++] = name;
    return 0;
}

/* ---- the families ------------------------------------------------------------------ */

static const char *const op_names[2] = {"read", "write"};

/* Which sets a family covers: the engine's ("tern_..."), the transports'
 * ("tern_transport_...", label transport) or the peers' ("tern_peer_...",
 * label peer). */
typedef struct scope {
    uint32_t kind;
    const char *prefix, *label, *what;
} scope;

static const scope scopes[] = {
    {TERN_STATS_ENGINE, "tern_", NULL, "of the engine"},
    {TERN_STATS_TRANSPORT, "tern_transport_", "transport", "per transport"},
    {TERN_STATS_PEER, "tern_peer_", "peer", "per peer segment"},
};

/* A series' name and labels: sc's label (transport or peer) with the set's
 * name, then extra (`op="read"`, ...; may be empty); no braces when there
 * is no label.  The caller writes the value. */
static void series(sbuf *b, const scope *sc, const char *fam, const char *suffix,
                   const char *name, const char *extra)
{
    put(b, "%s%s%s", sc->prefix, fam, suffix);
    if (!sc->label && !*extra) {
        put(b, " ");
        return;
    }
    put(b, "{");
    if (sc->label) {
        put(b, "%s=\"", sc->label);
        put_label(b, name);
        put(b, "\"%s", *extra ? "," : "");
    }
    put(b, "%s} ", extra);
}

static void head(sbuf *b, const scope *sc, const char *fam, const char *type, const char *help)
{
    put(b, "# HELP %s%s %s, %s.\n# TYPE %s%s %s\n", sc->prefix, fam, help, sc->what, sc->prefix,
        fam, type);
}

enum { F_BYTES, F_OPS, F_FAIL };

static void by_op(sbuf *b, const sets *s, const scope *sc, const char *fam, int which,
                  const char *help)
{
    head(b, sc, fam, "counter", help);
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].kind != sc->kind)
            continue;
        for (int op = 0; op < 2; op++) {
            const tern_stats *t = &s->v[i];
            uint64_t v = which == F_BYTES ? t->bytes[op] : which == F_OPS ? t->ops[op]
                                                                            : t->failures[op];
            char extra[32];
            snprintf(extra, sizeof extra, "op=\"%s\"", op_names[op]);
            series(b, sc, fam, "", s->names[i], extra);
            put(b, "%llu\n", (unsigned long long)v);
        }
    }
}

/* The error label: the code's name without TERN_ERR_, in lower case. */
static void error_name(int i, char *out, size_t len)
{
    const char *n = i ? tern_strerror(-i) : "other";
    if (!strncmp(n, "TERN_ERR_", 9))
        n += 9;
    size_t k = 0;
    for (; n[k] && k + 1 < len; k++)
        out[k] = (char)tolower((unsigned char)n[k]);
    out[k] = 0;
}

static void errors(sbuf *b, const sets *s, const scope *sc)
{
    head(b, sc, "transfer_errors_total", "counter",
         "Requests that did not complete, by error code");
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].kind != sc->kind)
            continue;
        for (int e = 0; e < TERN_STATS_ERRORS; e++) {
            if (!s->v[i].errors[e])
                continue;
            char name[48];
            error_name(e, name, sizeof name);
            char extra[64];
            snprintf(extra, sizeof extra, "error=\"%s\"", name);
            series(b, sc, "transfer_errors_total", "", s->names[i], extra);
            put(b, "%llu\n", (unsigned long long)s->v[i].errors[e]);
        }
    }
}

static uint64_t field(const tern_stats *t, int f)
{
    switch (f) {
    case 0: return t->retries;
    case 1: return t->refetches;
    case 2: return t->fallbacks;
    default: return t->heals;
    }
}

static void events(sbuf *b, const sets *s, const scope *sc)
{
    static const char *const fams[4][2] = {
        {"retries_total", "Slice attempts repeated after a failure"},
        {"refetches_total", "Peer descriptors fetched again to heal a failure"},
        {"fallbacks_total", "Peers moved to their next common transport"},
        {"heals_total", "Refetches that found a newer descriptor generation"},
    };
    for (int f = 0; f < 4; f++) {
        head(b, sc, fams[f][0], "counter", fams[f][1]);
        for (size_t i = 0; i < s->n; i++) {
            if (s->v[i].kind != sc->kind)
                continue;
            series(b, sc, fams[f][0], "", s->names[i], "");
            put(b, "%llu\n", (unsigned long long)field(&s->v[i], f));
        }
    }
}

static void in_flight(sbuf *b, const sets *s, const scope *sc)
{
    if (sc->kind == TERN_STATS_TRANSPORT)
        return; /* a request is not bound to one transport until it ends */
    head(b, sc, "requests_in_flight", "gauge", "Requests submitted and not ended");
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].kind != sc->kind)
            continue;
        series(b, sc, "requests_in_flight", "", s->names[i], "");
        put(b, "%lld\n", (long long)s->v[i].in_flight);
    }
}

static void histogram(sbuf *b, const sets *s, const scope *sc)
{
    const char *fam = "transfer_duration_seconds";
    head(b, sc, fam, "histogram", "Time from submit to completion of COMPLETED requests");
    for (size_t i = 0; i < s->n; i++) {
        const tern_stats *t = &s->v[i];
        if (t->kind != sc->kind)
            continue;
        for (int op = 0; op < 2; op++) {
            char extra[64];
            uint64_t cum = 0;
            for (int k = 0; k < TERN_STATS_BUCKETS; k++) {
                cum += t->latency[op][k];
                if (k == TERN_STATS_BUCKETS - 1)
                    snprintf(extra, sizeof extra, "op=\"%s\",le=\"+Inf\"", op_names[op]);
                else
                    snprintf(extra, sizeof extra, "op=\"%s\",le=\"%.9g\"", op_names[op],
                             (double)(1ull << k) * 1e-6);
                series(b, sc, fam, "_bucket", s->names[i], extra);
                put(b, "%llu\n", (unsigned long long)cum);
            }
            snprintf(extra, sizeof extra, "op=\"%s\"", op_names[op]);
            series(b, sc, fam, "_sum", s->names[i], extra);
            put(b, "%.9f\n", (double)t->latency_sum_ns[op] * 1e-9);
            series(b, sc, fam, "_count", s->names[i], extra);
            put(b, "%llu\n", (unsigned long long)cum);
        }
    }
}

static void render_scope(sbuf *b, const sets *s, const scope *sc)
{
    by_op(b, s, sc, "transfer_bytes_total", F_BYTES, "Bytes moved");
    by_op(b, s, sc, "transfer_requests_total", F_OPS, "Requests COMPLETED");
    by_op(b, s, sc, "transfer_failures_total", F_FAIL,
          "Requests that ended FAILED, TIMEOUT, CANCELED or INVALID");
    errors(b, s, sc);
    events(b, s, sc);
    in_flight(b, s, sc);
    histogram(b, s, sc);
}

char *tern_metrics_render(tern_stats_obj *st, const char *engine_name, size_t *len)
{
    sets s = {0};
    tern_stats_each(st, engine_name, collect, &s);
    sbuf b = {0};
    put(&b, "# HELP tern_engine_info The engine this endpoint belongs to.\n"
            "# TYPE tern_engine_info gauge\ntern_engine_info{engine=\"");
    put_label(&b, engine_name ? engine_name : "");
    put(&b, "\"} 1\n");
    for (size_t i = 0; i < sizeof scopes / sizeof scopes[0]; i++)
        render_scope(&b, &s, &scopes[i]);
    for (size_t i = 0; i < s.n; i++)
        free(s.names[i]);
    free(s.names);
    free(s.v);
    if (b.oom || s.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
