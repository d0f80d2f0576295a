/* core/config.c: the engine's YAML configuration (libyaml), validated.
 *
 * Two passes.  First libyaml's event stream is turned into a small tree of
 * nodes (scalar / list / mapping, each with its 1-based line and column);
 * depth, node count, key count, scalar length and input size are capped so
 * that hostile input cannot exhaust the stack or memory, and aliases and
 * tags are refused (a configuration has no use for them, and aliases are how
 * "billion laughs" inputs explode).  Then the tree is checked against the
 * schema below and copied into a tern_config.  Every failure is ONE message
 * "ORIGIN:LINE:COL: KEY.PATH: expected WHAT, got WHAT" and TERN_ERR_CONFIG.
 * Mapping members are reported at their key, list items at the item. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, strndup, strcasecmp (CMake also sets it) */
#endif
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>
#include <yaml.h>

#include "util.h"

/* ---- limits: generous for any real file, small for a fuzzer -------------- */
#define CFG_MAX_INPUT (1u << 20)   /* bytes of YAML */
#define CFG_MAX_DEPTH 8            /* root map > transports > entry > list */
#define CFG_MAX_NODES 65536
#define CFG_MAX_SCALAR 4096        /* bytes in one scalar */
#define CFG_MAX_KEYS 256           /* keys in one mapping */
#define CFG_MAX_ITEMS 1024         /* items in one list */
#define CFG_MAX_TRANSPORTS 32
#define CFG_MAX_PATH 256           /* key path text */

#define SLICE_MIN (4ull << 10)
#define SLICE_MAX (64ull << 20)
#define TIMEOUT_MAX 3600000        /* one hour, in ms */

#define TERN_EXPORT __attribute__((visibility("default")))

static const char tern_default_yaml[] =
    "# tern: the default engine configuration.\n"
    "#\n"
    "# This is the configuration tern uses when it is given no file and\n"
    "# $TERN_CONFIG is unset (the same text is compiled into libtern).  It needs\n"
    "# nothing else to run: peers on the same host over shm (one memory copy),\n"
    "# others over TCP, peers found through their handshake daemons (p2p\n"
    "# metadata).  Every key is described in docs/configuration.md.\n"
    "\n"
    "# host:port of this engine's handshake daemon; its segment name for peers.\n"
    "# Port 0 picks a free port (read it back with tern_engine_server_name()).\n"
    "server_name: 127.0.0.1:12001\n"
    "\n"
    "# Where segment descriptors live: p2p (ask the peer's daemon directly),\n"
    "# redis://host:port[/db], etcd://host:port[,host:port...] or http://host:port/path.\n"
    "metadata: p2p\n"
    "\n"
    "# Transports in order of preference: the first one that a peer also speaks\n"
    "# (and that loaded here) carries the bytes.  shm reaches only engines on\n"
    "# this host that it may read (same boot, same pid namespace, ptrace\n"
    "# permission); any other peer is moved to tcp.\n"
    "transports:\n"
    "  - name: shm\n"
    "  - name: tcp\n"
    "\n"
    "# Bytes per slice (K/M/G suffixes), and attempts after a failed slice.\n"
    "slice_size: 64K\n"
    "retries: 3\n"
    "\n"
    "# error, warn, info or debug ($TERN_LOG_LEVEL overrides it).\n"
    "log_level: info\n";

const char *tern_config_default_yaml(void) { return tern_default_yaml; }

/* ---- the node tree --------------------------------------------------------- */
enum { YN_SCALAR, YN_SEQ, YN_MAP };

typedef struct ynode {
    int kind;
    int isnull;             /* plain "", "~", "null": no value */
    char *text;             /* scalars */
    int line, col;          /* 1-based */
    struct ynode **kids;    /* SEQ: items; MAP: key, value, key, value... */
    size_t n, cap;
} ynode;

typedef struct cfgctx {
    const char *origin;
    char *err;
    size_t errlen;
    const char *input;      /* for positions of reader errors */
    size_t inlen;
    size_t nnodes;
} cfgctx;

static void ynode_free(ynode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        ynode_free(n->kids[i]);
    free(n->kids);
    free(n->text);
    free(n);
}

