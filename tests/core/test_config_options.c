/* tests/core/test_config_options.c: the YAML configuration, continued
 * (the Criterion suite "config" of test_config.c, same test program):
 * option checks against a plugin's table, the JSON form, the shipped config
 * files, and a deterministic mutation run that hostile input cannot crash. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv, mkstemp, strdup */
#endif
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/load.h"
#include "config/option.h"
#include "config/json.h"
#include "config_harness.h"
#include "base/util.h"

/* ---- tern_config_check_options against a plugin's table -------------------------- */

static const char *const mtus[] = {"256", "512", "1024", "2048", "4096", NULL};
static const tern_option fake_rdma_opts[] = {
    {"gid_index", TERN_OPT_INT, -1, 255, NULL, "-1", "GID index, -1 = auto"},
    {"mtu", TERN_OPT_CHOICE, 0, 0, mtus, "4096", "path MTU"},
    {"qp_per_endpoint", TERN_OPT_INT, 1, 64, NULL, "2", "RC QPs per endpoint"},
    {"devices", TERN_OPT_STRING_LIST, 0, 0, NULL, NULL, "device allow-list"},
    {"max_inline", TERN_OPT_SIZE, 0, 4096, NULL, "0", "inline data"},
    {"provider", TERN_OPT_STRING, 0, 0, NULL, NULL, "a string"},
    {"odp", TERN_OPT_BOOL, 0, 0, NULL, "false", "on-demand paging"},
    {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL},
};

