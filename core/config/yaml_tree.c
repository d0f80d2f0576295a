/* core/config/yaml_tree.c: YAML text -> a small tree of nodes.
 *
 * libyaml's event stream becomes scalar / list / mapping nodes, each with
 * its 1-based line and column.  Depth, node count, key count, scalar length
 * and input size are capped so that hostile input cannot exhaust the stack
 * or memory, and aliases and tags are refused (a configuration has no use
 * for them, and aliases are how "billion laughs" inputs explode).  The
 * schema is checked on the tree afterwards (load.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup (CMake also sets it) */
#endif
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config/yaml_tree.h"
#include "config/values.h"
#include "base/util.h"

void cfg_ynode_free(ynode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        cfg_ynode_free(n->kids[i]);
    free(n->kids);
    free(n->text);
    free(n);
}

/* One message, "ORIGIN:LINE:COL: PATH: ...". */
int cfg_err(cfgctx *c, int line, int col, const char *path, const char *fmt, ...)
{
    if (!c->err || !c->errlen)
        return TERN_ERR_CONFIG;
    int k = c->env ? snprintf(c->err, c->errlen, "%s (environment): ", c->env)
                   : snprintf(c->err, c->errlen, "%s:%d:%d: %s: ", c->origin, line, col,
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

/* Printable, bounded rendering of user text for a message. */
const char *cfg_show_text(const char *t, char *buf, size_t len)
{
    if (cfg_is_int_text(t) && strlen(t) < 24) {
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
const char *cfg_show(const ynode *n, char *buf, size_t len)
{
    if (n->kind == YN_SEQ)
        return n->n ? "a list" : "an empty list";
    if (n->kind == YN_MAP)
        return n->n ? "a mapping" : "an empty mapping";
    if (n->isnull)
        return "null";
    return cfg_show_text(n->text, buf, len);
}

/* Key paths: "base.key" (or "key" at the root), truncated to fit. */
/* An unknown key: the nearest known one ("did you mean"), else all of them. */
int cfg_unknown_key(cfgctx *c, const ynode *k, const char *path, const char *whose,
                       const char *const *names, size_t n, const char *all)
{
    char b[64];
    const char *near = cfg_closest(k->text, names, n);
    if (near)
        return cfg_err(c, AT(k), path, "expected %s (did you mean %s?), got unknown key %s",
                       whose, near, cfg_show_text(k->text, b, sizeof b));
    return cfg_err(c, AT(k), path, "expected %s (%s), got unknown key %s", whose, all,
                   cfg_show_text(k->text, b, sizeof b));
}

void cfg_path_join(char *dst, size_t len, const char *base, const char *key)
{
    size_t o = tern_strlcpy(dst, base, len);
    if (*base && o + 1 < len)
        dst[o++] = '.', dst[o] = '\0';
    if (o < len)
        tern_strlcpy(dst + o, key, len - o);
}

/* "base[i]". */
void cfg_path_index(char *dst, size_t len, const char *base, size_t i)
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
    ynode **k = tern_array_room(p->kids, p->n, &p->cap, sizeof *k, 8);
    if (!k)
        return TERN_ERR_NOMEM;
    p->kids = k;
    p->kids[p->n++] = kid;
    return 0;
}

/* Why ynode_new failed: past the node limit, or out of memory. */
static int ynode_new_err(builder *b, yaml_mark_t m)
{
    return b->c->nnodes > CFG_MAX_NODES
               ? builder_err(b, m, "expected at most 65536 values, got %s", "more")
               : TERN_ERR_NOMEM;
}

/* Attach a new node under the innermost open list/mapping (or as the root),
 * enforcing scalar keys, unique keys and the size caps.  Takes ownership. */
static int builder_attach(builder *b, ynode *n, yaml_mark_t m)
{
    if (b->depth == 0) {
        if (b->root) {
            cfg_ynode_free(n);
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
                cfg_path_join(what, sizeof what, path, n->text);
                rc = cfg_err(b->c, n->line, n->col, what,
                             "expected each key once, got a duplicate (first at %d:%d)",
                             p->kids[i]->line, p->kids[i]->col);
            }
        }
        if (rc) {
            cfg_ynode_free(n);
            return rc;
        }
    } else if (p->kind == YN_SEQ && p->n >= CFG_MAX_ITEMS) {
        cfg_ynode_free(n);
        return builder_err(b, m, "expected at most 1024 list items, got %s", "more");
    }
    if (ynode_push(p, n) < 0) {
        cfg_ynode_free(n);
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
        return ynode_new_err(b, m);
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
        return ynode_new_err(b, m);
    n->text = malloc(len + 1);
    if (!n->text) {
        cfg_ynode_free(n);
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
    if (p->error != YAML_READER_ERROR && m.index < b->c->inlen &&
        b->c->input[m.index] == '\t' && !strstr(what, "tab"))
        return builder_err(b, m, "expected spaces (YAML does not allow a tab character here), "
                                 "got a tab character: %s", what);
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
int cfg_yaml_to_tree(cfgctx *c, ynode **root)
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
        cfg_ynode_free(b.root);
        return rc;
    }
    *root = b.root;
    return 0;
}