/* One message, "ORIGIN:LINE:COL: PATH: ...". */
__attribute__((format(printf, 5, 6)))
static int cfg_err(cfgctx *c, int line, int col, const char *path, const char *fmt, ...)
{
    if (!c->err || !c->errlen)
        return TERN_ERR_CONFIG;
    int k = snprintf(c->err, c->errlen, "%s:%d:%d: %s: ", c->origin, line, col,
                     path && *path ? path : "(root)");
    if (k >= 0 && (size_t)k < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    /* keys and libyaml text come from the input: no control characters */
    for (char *p = c->err; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return TERN_ERR_CONFIG;
}

static int is_int_text(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

/* Printable, bounded rendering of user text for a message. */
static const char *show_text(const char *t, char *buf, size_t len)
{
    if (is_int_text(t) && strlen(t) < 24) {
        snprintf(buf, len, "%s", t);
        return buf;
    }
    /* len >= 16 at every call site: room for the quotes, "..." and NUL */
    size_t o = 0, i = 0, max = len - 6;
    buf[o++] = '"';
    for (; t[i] && o < max; i++)
        buf[o++] = isprint((unsigned char)t[i]) ? t[i] : '?';
    if (t[i])
        buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* What the user wrote, in words: `9000`, `"abc"`, `null`, `a list`. */
static const char *show(const ynode *n, char *buf, size_t len)
{
    if (n->kind == YN_SEQ)
        return n->n ? "a list" : "an empty list";
    if (n->kind == YN_MAP)
        return n->n ? "a mapping" : "an empty mapping";
    if (n->isnull)
        return "null";
    return show_text(n->text, buf, len);
}

/* Key paths: "base.key" (or "key" at the root), truncated to fit. */
static void path_join(char *dst, size_t len, const char *base, const char *key)
{
    size_t o = tern_strlcpy(dst, base, len);
    if (*base && o + 1 < len)
        dst[o++] = '.', dst[o] = '\0';
    if (o < len)
        tern_strlcpy(dst + o, key, len - o);
}

/* "base[i]". */
static void path_index(char *dst, size_t len, const char *base, size_t i)
{
    char idx[32];
    snprintf(idx, sizeof idx, "[%zu]", i);
    size_t o = tern_strlcpy(dst, base, len);
    if (o < len)
        tern_strlcpy(dst + o, idx, len - o);
}

/* ---- pass 1: events -> tree ------------------------------------------------ */
typedef struct builder {
    cfgctx *c;
    ynode *root;
    ynode *stack[CFG_MAX_DEPTH + 1];
    int depth;
    int ndocs;
} builder;

/* Key path of the position the builder is at, e.g. "transports[1].mtu". */
static void builder_path(const builder *b, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < b->depth && o < len; i++) {
        /* Below the innermost container the current child is attached
         * already; in the innermost one it is still to come. */
        const ynode *p = b->stack[i];
        int top = i == b->depth - 1, k = 0;
        size_t cur = top ? p->n : p->n - 1;
        if (p->kind == YN_SEQ)
            k = snprintf(out + o, len - o, "[%zu]", cur);
        else if (cur % 2 == 1 && p->kids[cur - 1]->kind == YN_SCALAR)
            k = snprintf(out + o, len - o, "%s%s", o ? "." : "", p->kids[cur - 1]->text);
        else
            break;
        if (k < 0)
            break;
        o += (size_t)k;
    }
    if (o >= len)
        out[len - 1] = '\0';
}

__attribute__((format(printf, 3, 4)))
static int builder_err(builder *b, yaml_mark_t m, const char *fmt, ...)
{
    char path[CFG_MAX_PATH], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    builder_path(b, path, sizeof path);
    return cfg_err(b->c, (int)m.line + 1, (int)m.column + 1, path, "%s", msg);
}

static ynode *ynode_new(builder *b, int kind, yaml_mark_t m)
{
    if (++b->c->nnodes > CFG_MAX_NODES)
        return NULL;
    ynode *n = calloc(1, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = (int)m.line + 1;
        n->col = (int)m.column + 1;
    }
    return n;
}

static int ynode_push(ynode *p, ynode *kid)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        ynode **k = realloc(p->kids, cap * sizeof *k);
        if (!k)
            return TERN_ERR_NOMEM;
        p->kids = k;
        p->cap = cap;
    }
    p->kids[p->n++] = kid;
    return 0;
}

/* Attach a new node under the innermost open list/mapping (or as the root),
 * enforcing scalar keys, unique keys and the size caps.  Takes ownership. */
static int builder_attach(builder *b, ynode *n, yaml_mark_t m)
{
    if (b->depth == 0) {
        if (b->root) {
            ynode_free(n);
            return builder_err(b, m, "expected a single document, got %s", "a second one");
        }
        b->root = n;
        return 0;
    }
    ynode *p = b->stack[b->depth - 1];
    if (p->kind == YN_MAP && p->n % 2 == 0) {
        int rc = 0;
        if (n->kind != YN_SCALAR || n->isnull)
            rc = builder_err(b, m, "expected a plain key, got %s",
                             n->kind == YN_SEQ   ? "a list"
                             : n->kind == YN_MAP ? "a mapping"
                                                 : "null");
        else if (p->n / 2 >= CFG_MAX_KEYS)
            rc = builder_err(b, m, "expected at most 256 keys in a mapping, got %s", "more");
        for (size_t i = 0; !rc && i < p->n; i += 2) {
            if (strcmp(p->kids[i]->text, n->text) == 0) {
                char path[CFG_MAX_PATH], what[CFG_MAX_PATH];
                builder_path(b, path, sizeof path);
                path_join(what, sizeof what, path, n->text);
                rc = cfg_err(b->c, n->line, n->col, what,
                             "expected each key once, got a duplicate (first at %d:%d)",
                             p->kids[i]->line, p->kids[i]->col);
            }
        }
        if (rc) {
            ynode_free(n);
            return rc;
        }
    } else if (p->kind == YN_SEQ && p->n >= CFG_MAX_ITEMS) {
        ynode_free(n);
        return builder_err(b, m, "expected at most 1024 list items, got %s", "more");
    }
    if (ynode_push(p, n) < 0) {
        ynode_free(n);
        return TERN_ERR_NOMEM;
    }
    return 0;
}

static int builder_open(builder *b, int kind, yaml_mark_t m, const yaml_char_t *tag)
{
    if (tag)
        return builder_err(b, m, "expected an untagged value, got tag %s", (const char *)tag);
    if (b->depth >= CFG_MAX_DEPTH)
        return builder_err(b, m, "expected at most 8 levels of nesting, got %s", "deeper");
    ynode *n = ynode_new(b, kind, m);
    if (!n)
        return b->c->nnodes > CFG_MAX_NODES
                   ? builder_err(b, m, "expected at most 65536 values, got %s", "more")
                   : TERN_ERR_NOMEM;
    int rc = builder_attach(b, n, m);
    if (rc)
        return rc;
    b->stack[b->depth++] = n;
    return 0;
}

static int builder_scalar(builder *b, const yaml_event_t *ev)
{
    yaml_mark_t m = ev->start_mark;
    const char *v = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (ev->data.scalar.tag)
        return builder_err(b, m, "expected an untagged value, got tag %s",
                           (const char *)ev->data.scalar.tag);
    if (len > CFG_MAX_SCALAR)
        return builder_err(b, m, "expected a value of at most 4096 bytes, got %s", "a longer one");
    if (memchr(v, '\0', len))
        return builder_err(b, m, "expected text, got %s", "a NUL byte");
    ynode *n = ynode_new(b, YN_SCALAR, m);
    if (!n)
        return b->c->nnodes > CFG_MAX_NODES
                   ? builder_err(b, m, "expected at most 65536 values, got %s", "more")
                   : TERN_ERR_NOMEM;
    n->text = malloc(len + 1);
    if (!n->text) {
        ynode_free(n);
        return TERN_ERR_NOMEM;
    }
    memcpy(n->text, v, len);
    n->text[len] = '\0';
    n->isnull = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                (!len || !strcmp(n->text, "~") || !strcmp(n->text, "null") ||
                 !strcmp(n->text, "Null") || !strcmp(n->text, "NULL"));
    return builder_attach(b, n, m);
}

/* libyaml's own problem text and position; reader errors carry an offset. */
static int builder_yaml_error(builder *b, const yaml_parser_t *p)
{
    yaml_mark_t m = p->problem_mark;
    if (p->error == YAML_READER_ERROR) {
        m.line = m.column = 0;
        for (size_t i = 0; i < p->problem_offset && i < b->c->inlen; i++) {
            if (b->c->input[i] == '\n')
                m.line++, m.column = 0;
            else
                m.column++;
        }
    }
    char what[256];
    if (p->error == YAML_MEMORY_ERROR)
        return TERN_ERR_NOMEM;
    if (p->context)
        snprintf(what, sizeof what, "%s (%s at %zu:%zu)", p->problem ? p->problem : "an error",
                 p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    else
        snprintf(what, sizeof what, "%s", p->problem ? p->problem : "an error");
    return builder_err(b, m, "expected valid YAML, got %s", what);
}

static int builder_event(builder *b, const yaml_event_t *ev, int *done)
{
    switch (ev->type) {
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return 0;
    case YAML_DOCUMENT_START_EVENT:
        if (++b->ndocs > 1)
            return builder_err(b, ev->start_mark, "expected a single document, got %s",
                               "a second one");
        return 0;
    case YAML_ALIAS_EVENT:
        return builder_err(b, ev->start_mark,
                           "expected a value, got alias *%s (aliases are not supported)",
                           (const char *)ev->data.alias.anchor);
    case YAML_SCALAR_EVENT:
        return builder_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return builder_open(b, YN_SEQ, ev->start_mark, ev->data.sequence_start.tag);
    case YAML_MAPPING_START_EVENT:
        return builder_open(b, YN_MAP, ev->start_mark, ev->data.mapping_start.tag);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (b->depth > 0)
            b->depth--;
        return 0;
    default:
        return 0;
    }
}

/* Parse YAML text into a tree (*root NULL for an empty stream). */
static int yaml_to_tree(cfgctx *c, ynode **root)
{
    yaml_parser_t p;
    builder b = {.c = c};
    *root = NULL;
    if (!yaml_parser_initialize(&p))
        return TERN_ERR_NOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)c->input, c->inlen);
    int rc = 0, done = 0;
    while (!rc && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = builder_yaml_error(&b, &p);
            break;
        }
        rc = builder_event(&b, &ev, &done);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (rc) {
        ynode_free(b.root);
        return rc;
    }
    *root = b.root;
    return 0;
}

