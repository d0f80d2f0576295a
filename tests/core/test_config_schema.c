/* tests/core/test_config_schema.c: the key table drives parsing, defaults and
 * the JSON; a tab in YAML is named; a transport's own slice_size stays in
 * the engine's range; tern_config_describe() (the public API tern-info
 * uses) reports what the engine would do. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/load.h"
#include "config/option.h"
#include "config/values.h"
#include "config/json.h"
#include "tern/tern.h"

static void clean_env(void)
{
    unsetenv("TERN_CONFIG");
    unsetenv("TERN_LOG_LEVEL");
    unsetenv("TERN_PLUGIN_PATH");
}

TestSuite(schema, .init = clean_env, .timeout = 30);

static void expect_err(const char *yaml, const char *msg)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml(yaml, "t.yaml", &cfg, err, sizeof err), TERN_ERR_CONFIG,
                 "accepted:\n%s", yaml);
    cr_assert_null(cfg);
    cr_assert_str_eq(err, msg);
}

Test(schema, a_tab_is_named_as_a_tab)
{
    expect_err("\tretries: 3\n",
               "t.yaml:1:1: (root): expected spaces (YAML does not allow a tab character here), "
               "got a tab character: found character that cannot start any token (while "
               "scanning for the next token at 1:1)");
    expect_err("transports:\n\t- name: tcp\n",
               "t.yaml:2:1: transports: expected spaces (YAML does not allow a tab character "
               "here), got a tab character: found character that cannot start any token (while "
               "scanning for the next token at 2:1)");
    /* libyaml names this one itself; the text is kept */
    expect_err("transports:\n  - name: tcp\n\tport: 1\n",
               "t.yaml:3:1: transports[0].name: expected valid YAML, got found a tab "
               "character that violates indentation (while scanning a plain scalar at 2:11)");
}

/* A plugin whose own range is wider than the engine's. */
static const tern_option wide_opts[] = {
    {"slice_size", TERN_OPT_SIZE, 1, 1ll << 40, NULL, "1M", "slice size"},
    {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL},
};

static int check_slice(const char *value, char *err, size_t errlen)
{
    char yaml[256];
    snprintf(yaml, sizeof yaml, "transports:\n  - name: x\n    slice_size: %s\n", value);
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml(yaml, "t.yaml", &cfg, err, errlen), 0, "%s", err);
    int rc = tern_config_check_options(cfg, 0, wide_opts, err, errlen);
    tern_config_free(cfg);
    return rc;
}

Test(schema, transport_slice_size_within_the_engine_range)
{
    char err[512] = "";
    cr_assert_eq(check_slice("4K", err, sizeof err), 0, "%s", err);
    cr_assert_eq(check_slice("64M", err, sizeof err), 0, "%s", err);
    cr_assert_eq(check_slice("1K", err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "t.yaml:3:5: transports[0].slice_size: expected a size in 4K..64M "
                          "(K/M/G suffix), got \"1K\"");
    cr_assert_eq(check_slice("1G", err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "t.yaml:3:5: transports[0].slice_size: expected a size in 4K..64M "
                          "(K/M/G suffix), got \"1G\"");
}

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, k, &v), "no key %s", k);
    return v;
}

/* The defaults in the table are what an empty file resolves to, and each
 * key of the table appears in the JSON of a configuration. */
Test(schema, table_defaults_and_json_agree)
{
    char *text = NULL, err[512] = "";
    cr_assert_eq(tern_config_describe(NULL, TERN_DESCRIBE_SCHEMA, &text, err, sizeof err), 0,
                 "%s", err);
    json_object *schema = json_tokener_parse(text), *keys = get(schema, "keys");
    free(text);
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml("", "t.yaml", &cfg, err, sizeof err), 0, "%s", err);
    char *cj = tern_config_to_json(cfg);
    json_object *conf = json_tokener_parse(cj);
    free(cj);
    cr_assert_geq(json_object_array_length(keys), 18);
    for (size_t i = 0; i < json_object_array_length(keys); i++) {
        json_object *k = json_object_array_get_idx(keys, i);
        const char *name = json_object_get_string(get(k, "key"));
        json_object *def = get(k, "default"), *val = get(conf, name);
        cr_assert_not_null(get(k, "help"), "%s has no help", name);
        if (!def) {
            cr_assert_null(val, "%s: no default, but resolves to %s", name,
                           json_object_to_json_string(val));
            continue;
        }
        const char *d = json_object_get_string(def);
        const char *type = json_object_get_string(get(k, "type"));
        if (!strcmp(type, "string") || !strcmp(type, "choice"))
            cr_assert_str_eq(json_object_get_string(val), d, "%s", name);
        else if (!strcmp(type, "int"))
            cr_assert_eq(json_object_get_int64(val), atoll(d), "%s", name);
    }
    cr_assert_eq(json_object_get_int64(get(conf, "slice_size")), 64 << 10);
    cr_assert_eq(json_object_get_int64(get(conf, "handshake_max_frame")), 1 << 20);
    json_object_put(schema);
    json_object_put(conf);
    tern_config_free(cfg);
}

Test(schema, describe_invalid_config_and_config_only)
{
    char *text = (char *)1, err[512] = "", path[] = "/tmp/tern-describe-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "retries: 99\n", 12), 12);
    close(fd);
    cr_assert_eq(tern_config_describe(path, 0, &text, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_null(text);
    cr_assert_not_null(strstr(err, ":1:1: retries: expected an integer in 0..16, got 99"), "%s",
                       err);
    cr_assert_eq(tern_config_describe(NULL, TERN_DESCRIBE_CONFIG_ONLY, &text, err, sizeof err),
                 0, "%s", err);
    json_object *o = json_tokener_parse(text);
    free(text);
    cr_assert_str_eq(json_object_get_string(get(get(o, "config"), "origin")), "<embedded>");
    cr_assert(!json_object_object_get_ex(o, "transports", NULL), "CONFIG_ONLY loaded plugins");
    json_object_put(o);
    cr_assert_eq(tern_config_describe(NULL, 0, NULL, err, sizeof err), TERN_ERR_INVAL);
    unlink(path);
}

/* Plugins get option values through the host services, parsed as the
 * validator parsed them (no octal, a "B" suffix, booleans). */
Test(schema, option_values_read_as_validated)
{
    struct { const char *t; int64_t v; } good[] = {
        {"010", 10}, {"-3", -3}, {"100B", 100}, {"64KiB", 65536}, {"1M", 1 << 20},
        {"on", 1}, {"False", 0}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        int64_t v = -99;
        cr_assert_eq(tern_config_parse_int(good[i].t, &v), 0, "%s", good[i].t);
        cr_assert_eq(v, good[i].v, "%s", good[i].t);
    }
    int64_t v;
    cr_assert_eq(tern_config_parse_int("0x10", &v), TERN_ERR_INVAL);
    cr_assert_eq(tern_config_parse_int("1.5M", &v), TERN_ERR_INVAL);
}
