/* core/config/option.c: the one validator.  A value is checked against a
 * tern_option, the form in which plugins publish their keys; the core's own
 * keys use the same form (schema.c), with a cfg_key adding the core's
 * wording, so both read the same way in messages. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/option.h"
#include "config/schema.h"
#include "config/values.h"
#include "config/yaml_tree.h"

void cfg_option_what(const tern_option *o, const cfg_key *k, char *buf, size_t len)
{
    char lo[32], hi[32];
    size_t n;
    switch (o->type) {
    case TERN_OPT_INT:
        snprintf(buf, len, "an integer in %" PRId64 "..%" PRId64, o->min, o->max);
        break;
    case TERN_OPT_SIZE:
        cfg_fmt_size((uint64_t)(o->min < 0 ? 0 : o->min), lo, sizeof lo);
        cfg_fmt_size((uint64_t)(o->max < 0 ? 0 : o->max), hi, sizeof hi);
        snprintf(buf, len, "a size in %s..%s (K/M/G suffix)", lo, hi);
        break;
    case TERN_OPT_BOOL: snprintf(buf, len, "true or false"); break;
    case TERN_OPT_CHOICE:
        if (!o->choices) {
            snprintf(buf, len, "a value (the plugin lists no choices)");
            break;
        }
        cfg_fmt_choices(o->choices, buf, len);
        for (size_t i = 0; k && (k->flags & CFGK_ALIASES) && o->choices[i]; i++)
            if ((n = strlen(buf)) < len)
                snprintf(buf + n, len - n, ", %zu", i);
        break;
    case TERN_OPT_STRING_LIST:
        snprintf(buf, len, "%s", k && k->what ? k->what : "a list of values");
        break;
    default: snprintf(buf, len, "%s", k && k->what ? k->what : "a value"); break;
    }
}

/* The index of `t` among o's choices, or -1.  With aliases: any case, or
 * the index itself as a digit ("0" for the first). */
static int choice_index(const tern_option *o, const cfg_key *k, const char *t)
{
    int alias = k && (k->flags & CFGK_ALIASES);
    for (int i = 0; o->choices && o->choices[i]; i++) {
        char digit[16];
        snprintf(digit, sizeof digit, "%d", i);
        if (!strcmp(t, o->choices[i]) || (alias && (!strcasecmp(t, o->choices[i]) ||
                                                    !strcmp(t, digit))))
            return i;
    }
    return -1;
}

/* 0 when the scalar text fits o; the parsed value in *out. */
static int scalar_fits(const tern_option *o, const cfg_key *k, const char *t, cfg_value *out)
{
    int b;
    switch (o->type) {
    case TERN_OPT_STRING:
        if (!k)
            return 0; /* a plugin's string: any text */
        return (k->valid ? k->valid(t) : *t != '\0') ? 0 : -1;
    case TERN_OPT_INT:
        return cfg_parse_i64(t, &out->i) || out->i < o->min || out->i > o->max ? -1 : 0;
    case TERN_OPT_SIZE:
        return tern_parse_size(t, &out->u) || out->u > (uint64_t)INT64_MAX ||
                       (int64_t)out->u < o->min || (int64_t)out->u > o->max
                   ? -1
                   : 0;
    case TERN_OPT_BOOL:
        if (cfg_parse_bool(t, &b))
            return -1;
        out->i = b;
        return 0;
    case TERN_OPT_CHOICE: return (out->i = choice_index(o, k, t)) < 0 ? -1 : 0;
    default: return -1;
    }
}

int cfg_option_check(cfgctx *c, const tern_option *o, const cfg_key *k, const ynode *at,
                     const ynode *v, const char *path, cfg_value *out)
{
    char what[256], b[64];
    cfg_value tmp;
    cfg_option_what(o, k, what, sizeof what);
    if (o->type == TERN_OPT_STRING_LIST)
        return v->kind == YN_SEQ ? 0
                                 : cfg_err(c, AT(at), path, "expected %s, got %s", what,
                                           cfg_show(v, b, sizeof b));
    if (v->kind != YN_SCALAR || v->isnull || scalar_fits(o, k, v->text, out ? out : &tmp))
        return cfg_err(c, AT(at), path, "expected %s, got %s", what, cfg_show(v, b, sizeof b));
    return 0;
}

int cfg_list_check(cfgctx *c, const cfg_key *k, const ynode *at, const ynode *v,
                   const char *path)
{
    char b[64], ipath[CFG_MAX_PATH];
    if (v->kind == YN_SCALAR && v->isnull)
        return 0;
    int rc = cfg_option_check(c, &k->opt, k, at, v, path, NULL);
    for (size_t i = 0; !rc && i < v->n; i++) {
        const ynode *it = v->kids[i];
        cfg_path_index(ipath, sizeof ipath, path, i);
        if (it->kind != YN_SCALAR || it->isnull || !(k->valid ? k->valid(it->text) : *it->text))
            rc = cfg_err(c, AT(it), ipath, "expected %s, got %s", k->item_what,
                         cfg_show(it, b, sizeof b));
    }
    return rc;
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

static int option_unknown(cfgctx *c, const tern_transport_cfg *t, const ynode *k,
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
        return cfg_err(c, AT(k), path,
                       "expected no keys (transport %s takes none), got unknown key %s",
                       t->name, cfg_show_text(k->text, b, sizeof b));
    /* The generic keys are listed too, so the hint is complete. */
    if (o < sizeof all)
        snprintf(all + o, sizeof all - o, ", name, path, required");
    return cfg_unknown_key(c, k, path, whose, names, n, all);
}

/* One kv: the plugin's option first, then, for keys the core also reads
 * (a transport's own slice_size), the core's range. */
static int check_kv(cfgctx *c, const tern_transport_cfg *t, const tern_cfg_kv *kv,
                    const tern_option *opts, const char *path)
{
    /* A view of the kv as the tree it came from (positions at the key). */
    ynode key = {.kind = YN_SCALAR, .text = kv->key, .line = kv->line, .col = kv->col};
    ynode val = {.kind = kv->value ? YN_SCALAR : YN_SEQ, .text = kv->value,
                 .line = kv->line, .col = kv->col, .n = kv->nitems};
    const tern_option *o = NULL;
    for (size_t j = 0; opts && opts[j].type != TERN_OPT_END && opts[j].key; j++)
        if (!strcmp(opts[j].key, kv->key))
            o = &opts[j];
    if (!o)
        return option_unknown(c, t, &key, opts, path);
    int rc = cfg_option_check(c, o, NULL, &key, &val, path, NULL);
    const cfg_key *core = cfg_key_find(kv->key);
    if (!rc && core && !strcmp(kv->key, "slice_size"))
        rc = cfg_option_check(c, &core->opt, core, &key, &val, path, NULL);
    return rc;
}

int tern_config_check_options(const tern_config *cfg, size_t idx, const tern_option *opts,
                              char *err, size_t errlen)
{
    if (!cfg || idx >= cfg->ntransports) {
        if (err && errlen)
            snprintf(err, errlen, "tern_config_check_options: no transport %zu", idx);
        return TERN_ERR_INVAL;
    }
    cfgctx c = {.origin = cfg->origin, .err = err, .errlen = errlen};
    const tern_transport_cfg *t = &cfg->transports[idx];
    for (size_t i = 0; i < t->nkv; i++) {
        char path[CFG_MAX_PATH], base[48];
        snprintf(base, sizeof base, "transports[%zu]", idx);
        cfg_path_join(path, sizeof path, base, t->kv[i].key);
        int rc = check_kv(&c, t, &t->kv[i], opts, path);
        if (rc)
            return rc;
    }
    return 0;
}