/* ---- value parsers (shared by the schema and check_options) ---------------- */
int tern_parse_size(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t v = 0, mul = 1;
    if (!p || !isdigit((unsigned char)*p))
        return TERN_ERR_INVAL;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return TERN_ERR_INVAL;
        v = v * 10 + d;
    }
    switch (*p) {
    case 'k': case 'K': mul = 1ull << 10; break;
    case 'm': case 'M': mul = 1ull << 20; break;
    case 'g': case 'G': mul = 1ull << 30; break;
    case 't': case 'T': mul = 1ull << 40; break;
    default: break;
    }
    if (mul > 1) {
        p++;
        if (p[0] == 'i' && p[1] == 'B')
            p += 2;
        else if (p[0] == 'B')
            p++;
    } else if (p[0] == 'B') {
        p++;
    }
    if (*p || v > UINT64_MAX / mul)
        return TERN_ERR_INVAL;
    *out = v * mul;
    return 0;
}

/* Strict decimal integer: optional sign, digits, nothing else. */
static int parse_i64(const char *t, int64_t *out)
{
    if (!is_int_text(t))
        return TERN_ERR_INVAL;
    errno = 0;
    char *end;
    long long v = strtoll(t, &end, 10);
    if (errno || *end)
        return TERN_ERR_INVAL;
    *out = v;
    return 0;
}

static int parse_bool(const char *t, int *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(t, yes[i]))
            return *out = 1, 0;
        if (!strcasecmp(t, no[i]))
            return *out = 0, 0;
    }
    return TERN_ERR_INVAL;
}

/* "error|warn|info|debug" (any case) or 0..3. */
static int parse_log_level(const char *t, int *out)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        char digit[2] = {(char)('0' + i), 0};
        if (!strcasecmp(t, names[i]) || !strcmp(t, digit))
            return *out = i, 0;
    }
    return TERN_ERR_INVAL;
}
#define LOG_LEVEL_WHAT "one of error, warn, info, debug, 0, 1, 2, 3"

/* "64K"-style rendering of a byte count for messages and JSON. */
static void fmt_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v && v % 1024 == 0)
        v /= 1024, u++;
    if (u >= 0)
        snprintf(buf, len, "%" PRIu64 "%c", v, units[u]);
    else
        snprintf(buf, len, "%" PRIu64, v);
}

static int span_chars(const char *s, size_t n, const char *extra)
{
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr(extra, s[i]))
            return 0;
    return 1;
}

/* host:port with host a name, an IPv4 address or [IPv6]; port 0..65535.
 * need_port 0 makes ":port" optional. */
static int valid_hostport(const char *s, size_t n, int need_port)
{
    size_t h;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close || close == s + 1 || !span_chars(s + 1, (size_t)(close - s - 1), ":.%"))
            return 0;
        h = (size_t)(close - s) + 1;
    } else {
        for (h = 0; h < n && s[h] != ':'; h++)
            ;
        if (h == 0 || h > 253 || !span_chars(s, h, ".-_"))
            return 0;
    }
    if (h == n)
        return !need_port;
    if (s[h] != ':' || n - h - 1 < 1 || n - h - 1 > 5 || !span_chars(s + h + 1, n - h - 1, ""))
        return 0;
    for (size_t i = h + 1; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return atoi(s + h + 1) <= 65535;
}

static int valid_metadata(const char *u)
{
    const char *r;
    if (!strcmp(u, "p2p"))
        return 1;
    if (!strncmp(u, "redis://", 8)) {
        r = u + 8;
        const char *slash = strchr(r, '/');
        if (!slash)
            return valid_hostport(r, strlen(r), 1);
        size_t dl = strlen(slash + 1);
        return valid_hostport(r, (size_t)(slash - r), 1) && dl >= 1 && dl <= 5 &&
               span_chars(slash + 1, dl, "") && is_int_text(slash + 1);
    }
    if (!strncmp(u, "etcd://", 7)) {
        for (r = u + 7;;) {
            const char *comma = strchr(r, ',');
            size_t n = comma ? (size_t)(comma - r) : strlen(r);
            if (!valid_hostport(r, n, 1))
                return 0;
            if (!comma)
                return 1;
            r = comma + 1;
        }
    }
    if (!strncmp(u, "http://", 7) || !strncmp(u, "https://", 8)) {
        r = strstr(u, "://") + 3;
        size_t n = strcspn(r, "/");
        for (const char *q = r + n; *q; q++)
            if (!isgraph((unsigned char)*q))
                return 0;
        return valid_hostport(r, n, 0);
    }
    return 0;
}
#define METADATA_WHAT \
    "p2p, redis://host:port[/db], etcd://host:port[,host:port...] or http://host[:port][/path]"

/* Names that end up in keys, file names and messages: [A-Za-z0-9._-]. */
static int valid_name(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n >= 1 && n <= max && span_chars(s, n, "._-");
}

/* Levenshtein distance, for "did you mean" (keys are short). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest of `names` within distance 2, or NULL. */
static const char *closest(const char *key, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t bd = 3;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, names[i]);
        if (d < bd)
            bd = d, best = names[i];
    }
    return best;
}

/* ---- pass 2: the schema ------------------------------------------------------ */

/* Where a mapping member is reported: at its key. */
#define AT(k) (k)->line, (k)->col

static int need_scalar(cfgctx *c, const ynode *at, const ynode *v, const char *path,
                       const char *what)
{
    char b[64];
    if (v->kind != YN_SCALAR || v->isnull)
        return cfg_err(c, AT(at), path, "expected %s, got %s", what, show(v, b, sizeof b));
    return 0;
}

static int set_str(char **dst, const char *s)
{
    char *d = strdup(s);
    if (!d)
        return TERN_ERR_NOMEM;
    free(*dst);
    *dst = d;
    return 0;
}