/* transports[1] is an rdma entry holding `entry` (already indented by 4). */
static void expect_opt_err(const char *entry, const char *msg)
{
    char yaml[1024], err[512] = "";
    snprintf(yaml, sizeof yaml, "transports:\n  - name: tcp\n  - name: rdma\n%s", entry);
    tern_config *cfg = load_ok(yaml);
    cr_assert_eq(tern_config_check_options(cfg, 0, fake_rdma_opts, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(tern_config_check_options(cfg, 1, fake_rdma_opts, err, sizeof err),
                 TERN_ERR_CONFIG, "accepted:\n%s", yaml);
    cr_assert_str_eq(err, msg);
    tern_config_free(cfg);
}

Test(config, check_options_example_message)
{
    const char *yaml = "server_name: 127.0.0.1:0\n"
                       "metadata: p2p\n"
                       "transports:\n"
                       "  - name: tcp\n"
                       "  - name: rdma\n"
                       "    gid_index: -1\n"
                       "    mtu: 9000\n";
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml(yaml, "tern.yaml", &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_config_check_options(cfg, 1, fake_rdma_opts, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "tern.yaml:7:5: transports[1].mtu: expected one of 256, 512, 1024, "
                          "2048, 4096, got 9000");
    tern_config_free(cfg);
    /* the same from a file: the file name as given */
    cr_assert_eq(tern_config_load_file(FIXTURE("bad_mtu.yaml"), &cfg, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(tern_config_check_options(cfg, 1, fake_rdma_opts, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_str_eq(err, FIXTURE("bad_mtu.yaml") ":7:5: transports[1].mtu: expected one of "
                                                  "256, 512, 1024, 2048, 4096, got 9000");
    tern_config_free(cfg);
}

Test(config, check_options_accepts_valid_entries)
{
    tern_config *cfg = load_ok("transports:\n  - name: rdma\n    gid_index: -1\n    mtu: 1024\n"
                               "    qp_per_endpoint: 64\n    devices: [mlx5_0]\n"
                               "    max_inline: 4K\n    provider: efa\n    odp: on\n");
    char err[256] = "";
    cr_assert_eq(tern_config_check_options(cfg, 0, fake_rdma_opts, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(tern_config_check_options(cfg, 1, fake_rdma_opts, err, sizeof err),
                 TERN_ERR_INVAL);
    cr_assert_str_eq(err, "tern_config_check_options: no transport 1");
    tern_config_free(cfg);
}

Test(config, check_options_unknown_key)
{
    expect_opt_err("    mtuu: 4096\n",
                   "t.yaml:4:5: transports[1].mtuu: expected a key of transport rdma (did you "
                   "mean mtu?), got unknown key \"mtuu\"");
    expect_opt_err("    bananas: 1\n",
                   "t.yaml:4:5: transports[1].bananas: expected a key of transport rdma (one of "
                   "gid_index, mtu, qp_per_endpoint, devices, max_inline, provider, odp, name, "
                   "path, required), got unknown key \"bananas\"");
    /* a plugin without options takes no keys */
    tern_config *cfg = load_ok("transports:\n  - name: memcpy\n    depth: 3\n");
    char err[256];
    cr_assert_eq(tern_config_check_options(cfg, 0, NULL, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "t.yaml:3:5: transports[0].depth: expected no keys (transport memcpy "
                          "takes none), got unknown key \"depth\"");
    tern_config_free(cfg);
}

Test(config, check_options_wrong_type)
{
    expect_opt_err("    gid_index: abc\n", "t.yaml:4:5: transports[1].gid_index: expected an "
                                           "integer in -1..255, got \"abc\"");
    expect_opt_err("    gid_index: [1]\n", "t.yaml:4:5: transports[1].gid_index: expected an "
                                           "integer in -1..255, got a list");
    expect_opt_err("    devices: mlx5_0\n", "t.yaml:4:5: transports[1].devices: expected a list "
                                            "of values, got \"mlx5_0\"");
    expect_opt_err("    odp: 2\n",
                   "t.yaml:4:5: transports[1].odp: expected true or false, got 2");
    expect_opt_err("    provider: []\n",
                   "t.yaml:4:5: transports[1].provider: expected a value, got an empty list");
    expect_opt_err("    max_inline: 1Q\n", "t.yaml:4:5: transports[1].max_inline: expected a "
                                           "size in 0..4K (K/M/G suffix), got \"1Q\"");
}

Test(config, check_options_out_of_range_and_bad_choice)
{
    expect_opt_err("    gid_index: 256\n", "t.yaml:4:5: transports[1].gid_index: expected an "
                                           "integer in -1..255, got 256");
    expect_opt_err("    qp_per_endpoint: 0\n", "t.yaml:4:5: transports[1].qp_per_endpoint: "
                                               "expected an integer in 1..64, got 0");
    expect_opt_err("    max_inline: 8K\n", "t.yaml:4:5: transports[1].max_inline: expected a "
                                           "size in 0..4K (K/M/G suffix), got \"8K\"");
    expect_opt_err("    mtu: jumbo\n", "t.yaml:4:5: transports[1].mtu: expected one of 256, "
                                       "512, 1024, 2048, 4096, got \"jumbo\"");
}

/* ---- JSON -------------------------------------------------------------------- */

Test(config, to_json_parses_and_holds_the_resolved_values)
{
    setenv("TERN_PLUGIN_PATH", "/env/p", 1);
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(FIXTURE("full.yaml"), &cfg, err, sizeof err), 0, "%s", err);
    char *text = tern_config_to_json(cfg);
    cr_assert_not_null(text);
    json_object *o = json_tokener_parse(text), *v, *t, *opt;
    cr_assert_not_null(o, "not JSON:\n%s", text);
    cr_assert(json_object_object_get_ex(o, "server_name", &v));
    cr_assert_str_eq(json_object_get_string(v), "[::1]:0");
    cr_assert(json_object_object_get_ex(o, "slice_size", &v));
    cr_assert_eq(json_object_get_int64(v), 1 << 20);
    cr_assert(json_object_object_get_ex(o, "log_level", &v));
    cr_assert_str_eq(json_object_get_string(v), "debug");
    cr_assert(json_object_object_get_ex(o, "eviction", &v));
    cr_assert_str_eq(json_object_get_string(v), "fifo");
    cr_assert(json_object_object_get_ex(o, "plugin_path", &v));
    cr_assert_eq(json_object_array_length(v), 3);
    cr_assert_str_eq(json_object_get_string(json_object_array_get_idx(v, 0)), "/env/p");
    cr_assert(json_object_object_get_ex(o, "transports", &v));
    cr_assert_eq(json_object_array_length(v), 2);
    t = json_object_array_get_idx(v, 0);
    cr_assert(json_object_object_get_ex(t, "required", &v));
    cr_assert(json_object_get_boolean(v));
    cr_assert(json_object_object_get_ex(t, "options", &opt));
    cr_assert(json_object_object_get_ex(opt, "gid_index", &v));
    cr_assert_str_eq(json_object_get_string(v), "3");
    cr_assert(json_object_object_get_ex(opt, "devices", &v));
    cr_assert_eq(json_object_array_length(v), 2);
    cr_assert(json_object_object_get_ex(o, "environment", &v));
    cr_assert(json_object_object_get_ex(v, "TERN_PLUGIN_PATH", &t));
    cr_assert_eq(json_object_array_length(t), 1);
    json_object_put(o);
    free(text);
    tern_config_free(cfg);
    cr_assert_null(tern_config_to_json(NULL));
}

/* ---- the shipped files ----------------------------------------------------------- */

static tern_config *load_shipped(const char *path)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(path, &cfg, err, sizeof err), 0, "%s: %s", path, err);
    return cfg;
}

Test(config, shipped_tern_yaml)
{
    tern_config *cfg = load_shipped(SHIPPED("tern.yaml"));
    assert_shipped_defaults(cfg);
    tern_config_free(cfg);
}

Test(config, shipped_rdma_yaml)
{
    tern_config *cfg = load_shipped(SHIPPED("rdma.yaml"));
    cr_assert_eq(cfg->ntransports, 2);
    cr_assert_str_eq(cfg->transports[0].name, "rdma");
    cr_assert_str_eq(cfg->transports[1].name, "tcp");
    cr_assert_str_eq(tern_config_transport_key(cfg, 0, "gid_index")->value, "-1");
    cr_assert_str_eq(tern_config_transport_key(cfg, 0, "mtu")->value, "4096");
    cr_assert_str_eq(tern_config_transport_key(cfg, 0, "qp_per_endpoint")->value, "2");
    char err[256];
    cr_assert_eq(tern_config_check_options(cfg, 0, fake_rdma_opts, err, sizeof err), 0, "%s", err);
    tern_config_free(cfg);
}

Test(config, shipped_efa_yaml)
{
    tern_config *cfg = load_shipped(SHIPPED("efa.yaml"));
    cr_assert_eq(cfg->ntransports, 2);
    cr_assert_str_eq(cfg->transports[0].name, "efa");
    cr_assert_str_eq(tern_config_transport_key(cfg, 0, "provider")->value, "efa");
    cr_assert_str_eq(cfg->transports[1].name, "tcp");
    tern_config_free(cfg);
}

Test(config, shipped_multi_yaml)
{
    tern_config *cfg = load_shipped(SHIPPED("multi.yaml"));
    cr_assert_eq(cfg->ntransports, 3);
    cr_assert_str_eq(cfg->transports[0].name, "rdma");
    cr_assert_str_eq(cfg->transports[1].name, "efa");
    cr_assert_str_eq(cfg->transports[2].name, "tcp");
    cr_assert_eq(cfg->transports[2].required, 1);
    tern_config_free(cfg);
}

/* The shipped files' transport keys fit the real plugins' option tables
 * (read from the exported data symbol only: no plugin code runs). */
Test(config, shipped_files_fit_the_built_plugins_options)
{
    static const char *const files[] = {"tern.yaml", "rdma.yaml", "efa.yaml", "multi.yaml"};
    int checked = 0;
    for (size_t f = 0; f < 4; f++) {
        char path[512], so[512], err[512] = "";
        snprintf(path, sizeof path, "%s/config/%s", TERN_SOURCE_DIR, files[f]);
        tern_config *cfg = load_shipped(path);
        for (size_t i = 0; i < cfg->ntransports; i++) {
            snprintf(so, sizeof so, "%s/lib/tern/libtern-%s.so", TERN_BUILD_DIR,
                     cfg->transports[i].name);
            void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
            if (!dl) {
                cr_log_warn("skipping %s in %s: %s", cfg->transports[i].name, files[f], dlerror());
                continue;
            }
            const tern_transport *t = dlsym(dl, TERN_TRANSPORT_SYMBOL);
            cr_assert_not_null(t, "%s has no %s", so, TERN_TRANSPORT_SYMBOL);
            cr_assert_eq(tern_config_check_options(cfg, i, t->options, err, sizeof err), 0,
                         "%s", err);
            checked++;
            /* no dlclose(): libfabric/verbs constructors leave memory that
             * valgrind calls lost once the library is unloaded */
        }
        tern_config_free(cfg);
    }
    if (!checked)
        cr_skip_test("no transport plugin is built in " TERN_BUILD_DIR "/lib/tern");
}

/* ---- hostile input: deterministic mutations never crash ---------------------------- */

Test(config, mutated_inputs_fail_cleanly)
{
    char *seed = NULL, err[512];
    size_t len = 0;
    cr_assert_eq(tern_read_file(SHIPPED("multi.yaml"), &seed, &len, err, sizeof err), 0);
    static const char junk[] = ":-[]{},&*!|>'\"%@`#?\n\t \\0x";
    uint32_t rng = 12345;
    char *buf = malloc(len + 64);
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, seed, len + 1);
        size_t cur = len;
        for (int m = 0; m < 1 + iter % 4; m++) {
            rng = rng * 1103515245u + 12345u;
            size_t at = (rng >> 8) % cur;
            rng = rng * 1103515245u + 12345u;
            int how = (int)((rng >> 8) % 3);
            char c = junk[(rng >> 16) % (sizeof junk - 1)];
            if (how == 0)
                buf[at] = c;                                  /* replace */
            else if (how == 1 && cur > 1)
                memmove(buf + at, buf + at + 1, cur-- - at);  /* delete */
            else {
                memmove(buf + at + 1, buf + at, ++cur - at);  /* insert */
                buf[at] = c;
            }
        }
        tern_config *cfg = NULL;
        err[0] = '\0';
        int rc = tern_config_load_yaml(buf, "m.yaml", &cfg, err, sizeof err);
        if (rc == 0) {
            ok++;
            char *j = tern_config_to_json(cfg);
            cr_assert_not_null(j);
            free(j);
            tern_config_free(cfg);
        } else {
            bad++;
            cr_assert_eq(rc, TERN_ERR_CONFIG);
            cr_assert_null(cfg);
            cr_assert(!strncmp(err, "m.yaml:", 7), "message without origin: %s", err);
            cr_assert(strstr(err, ": expected ") && strstr(err, ", got "), "bad form: %s", err);
        }
    }
    cr_log_info("mutations: %d loaded, %d refused", ok, bad);
    cr_assert_gt(bad, 0);
    free(buf);
    free(seed);
}
