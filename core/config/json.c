/* core/config/json.c: the resolved configuration and the key table as JSON
 * (tern-info, tern_config_describe()).  Both walk the table in schema.c, so
 * a new key appears here without an edit. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup (CMake also sets it) */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config/json.h"
#include "config/option.h"
#include "config/schema.h"

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
    json_object_object_add(o, "optional", json_object_new_boolean(t->optional));
    for (size_t i = 0; i < t->nkv; i++) {
        const tern_cfg_kv *kv = &t->kv[i];
        json_object_object_add(opts, kv->key,
                               kv->value ? json_object_new_string(kv->value)
                                         : json_strv(kv->items, kv->nitems));
    }
    json_object_object_add(o, "options", opts);
    return o;
}

/* The value of key k in cfg. */
static json_object *json_value(const tern_config *cfg, const cfg_key *k)
{
    const char *field = (const char *)cfg + k->off;
    if (k->flags & CFGK_CUSTOM) {
        json_object *tr = json_object_new_array();
        for (size_t i = 0; tr && i < cfg->ntransports; i++)
            json_object_array_add(tr, json_transport(&cfg->transports[i]));
        return tr;
    }
    switch (k->opt.type) {
    case TERN_OPT_STRING: return json_str_or_null(*(char *const *)(const void *)field);
    case TERN_OPT_SIZE:
        return json_object_new_int64((int64_t)*(const uint64_t *)(const void *)field);
    case TERN_OPT_INT:
        if (k->flags & CFGK_U64)
            return json_object_new_int64((int64_t)*(const uint64_t *)(const void *)field);
        return json_object_new_int(*(const int *)(const void *)field);
    case TERN_OPT_BOOL: return json_object_new_boolean(*(const int *)(const void *)field);
    case TERN_OPT_CHOICE: {
        int i = *(const int *)(const void *)field;
        return json_object_new_string(i >= 0 ? k->opt.choices[i] : "?");
    }
    case TERN_OPT_STRING_LIST:
        return json_strv(*(char **const *)(const void *)field,
                         *(const size_t *)(const void *)((const char *)cfg + k->count_off));
    default: return NULL;
    }
}

char *tern_json_to_text(json_object *o)
{
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                          JSON_C_TO_STRING_SPACED |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(o);
    return out;
}

json_object *tern_config_json(const tern_config *cfg)
{
    json_object *o = json_object_new_object(), *env = json_object_new_object();
    if (!o || !env) {
        json_object_put(o);
        json_object_put(env);
        return NULL;
    }
    json_object_object_add(o, "origin", json_object_new_string(cfg->origin));
    for (size_t i = 0; i < cfg_nkeys; i++)
        json_object_object_add(o, cfg_keys[i].opt.key, json_value(cfg, &cfg_keys[i]));
    /* Which values the environment decided (see docs/configuration.md). */
    json_object_object_add(env, "TERN_CONFIG",
                           json_object_new_boolean(cfg->env_overrides & TERN_CFG_ENV_CONFIG));
    for (size_t i = 0; i < cfg_nkeys; i++) {
        const cfg_key *k = &cfg_keys[i];
        if (!k->env)
            continue;
        if (k->opt.type == TERN_OPT_STRING_LIST)
            json_object_object_add(env, k->env,
                                   json_strv(*(char **const *)(const void *)((const char *)cfg +
                                                                             k->off),
                                             *(const size_t *)(const void *)((const char *)cfg +
                                                                             k->env_count_off)));
        else
            json_object_object_add(env, k->env,
                                   json_object_new_boolean(cfg->env_overrides & k->env_bit));
    }
    json_object_object_add(o, "environment", env);
    return o;
}

char *tern_config_to_json(const tern_config *cfg)
{
    json_object *o = cfg ? tern_config_json(cfg) : NULL;
    return o ? tern_json_to_text(o) : NULL;
}

/* ---- the key table ------------------------------------------------------------- */
static const char *type_name(tern_opt_type t)
{
    static const char *const n[] = {"end", "string", "int", "bool", "choice", "size",
                                    "string_list"};
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "unknown";
}

/* The type column of the reference table. */
static void doc_type(const cfg_key *k, char *buf, size_t len)
{
    size_t o = 0;
    if (k->doc_type) {
        snprintf(buf, len, "%s", k->doc_type);
        return;
    }
    switch (k->opt.type) {
    case TERN_OPT_INT: snprintf(buf, len, "integer"); return;
    case TERN_OPT_SIZE: snprintf(buf, len, "size"); return;
    case TERN_OPT_BOOL: snprintf(buf, len, "boolean"); return;
    case TERN_OPT_CHOICE:
        buf[0] = '\0';
        for (size_t i = 0; k->opt.choices[i] && o < len; i++)
            o += (size_t)snprintf(buf + o, len - o, "%s`%s`", i ? " | " : "", k->opt.choices[i]);
        return;
    default: snprintf(buf, len, "%s", type_name(k->opt.type)); return;
    }
}

json_object *tern_config_schema_json(void)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; a && i < cfg_nkeys; i++) {
        const cfg_key *k = &cfg_keys[i];
        json_object *j = json_object_new_object();
        char what[512], dtype[256];
        cfg_option_what(&k->opt, k, what, sizeof what);
        doc_type(k, dtype, sizeof dtype);
        json_object_object_add(j, "key", json_object_new_string(k->opt.key));
        json_object_object_add(j, "type", json_object_new_string(type_name(k->opt.type)));
        json_object_object_add(j, "doc_type", json_object_new_string(dtype));
        json_object_object_add(j, "accepts", json_object_new_string(what));
        if (k->opt.type == TERN_OPT_INT || k->opt.type == TERN_OPT_SIZE ||
            (k->flags & CFGK_CUSTOM)) {
            json_object_object_add(j, "min", json_object_new_int64(k->opt.min));
            json_object_object_add(j, "max", json_object_new_int64(k->opt.max));
        }
        if (k->opt.choices) {
            json_object *c = json_object_new_array();
            for (size_t n = 0; k->opt.choices[n]; n++)
                json_object_array_add(c, json_object_new_string(k->opt.choices[n]));
            json_object_object_add(j, "choices", c);
        }
        json_object_object_add(j, "default", json_str_or_null(k->opt.default_value));
        json_object_object_add(j, "env", json_str_or_null(k->env));
        json_object_object_add(j, "help", json_str_or_null(k->opt.help));
        json_object_array_add(a, j);
    }
    return a;
}