static int get_int(cfgctx *c, const ynode *at, const ynode *v, const char *path,
                   int64_t min, int64_t max, int64_t *out)
{
    char what[96], b[64];
    snprintf(what, sizeof what, "an integer in %" PRId64 "..%" PRId64, min, max);
    int rc = need_scalar(c, at, v, path, what);
    if (rc)
        return rc;
    if (parse_i64(v->text, out) || *out < min || *out > max)
        return cfg_err(c, AT(at), path, "expected %s, got %s", what, show(v, b, sizeof b));
    return 0;
}

static int get_size(cfgctx *c, const ynode *at, const ynode *v, const char *path,
                    uint64_t min, uint64_t max, uint64_t *out)
{
    char what[96], lo[32], hi[32], b[64];
    fmt_size(min, lo, sizeof lo);
    fmt_size(max, hi, sizeof hi);
    snprintf(what, sizeof what, "a size in %s..%s (K/M/G suffix)", lo, hi);
    int rc = need_scalar(c, at, v, path, what);
    if (rc)
        return rc;
    if (tern_parse_size(v->text, out) || *out < min || *out > max)
        return cfg_err(c, AT(at), path, "expected %s, got %s", what, show(v, b, sizeof b));
    return 0;
}

/* "one of a, b, c" from a NULL-terminated list. */
static void fmt_choices(const char *const *names, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "one of ");
    for (size_t i = 0; names[i] && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", names[i]);
}

static int get_choice(cfgctx *c, const ynode *at, const ynode *v, const char *path,
                      const char *const *names, int *out)
{
    char what[256], b[64];
    fmt_choices(names, what, sizeof what);
    int rc = need_scalar(c, at, v, path, what);
    if (rc)
        return rc;
    for (int i = 0; names[i]; i++)
        if (!strcmp(v->text, names[i]))
            return *out = i, 0;
    return cfg_err(c, AT(at), path, "expected %s, got %s", what, show(v, b, sizeof b));
}

static int get_bool(cfgctx *c, const ynode *at, const ynode *v, const char *path, int *out)
{
    char b[64];
    const char *what = "true or false";
    int rc = need_scalar(c, at, v, path, what);
    if (!rc && parse_bool(v->text, out))
        rc = cfg_err(c, AT(at), path, "expected %s, got %s", what, show(v, b, sizeof b));
    return rc;
}

/* A list of non-empty strings (null = empty list), each passing `ok`. */
static int get_list(cfgctx *c, const ynode *at, const ynode *v, const char *path,
                    const char *list_what, const char *what, int (*ok)(const char *),
                    char ***items, size_t *n)
{
    char b[64], ipath[CFG_MAX_PATH];
    if (v->kind == YN_SCALAR && v->isnull)
        return 0;
    if (v->kind != YN_SEQ)
        return cfg_err(c, AT(at), path, "expected %s, got %s", list_what,
                       show(v, b, sizeof b));
    char **out = calloc(v->n + 1, sizeof *out);
    if (!out)
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        const ynode *it = v->kids[i];
        path_index(ipath, sizeof ipath, path, i);
        int rc = need_scalar(c, it, it, ipath, what);
        if (!rc && ok && !ok(it->text))
            rc = cfg_err(c, AT(it), ipath, "expected %s, got %s", what, show(it, b, sizeof b));
        if (!rc && !(out[i] = strdup(it->text)))
            rc = TERN_ERR_NOMEM;
        if (rc) {
            for (size_t j = 0; j < i; j++)
                free(out[j]);
            free(out);
            return rc;
        }
    }
    for (size_t i = 0; i < *n; i++)
        free((*items)[i]);
    free(*items);
    *items = out;
    *n = v->n;
    return 0;
}

static int ok_device(const char *s) { return valid_name(s, TERN_NAME_MAX - 1); }
static int ok_nonempty(const char *s) { return *s != '\0'; }

/* ---- top-level keys -------------------------------------------------------- */
typedef int (*key_fn)(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v);

static int k_server_name(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    const char *what = "host:port (port 0..65535; [addr] for IPv6)";
    char b[64];
    int rc = need_scalar(c, k, v, k->text, what);
    if (!rc && !valid_hostport(v->text, strlen(v->text), 1))
        rc = cfg_err(c, AT(k), k->text, "expected %s, got %s", what, show(v, b, sizeof b));
    return rc ? rc : set_str(&cfg->server_name, v->text);
}

/* "<configured host>:0": a free port on the same host, for a second engine
 * beside one that holds the configured port (tern-bench, tern-info). */
void tern_config_ephemeral_name(const tern_config *cfg, char *out, size_t outlen)
{
    const char *sn = cfg && cfg->server_name ? cfg->server_name : "127.0.0.1:12001";
    const char *colon = strrchr(sn, ':');
    size_t hl = colon ? (size_t)(colon - sn) : strlen(sn);
    snprintf(out, outlen, "%.*s:0", (int)hl, sn); /* keeps "[v6]" brackets */
}

/* An override of server_name from a program (tern-bench --server-name,
 * tern_engine_create_as), checked like the YAML key. */
int tern_config_set_server_name(tern_config *cfg, const char *name, char *err, size_t errlen)
{
    if (!name || !valid_hostport(name, strlen(name), 1))
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "server name override '%.200s': expected host:port (port 0..65535; "
                         "[addr] for IPv6)", name ? name : "(null)");
    char *copy = strdup(name);
    if (!copy)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    free(cfg->server_name);
    cfg->server_name = copy;
    return 0;
}

static int k_metadata(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    char b[64];
    int rc = need_scalar(c, k, v, k->text, METADATA_WHAT);
    if (!rc && !valid_metadata(v->text))
        rc = cfg_err(c, AT(k), k->text, "expected %s, got %s", METADATA_WHAT,
                     show(v, b, sizeof b));
    return rc ? rc : set_str(&cfg->metadata, v->text);
}

static int k_cluster_id(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    const char *what = "a name of 1..64 characters from A-Z a-z 0-9 . _ -";
    char b[64];
    int rc = need_scalar(c, k, v, k->text, what);
    if (!rc && !valid_name(v->text, 64))
        rc = cfg_err(c, AT(k), k->text, "expected %s, got %s", what, show(v, b, sizeof b));
    return rc ? rc : set_str(&cfg->cluster_id, v->text);
}

static int k_path_str(cfgctx *c, char **dst, const ynode *k, const ynode *v, const char *what)
{
    char b[64];
    int rc = need_scalar(c, k, v, k->text, what);
    if (!rc && !*v->text)
        rc = cfg_err(c, AT(k), k->text, "expected %s, got %s", what, show(v, b, sizeof b));
    return rc ? rc : set_str(dst, v->text);
}

static int k_topology(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return k_path_str(c, &cfg->topology, k, v, "auto or the path of a JSON file");
}

