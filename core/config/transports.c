/* core/config/transports.c: the `transports:` list.  Each entry has the
 * generic keys name, path and required; every other key is kept as text with
 * its position and checked later against the option table of the plugin
 * that loads (tern_config_check_options, option.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup (CMake also sets it) */
#endif
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/transports.h"
#include "config/option.h"
#include "config/values.h"
#include "config/yaml_tree.h"

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
        return cfg_err(c, AT(k), path, "expected %s, got %s", what, cfg_show(v, b, sizeof b));
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
        const ynode *it = v->kids[i];
        char ipath[CFG_MAX_PATH];
        cfg_path_index(ipath, sizeof ipath, path, i);
        if (it->kind != YN_SCALAR || it->isnull)
            return cfg_err(c, AT(it), ipath, "expected a value, got %s",
                           cfg_show(it, b, sizeof b));
        if (!(kv->items[i] = strdup(it->text)))
            return TERN_ERR_NOMEM;
        kv->nitems++;
    }
    return 0;
}

/* The generic keys of an entry, in the same form as the core's keys. */
static int ok_transport_name(const char *s) { return cfg_valid_name(s, TERN_NAME_MAX - 1); }

static const cfg_key entry_keys[] = {
    {.opt = {"name", TERN_OPT_STRING, 0, 0, NULL, NULL, "The transport."},
     .what = "a transport name (A-Z a-z 0-9 . _ -, at most 63)", .valid = ok_transport_name,
     .off = offsetof(tern_transport_cfg, name)},
    {.opt = {"path", TERN_OPT_STRING, 0, 0, NULL, NULL, "Load this shared object."},
     .what = "the path of a transport .so", .off = offsetof(tern_transport_cfg, path)},
    {.opt = {"required", TERN_OPT_BOOL, 0, 0, NULL, "false", "Fail when it does not load."},
     .off = offsetof(tern_transport_cfg, required)},
    {.opt = {"optional", TERN_OPT_BOOL, 0, 0, NULL, "false",
             "Skip it, with a warning, when its plugin is not installed (otherwise a missing "
             "plugin is an error)."},
     .off = offsetof(tern_transport_cfg, optional)},
};

static int transport_key(cfgctx *c, tern_transport_cfg *t, const ynode *k, const ynode *v,
                         const char *path)
{
    for (size_t i = 0; i < sizeof entry_keys / sizeof entry_keys[0]; i++) {
        const cfg_key *ek = &entry_keys[i];
        if (strcmp(k->text, ek->opt.key))
            continue;
        cfg_value val;
        int rc = cfg_option_check(c, &ek->opt, ek, k, v, path, &val);
        if (rc)
            return rc;
        char *field = (char *)t + ek->off;
        if (ek->opt.type == TERN_OPT_BOOL) {
            *(int *)(void *)field = (int)val.i;
            return 0;
        }
        char *copy = strdup(v->text);
        if (!copy)
            return TERN_ERR_NOMEM;
        free(*(char **)(void *)field);
        *(char **)(void *)field = copy;
        return 0;
    }
    return transport_kv(c, t, k, v, path);
}

static int transport_entry(cfgctx *c, tern_config *cfg, size_t idx, const ynode *e)
{
    char b[64], path[CFG_MAX_PATH], kpath[CFG_MAX_PATH];
    snprintf(path, sizeof path, "transports[%zu]", idx);
    if (e->kind != YN_MAP)
        return cfg_err(c, AT(e), path, "expected a mapping with at least name, got %s",
                       cfg_show(e, b, sizeof b));
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
        cfg_path_join(kpath, sizeof kpath, path, e->kids[i]->text);
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
        cfg_path_join(kpath, sizeof kpath, path, "name");
        return cfg_err(c, AT(namek), kpath,
                       "expected a unique transport name, got %s again (first in "
                       "transports[%zu] at %d:%d)",
                       cfg_show(namev, b, sizeof b), j,
                       cfg->transports[j].line, cfg->transports[j].col);
    }
    return 0;
}

int cfg_transports_parse(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    char b[64];
    if (v->kind != YN_SEQ || v->n == 0)
        return cfg_err(c, AT(k), k->text, "expected a list of at least one transport, got %s",
                       cfg_show(v, b, sizeof b));
    if (v->n > CFG_MAX_TRANSPORTS)
        return cfg_err(c, AT(k), k->text, "expected at most %d transports, got %zu",
                       CFG_MAX_TRANSPORTS, v->n);
    cfg_transports_free(cfg);
    if (!(cfg->transports = calloc(v->n, sizeof *cfg->transports)))
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        int rc = transport_entry(c, cfg, i, v->kids[i]);
        if (rc)
            return rc;
    }
    return 0;
}

void cfg_transports_free(tern_config *cfg)
{
    for (size_t i = 0; i < cfg->ntransports; i++)
        transport_free(&cfg->transports[i]);
    free(cfg->transports);
    cfg->transports = NULL;
    cfg->ntransports = 0;
}