static int k_sysfs_root(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return k_path_str(c, &cfg->topology_sysfs_root, k, v, "a directory");
}

static int k_auth_secret_file(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    if (v->kind == YN_SCALAR && v->isnull) { /* explicit "no authentication" */
        free(cfg->auth_secret_file);
        cfg->auth_secret_file = NULL;
        return 0;
    }
    return k_path_str(c, &cfg->auth_secret_file, k, v, "the path of a file");
}

static int k_plugin_path(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return get_list(c, k, v, k->text, "a list of directories", "a directory", ok_nonempty, &cfg->plugin_path,
                    &cfg->nplugin_path);
}

static int k_devices(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return get_list(c, k, v, k->text, "a list of device names",
                    "a device name (A-Z a-z 0-9 . _ -, at most 63)", ok_device, &cfg->device_allow,
                    &cfg->ndevice_allow);
}

static const char *const select_names[] = {"random", "round_robin", NULL};
static const char *const evict_names[] = {"sieve", "fifo", NULL};

static int k_select_policy(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return get_choice(c, k, v, k->text, select_names, &cfg->select_policy);
}

static int k_eviction(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return get_choice(c, k, v, k->text, evict_names, &cfg->eviction);
}

static int k_slice_size(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return get_size(c, k, v, k->text, SLICE_MIN, SLICE_MAX, &cfg->slice_size);
}

static int k_handshake_max_frame(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return get_size(c, k, v, k->text, 4ull << 10, 64ull << 20, &cfg->handshake_max_frame);
}

static int k_int(cfgctx *c, const ynode *k, const ynode *v, int64_t min, int64_t max, int *out)
{
    int64_t x;
    int rc = get_int(c, k, v, k->text, min, max, &x);
    if (!rc)
        *out = (int)x;
    return rc;
}

static int k_retries(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return k_int(c, k, v, 0, 16, &cfg->retries);
}

static int k_connect_timeout(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return k_int(c, k, v, 1, TIMEOUT_MAX, &cfg->connect_timeout_ms);
}

static int k_io_timeout(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    return k_int(c, k, v, 1, TIMEOUT_MAX, &cfg->io_timeout_ms);
}

static int k_endpoint_cache(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    int64_t x;
    int rc = get_int(c, k, v, k->text, 1, 65536, &x);
    if (!rc)
        cfg->endpoint_cache = (uint64_t)x;
    return rc;
}

static int k_log_level(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    char b[64];
    int rc = need_scalar(c, k, v, k->text, LOG_LEVEL_WHAT);
    if (!rc && parse_log_level(v->text, &cfg->log_level))
        rc = cfg_err(c, AT(k), k->text, "expected %s, got %s", LOG_LEVEL_WHAT,
                     show(v, b, sizeof b));
    return rc;
}

/* ---- transports ------------------------------------------------------------ */
static void kv_free(tern_cfg_kv *kv)
{
    free(kv->key);
    free(kv->value);
    for (size_t i = 0; i < kv->nitems; i++)
        free(kv->items[i]);
    free(kv->items);
}

static void transport_free(tern_transport_cfg *t)
{
    free(t->name);
    free(t->path);
    for (size_t i = 0; i < t->nkv; i++)
        kv_free(&t->kv[i]);
    free(t->kv);
}

/* A transport's own key: a value or a list of values, kept as text for
 * tern_config_check_options() against the plugin's table. */
static int transport_kv(cfgctx *c, tern_transport_cfg *t, const ynode *k, const ynode *v,
                        const char *path)
{
    char b[64];
    const char *what = "a value or a list of values";
    if (v->kind == YN_MAP || (v->kind == YN_SCALAR && v->isnull))
        return cfg_err(c, AT(k), path, "expected %s, got %s", what, show(v, b, sizeof b));
    tern_cfg_kv *kv = &t->kv[t->nkv];
    memset(kv, 0, sizeof *kv);
    kv->line = k->line;
    kv->col = k->col;
    if (!(kv->key = strdup(k->text)))
        return TERN_ERR_NOMEM;
    t->nkv++; /* from here on transport_free() owns it */
    if (v->kind == YN_SCALAR)
        return (kv->value = strdup(v->text)) ? 0 : TERN_ERR_NOMEM;
    if (!(kv->items = calloc(v->n + 1, sizeof *kv->items)))
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        char ipath[CFG_MAX_PATH];
        path_index(ipath, sizeof ipath, path, i);
        int rc = need_scalar(c, v->kids[i], v->kids[i], ipath, "a value");
        if (rc)
            return rc;
        if (!(kv->items[i] = strdup(v->kids[i]->text)))
            return TERN_ERR_NOMEM;
        kv->nitems++;
    }
    return 0;
}

static int transport_key(cfgctx *c, tern_transport_cfg *t, const ynode *k, const ynode *v,
                         const char *path)
{
    char b[64];
    if (!strcmp(k->text, "name")) {
        const char *what = "a transport name (A-Z a-z 0-9 . _ -, at most 63)";
        int rc = need_scalar(c, k, v, path, what);
        if (!rc && !valid_name(v->text, TERN_NAME_MAX - 1))
            rc = cfg_err(c, AT(k), path, "expected %s, got %s", what, show(v, b, sizeof b));
        return rc ? rc : set_str(&t->name, v->text);
    }
    if (!strcmp(k->text, "path")) {
        const char *what = "the path of a transport .so";
        int rc = need_scalar(c, k, v, path, what);
        if (!rc && !*v->text)
            rc = cfg_err(c, AT(k), path, "expected %s, got %s", what, show(v, b, sizeof b));
        return rc ? rc : set_str(&t->path, v->text);
    }
    if (!strcmp(k->text, "required"))
        return get_bool(c, k, v, path, &t->required);
    return transport_kv(c, t, k, v, path);
}

static int transport_entry(cfgctx *c, tern_config *cfg, size_t idx, const ynode *e)
{
    char b[64], path[CFG_MAX_PATH], kpath[CFG_MAX_PATH];
    snprintf(path, sizeof path, "transports[%zu]", idx);
    if (e->kind != YN_MAP)
        return cfg_err(c, AT(e), path, "expected a mapping with at least name, got %s",
                       show(e, b, sizeof b));
    tern_transport_cfg *t = &cfg->transports[idx];
    memset(t, 0, sizeof *t);
    cfg->ntransports++; /* tern_config_free() owns the entry from here */
    t->line = e->line;
    t->col = e->col;
    if (e->n && !(t->kv = calloc(e->n / 2, sizeof *t->kv)))
        return TERN_ERR_NOMEM;
    const ynode *namek = NULL, *namev = NULL;
    for (size_t i = 0; i < e->n; i += 2) {
        if (!strcmp(e->kids[i]->text, "name"))
            namek = e->kids[i], namev = e->kids[i + 1];
        path_join(kpath, sizeof kpath, path, e->kids[i]->text);
        int rc = transport_key(c, t, e->kids[i], e->kids[i + 1], kpath);
        if (rc)
            return rc;
    }
    if (!t->name)
        return cfg_err(c, AT(e), path, "expected key name, got %s",
                       e->n ? "an entry without it" : "an empty entry");
    for (size_t j = 0; j < idx; j++) {
        if (strcmp(cfg->transports[j].name, t->name))
            continue;
        path_join(kpath, sizeof kpath, path, "name");
        return cfg_err(c, AT(namek), kpath,
                       "expected a unique transport name, got %s again (first in "
                       "transports[%zu] at %d:%d)",
                       show(namev, b, sizeof b), j,
                       cfg->transports[j].line, cfg->transports[j].col);
    }
    return 0;
}

static int k_transports(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    char b[64];
    if (v->kind != YN_SEQ || v->n == 0)
        return cfg_err(c, AT(k), k->text, "expected a list of at least one transport, got %s",
                       show(v, b, sizeof b));
    if (v->n > CFG_MAX_TRANSPORTS)
        return cfg_err(c, AT(k), k->text, "expected at most 32 transports, got %zu", v->n);
    for (size_t i = 0; i < cfg->ntransports; i++)
        transport_free(&cfg->transports[i]);
    free(cfg->transports);
    cfg->ntransports = 0;
    if (!(cfg->transports = calloc(v->n, sizeof *cfg->transports)))
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        int rc = transport_entry(c, cfg, i, v->kids[i]);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- the root mapping ------------------------------------------------------ */
static const struct topkey {
    const char *name;
    key_fn fn;
} topkeys[] = {
    {"server_name", k_server_name},
    {"metadata", k_metadata},
    {"cluster_id", k_cluster_id},
    {"transports", k_transports},
    {"plugin_path", k_plugin_path},
    {"topology", k_topology},
    {"topology_sysfs_root", k_sysfs_root},
    {"devices", k_devices},
    {"select_policy", k_select_policy},
    {"slice_size", k_slice_size},
    {"retries", k_retries},
    {"log_level", k_log_level},
    {"handshake_max_frame", k_handshake_max_frame},
    {"connect_timeout_ms", k_connect_timeout},
    {"io_timeout_ms", k_io_timeout},
    {"endpoint_cache", k_endpoint_cache},
    {"eviction", k_eviction},
    {"auth_secret_file", k_auth_secret_file},
};
#define NTOPKEYS (sizeof topkeys / sizeof topkeys[0])

static int unknown_key(cfgctx *c, const ynode *k, const char *path, const char *whose,
                       const char *const *names, size_t n, const char *all)
{
    char b[64];
    const char *near = closest(k->text, names, n);
    if (near)
        return cfg_err(c, AT(k), path, "expected %s (did you mean %s?), got unknown key %s",
                       whose, near, show_text(k->text, b, sizeof b));
    return cfg_err(c, AT(k), path, "expected %s (%s), got unknown key %s", whose, all,
                   show_text(k->text, b, sizeof b));
}

static int root_key(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    const char *names[NTOPKEYS];
    for (size_t i = 0; i < NTOPKEYS; i++) {
        if (!strcmp(k->text, topkeys[i].name))
            return topkeys[i].fn(c, cfg, k, v);
        names[i] = topkeys[i].name;
    }
    return unknown_key(c, k, k->text, "a top-level key", names, NTOPKEYS,
                       "see docs/configuration.md");
}

static int config_from_tree(cfgctx *c, tern_config *cfg, const ynode *root)
{
    char b[64];
    if (!root || (root->kind == YN_SCALAR && root->isnull))
        return 0; /* an empty file: every default */
    if (root->kind != YN_MAP)
        return cfg_err(c, AT(root), "", "expected a mapping of settings, got %s",
                       show(root, b, sizeof b));
    for (size_t i = 0; i < root->n; i += 2) {
        int rc = root_key(c, cfg, root->kids[i], root->kids[i + 1]);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- defaults and environment --------------------------------------------- */
static tern_config *config_defaults(const char *origin)
{
    tern_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    cfg->origin = strdup(origin);
    cfg->server_name = strdup("127.0.0.1:12001");
    cfg->metadata = strdup("p2p");
    cfg->cluster_id = strdup("default");
    cfg->topology = strdup("auto");
    cfg->topology_sysfs_root = strdup("/sys");
    cfg->select_policy = TERN_SELECT_RANDOM;
    cfg->slice_size = 64ull << 10;
    cfg->retries = 3;
    cfg->log_level = TERN_LOG_INFO;
    cfg->handshake_max_frame = 1ull << 20;
    cfg->connect_timeout_ms = 5000;
    cfg->io_timeout_ms = 5000;
    cfg->endpoint_cache = 256;
    cfg->eviction = TERN_EVICT_SIEVE;
    if (!cfg->origin || !cfg->server_name || !cfg->metadata || !cfg->cluster_id ||
        !cfg->topology || !cfg->topology_sysfs_root) {
        tern_config_free(cfg);
        return NULL;
    }
    return cfg;
}

/* A file without `transports` gets the default: one TCP transport. */
static int default_transports(tern_config *cfg)
{
    if (cfg->ntransports)
        return 0;
    cfg->transports = calloc(1, sizeof *cfg->transports);
    if (!cfg->transports || !(cfg->transports[0].name = strdup("tcp")))
        return TERN_ERR_NOMEM;
    cfg->ntransports = 1;
    return 0;
}

/* $TERN_LOG_LEVEL replaces log_level; $TERN_PLUGIN_PATH (colon-separated)
 * goes in front of plugin_path.  Empty variables count as unset. */
static int apply_env(tern_config *cfg, char *err, size_t errlen)
{
    const char *ll = getenv("TERN_LOG_LEVEL");
    if (ll && *ll) {
        char b[64];
        if (parse_log_level(ll, &cfg->log_level))
            return tern_errf(err, errlen, TERN_ERR_CONFIG,
                             "TERN_LOG_LEVEL (environment): expected %s, got %s",
                             LOG_LEVEL_WHAT, show_text(ll, b, sizeof b));
        cfg->env_overrides |= TERN_CFG_ENV_LOG_LEVEL;
    }
    const char *pp = getenv("TERN_PLUGIN_PATH");
    if (!pp || !*pp)
        return 0;
    if (strlen(pp) > 65536)
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "TERN_PLUGIN_PATH (environment): expected at most 64K "
                         "characters, got %zu", strlen(pp));
    size_t n = 1;
    for (const char *q = pp; *q; q++)
        n += *q == ':';
    char **dirs = calloc(n + cfg->nplugin_path + 1, sizeof *dirs);
    if (!dirs)
        return TERN_ERR_NOMEM;
    size_t k = 0;
    for (const char *q = pp; *q;) {
        size_t len = strcspn(q, ":");
        if (len && !(dirs[k++] = strndup(q, len))) {
            for (size_t i = 0; i + 1 < k; i++)
                free(dirs[i]);
            free(dirs);
            return TERN_ERR_NOMEM;
        }
        q += len + (q[len] == ':');
    }
    cfg->nplugin_path_env = k;
    for (size_t i = 0; i < cfg->nplugin_path; i++)
        dirs[k++] = cfg->plugin_path[i];
    free(cfg->plugin_path);
    cfg->plugin_path = dirs;
    cfg->nplugin_path = k;
    if (cfg->nplugin_path_env)
        cfg->env_overrides |= TERN_CFG_ENV_PLUGIN_PATH;
    return 0;
}

/* ---- loading ----------------------------------------------------------------- */
int tern_config_load_yaml(const char *yaml, const char *origin, tern_config **out, char *err,
                          size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "tern_config_load_yaml: out is NULL");
    *out = NULL;
    if (!origin)
        origin = "<yaml>";
    if (!yaml)
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "%s: no YAML text given", origin);
    cfgctx c = {.origin = origin, .err = err, .errlen = errlen, .input = yaml};
    c.inlen = strlen(yaml);
    if (c.inlen > CFG_MAX_INPUT)
        return cfg_err(&c, 1, 1, "", "expected at most 1 MiB of YAML, got %zu bytes", c.inlen);
    tern_config *cfg = config_defaults(origin);
    if (!cfg)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory", origin);
    ynode *root = NULL;
    int rc = yaml_to_tree(&c, &root);
    if (!rc)
        rc = config_from_tree(&c, cfg, root);
    ynode_free(root);
    if (!rc)
        rc = default_transports(cfg);
    if (!rc)
        rc = apply_env(cfg, err, errlen);
    if (rc == TERN_ERR_NOMEM)
        tern_errf(err, errlen, rc, "%s: out of memory while loading the configuration", origin);
    if (rc) {
        tern_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
}

/* Read at most CFG_MAX_INPUT bytes (a FIFO or /dev/zero must not hang us). */
static int read_bounded(const char *path, char **text, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "%s: cannot open: %s", path,
                         strerror(errno));
    char *buf = malloc(CFG_MAX_INPUT + 2);
    if (!buf) {
        fclose(f);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, CFG_MAX_INPUT + 1, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    int rc = 0;
    if (e)
        rc = tern_errf(err, errlen, TERN_ERR_CONFIG, "%s: cannot read: %s", path, strerror(e));
    else if (n > CFG_MAX_INPUT)
        rc = tern_errf(err, errlen, TERN_ERR_CONFIG,
                       "%s:1:1: (root): expected at most 1 MiB of YAML, got more", path);
    else if (memchr(buf, '\0', n))
        rc = tern_errf(err, errlen, TERN_ERR_CONFIG,
                       "%s:1:1: (root): expected YAML text, got a NUL byte at offset %zu", path,
                       (size_t)((char *)memchr(buf, '\0', n) - buf));
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *text = buf;
    return 0;
}

int tern_config_load_file(const char *path, tern_config **out, char *err, size_t errlen)
{
    const char *via = "";
    if (!path || !*path) {
        const char *env = getenv("TERN_CONFIG");
        if (!env || !*env)
            return tern_config_load_yaml(tern_default_yaml, "<embedded>", out, err, errlen);
        path = env;
        via = "TERN_CONFIG=";
    }
    if (out)
        *out = NULL;
    char *text = NULL;
    int rc = read_bounded(path, &text, err, errlen);
    if (rc) {
        if (*via && err && errlen) { /* say where the name came from */
            char tmp[512];
            tern_strlcpy(tmp, err, sizeof tmp);
            snprintf(err, errlen, "%s%s", via, tmp);
        }
        return rc;
    }
    rc = tern_config_load_yaml(text, path, out, err, errlen);
    free(text);
    if (!rc && *via)
        (*out)->env_overrides |= TERN_CFG_ENV_CONFIG;
    return rc;
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void tern_config_free(tern_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->ntransports; i++)
        transport_free(&cfg->transports[i]);
    free(cfg->transports);
    strv_free(cfg->plugin_path, cfg->nplugin_path);
    strv_free(cfg->device_allow, cfg->ndevice_allow);
    free(cfg->origin);
    free(cfg->server_name);
    free(cfg->metadata);
    free(cfg->cluster_id);
    free(cfg->topology);
    free(cfg->topology_sysfs_root);
    free(cfg->auth_secret_file);
    free(cfg);
}

/* ---- a transport's own keys against its plugin's option table -------------- */
const tern_cfg_kv *tern_config_transport_key(const tern_config *cfg, size_t idx,
                                             const char *key)
{
    if (!cfg || idx >= cfg->ntransports || !key)
        return NULL;
    const tern_transport_cfg *t = &cfg->transports[idx];
    for (size_t i = 0; i < t->nkv; i++)
        if (!strcmp(t->kv[i].key, key))
            return &t->kv[i];
    return NULL;
}

/* What an option accepts, in words ("an integer in -1..255"). */
static void option_what(const tern_option *o, char *buf, size_t len)
{
    char lo[32], hi[32];
    switch (o->type) {
    case TERN_OPT_INT:
        snprintf(buf, len, "an integer in %" PRId64 "..%" PRId64, o->min, o->max);
        break;
    case TERN_OPT_SIZE:
        fmt_size((uint64_t)(o->min < 0 ? 0 : o->min), lo, sizeof lo);
        fmt_size((uint64_t)(o->max < 0 ? 0 : o->max), hi, sizeof hi);
        snprintf(buf, len, "a size in %s..%s (K/M/G suffix)", lo, hi);
        break;
    case TERN_OPT_BOOL: snprintf(buf, len, "true or false"); break;
    case TERN_OPT_CHOICE:
        if (o->choices)
            fmt_choices(o->choices, buf, len);
        else
            snprintf(buf, len, "a value (the plugin lists no choices)");
        break;
    case TERN_OPT_STRING_LIST: snprintf(buf, len, "a list of values"); break;
    default: snprintf(buf, len, "a value"); break;
    }
}

/* 0 when kv fits option o. */
static int option_accepts(const tern_option *o, const tern_cfg_kv *kv)
{
    int64_t i;
    uint64_t u;
    int bval;
    if (o->type == TERN_OPT_STRING_LIST)
        return kv->items ? 0 : -1;
    if (!kv->value)
        return -1;
    switch (o->type) {
    case TERN_OPT_STRING: return 0;
    case TERN_OPT_INT:
        return parse_i64(kv->value, &i) || i < o->min || i > o->max ? -1 : 0;
    case TERN_OPT_SIZE:
        return tern_parse_size(kv->value, &u) || u > (uint64_t)INT64_MAX ||
                       (int64_t)u < o->min || (int64_t)u > o->max ? -1 : 0;
    case TERN_OPT_BOOL: return parse_bool(kv->value, &bval) ? -1 : 0;
    case TERN_OPT_CHOICE:
        for (size_t k = 0; o->choices && o->choices[k]; k++)
            if (!strcmp(kv->value, o->choices[k]))
                return 0;
        return -1;
    default: return -1;
    }
}

static int option_unknown(cfgctx *c, const tern_transport_cfg *t, const tern_cfg_kv *kv,
                          const tern_option *opts, const char *path)
{
    const char *names[64];
    char all[512], whose[96], b[64];
    size_t n = 0, o = 0;
    all[0] = '\0';
    for (size_t i = 0; opts && opts[i].type != TERN_OPT_END && opts[i].key; i++) {
        if (n < 64)
            names[n++] = opts[i].key;
        if (o < sizeof all)
            o += (size_t)snprintf(all + o, sizeof all - o, "%s%s", i ? ", " : "one of ",
                                  opts[i].key);
    }
    snprintf(whose, sizeof whose, "a key of transport %s", t->name);
    if (!n)
        return cfg_err(c, kv->line, kv->col, path,
                       "expected no keys (transport %s takes none), got unknown key %s",
                       t->name, show_text(kv->key, b, sizeof b));
    /* The generic keys are listed too, so the hint is complete. */
    if (o < sizeof all)
        snprintf(all + o, sizeof all - o, ", name, path, required");
    ynode k = {.kind = YN_SCALAR, .text = kv->key, .line = kv->line, .col = kv->col};
    return unknown_key(c, &k, path, whose, names, n, all);
}

int tern_config_check_options(const tern_config *cfg, size_t idx, const tern_option *opts,
                              char *err, size_t errlen)
{
    if (!cfg || idx >= cfg->ntransports)
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "tern_config_check_options: no transport %zu", idx);
    cfgctx c = {.origin = cfg->origin, .err = err, .errlen = errlen};
    const tern_transport_cfg *t = &cfg->transports[idx];
    for (size_t i = 0; i < t->nkv; i++) {
        const tern_cfg_kv *kv = &t->kv[i];
        char path[CFG_MAX_PATH], what[256], b[64];
        char base[48];
        snprintf(base, sizeof base, "transports[%zu]", idx);
        path_join(path, sizeof path, base, kv->key);
        const tern_option *o = NULL;
        for (size_t j = 0; opts && opts[j].type != TERN_OPT_END && opts[j].key; j++)
            if (!strcmp(opts[j].key, kv->key))
                o = &opts[j];
        if (!o)
            return option_unknown(&c, t, kv, opts, path);
        if (option_accepts(o, kv) == 0)
            continue;
        option_what(o, what, sizeof what);
        return cfg_err(&c, kv->line, kv->col, path, "expected %s, got %s", what,
                       kv->value ? show_text(kv->value, b, sizeof b)
                                 : (kv->nitems ? "a list" : "an empty list"));
    }
    return 0;
}

/* ---- JSON for tern-info --json ------------------------------------------------ */
static json_object *json_strv(char *const *v, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; a && i < n; i++)
        json_object_array_add(a, json_object_new_string(v[i]));
    return a;
}

static json_object *json_str_or_null(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

static json_object *json_transport(const tern_transport_cfg *t)
{
    json_object *o = json_object_new_object(), *opts = json_object_new_object();
    if (!o || !opts) {
        json_object_put(o);
        json_object_put(opts);
        return NULL;
    }
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "path", json_str_or_null(t->path));
    json_object_object_add(o, "required", json_object_new_boolean(t->required));
    for (size_t i = 0; i < t->nkv; i++) {
        const tern_cfg_kv *kv = &t->kv[i];
        json_object_object_add(opts, kv->key,
                               kv->value ? json_object_new_string(kv->value)
                                         : json_strv(kv->items, kv->nitems));
    }
    json_object_object_add(o, "options", opts);
    return o;
}

char *tern_config_to_json(const tern_config *cfg)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    if (!cfg)
        return NULL;
    json_object *o = json_object_new_object(), *tr = json_object_new_array(),
                *env = json_object_new_object();
    if (!o || !tr || !env) {
        json_object_put(o);
        json_object_put(tr);
        json_object_put(env);
        return NULL;
    }
    json_object_object_add(o, "origin", json_object_new_string(cfg->origin));
    json_object_object_add(o, "server_name", json_object_new_string(cfg->server_name));
    json_object_object_add(o, "metadata", json_object_new_string(cfg->metadata));
    json_object_object_add(o, "cluster_id", json_object_new_string(cfg->cluster_id));
    for (size_t i = 0; i < cfg->ntransports; i++)
        json_object_array_add(tr, json_transport(&cfg->transports[i]));
    json_object_object_add(o, "transports", tr);
    json_object_object_add(o, "plugin_path", json_strv(cfg->plugin_path, cfg->nplugin_path));
    json_object_object_add(o, "topology", json_object_new_string(cfg->topology));
    json_object_object_add(o, "topology_sysfs_root",
                           json_object_new_string(cfg->topology_sysfs_root));
    json_object_object_add(o, "devices", json_strv(cfg->device_allow, cfg->ndevice_allow));
    json_object_object_add(o, "select_policy",
                           json_object_new_string(select_names[cfg->select_policy ? 1 : 0]));
    json_object_object_add(o, "slice_size", json_object_new_int64((int64_t)cfg->slice_size));
    json_object_object_add(o, "retries", json_object_new_int(cfg->retries));
    json_object_object_add(o, "log_level",
                           json_object_new_string(levels[cfg->log_level & 3]));
    json_object_object_add(o, "handshake_max_frame",
                           json_object_new_int64((int64_t)cfg->handshake_max_frame));
    json_object_object_add(o, "connect_timeout_ms", json_object_new_int(cfg->connect_timeout_ms));
    json_object_object_add(o, "io_timeout_ms", json_object_new_int(cfg->io_timeout_ms));
    json_object_object_add(o, "endpoint_cache",
                           json_object_new_int64((int64_t)cfg->endpoint_cache));
    json_object_object_add(o, "eviction",
                           json_object_new_string(evict_names[cfg->eviction ? 1 : 0]));
    json_object_object_add(o, "auth_secret_file", json_str_or_null(cfg->auth_secret_file));
    /* Which values the environment decided (see docs/configuration.md). */
    json_object_object_add(env, "TERN_CONFIG",
                           json_object_new_boolean(cfg->env_overrides & TERN_CFG_ENV_CONFIG));
    json_object_object_add(env, "TERN_LOG_LEVEL",
                           json_object_new_boolean(cfg->env_overrides & TERN_CFG_ENV_LOG_LEVEL));
    json_object_object_add(env, "TERN_PLUGIN_PATH",
                           json_strv(cfg->plugin_path, cfg->nplugin_path_env));
    json_object_object_add(o, "environment", env);
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                          JSON_C_TO_STRING_SPACED |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(o);
    return out;
}
