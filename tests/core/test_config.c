/* tests/core/test_config.c: the YAML configuration (core/config/).
 *
 * Defaults, the environment and its precedence, and every error class with
 * its exact message (origin:line:col: key.path: expected ..., got ...).
 * The same Criterion suite continues in test_config_options.c (option
 * checks against a plugin's table, the JSON form, the shipped config files,
 * hostile input); both files build the one test program test_config. */
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
#include "config/values.h"
#include "config_harness.h"
#include "base/util.h"

/* Criterion forks per test, but each test starts from a clean environment. */
static void clean_env(void)
{
    unsetenv("TERN_CONFIG");
    unsetenv("TERN_LOG_LEVEL");
    unsetenv("TERN_PLUGIN_PATH");
}

TestSuite(config, .init = clean_env);

/* Loading `yaml` (origin "t.yaml") fails with exactly `msg`. */
static void expect_err(const char *yaml, const char *msg)
{
    char err[512] = "";
    tern_config *cfg = (tern_config *)&err; /* must be reset to NULL */
    int rc = tern_config_load_yaml(yaml, "t.yaml", &cfg, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONFIG, "rc %d for:\n%s", rc, yaml);
    cr_assert_null(cfg);
    cr_assert_str_eq(err, msg, "for:\n%s", yaml);
}

static char *write_tmp(const char *text)
{
    char *path = strdup("/tmp/tern-cfg-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* ---- defaults ----------------------------------------------------------------- */

Test(config, embedded_default_is_config_tern_yaml)
{
    char *text = NULL, err[256];
    cr_assert_eq(tern_read_file(SHIPPED("tern.yaml"), &text, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(tern_config_default_yaml(), text,
                     "config/tern.yaml and the text compiled into core/config/load.c differ");
    free(text);
}

Test(config, no_path_no_env_gives_embedded_default)
{
    char err[256] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(NULL, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(cfg->origin, "<embedded>");
    assert_shipped_defaults(cfg);
    tern_config_free(cfg);
}

Test(config, empty_file_and_null_document_take_every_default)
{
    const char *docs[] = {"", "# only a comment\n", "~\n", "---\n...\n", "{}\n"};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        tern_config *cfg = load_ok(docs[i]);
        assert_defaults(cfg);
        tern_config_free(cfg);
    }
}

Test(config, file_without_transports_gets_tcp)
{
    tern_config *cfg = load_ok("retries: 5\n");
    cr_assert_eq(cfg->retries, 5);
    cr_assert_eq(cfg->ntransports, 1);
    cr_assert_str_eq(cfg->transports[0].name, "tcp");
    tern_config_free(cfg);
}

Test(config, every_key_is_read)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(FIXTURE("full.yaml"), &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(cfg->origin, FIXTURE("full.yaml"));
    cr_assert_str_eq(cfg->server_name, "[::1]:0");
    cr_assert_str_eq(cfg->metadata, "etcd://10.0.0.1:2379,10.0.0.2:2379");
    cr_assert_str_eq(cfg->cluster_id, "prod-eu.1");
    cr_assert_eq(cfg->ntransports, 2);
    const tern_transport_cfg *r = &cfg->transports[0];
    cr_assert_str_eq(r->name, "rdma");
    cr_assert_str_eq(r->path, "/opt/tern/libtern-rdma.so");
    cr_assert_eq(r->required, 1);
    cr_assert_eq(r->line, 6);
    cr_assert_eq(r->col, 5);
    cr_assert_eq(r->nkv, 2);
    const tern_cfg_kv *g = tern_config_transport_key(cfg, 0, "gid_index");
    cr_assert_not_null(g);
    cr_assert_str_eq(g->value, "3");
    cr_assert_null(g->items);
    cr_assert_eq(g->line, 9);
    cr_assert_eq(g->col, 5);
    const tern_cfg_kv *d = tern_config_transport_key(cfg, 0, "devices");
    cr_assert_null(d->value);
    cr_assert_eq(d->nitems, 2);
    cr_assert_str_eq(d->items[1], "mlx5_1");
    cr_assert_null(tern_config_transport_key(cfg, 0, "mtu"));
    cr_assert_null(tern_config_transport_key(cfg, 0, "name"), "generic keys are not kvs");
    cr_assert_null(tern_config_transport_key(cfg, 7, "gid_index"));
    cr_assert_str_eq(cfg->transports[1].name, "tcp");
    cr_assert_eq(cfg->transports[1].required, 0);
    cr_assert_eq(cfg->nplugin_path, 2);
    cr_assert_str_eq(cfg->plugin_path[0], "/opt/tern/plugins");
    cr_assert_str_eq(cfg->plugin_path[1], "/usr/local/lib/tern");
    cr_assert_str_eq(cfg->topology, "/etc/tern/topology.json");
    cr_assert_str_eq(cfg->topology_sysfs_root, "/tmp/fake-sys");
    cr_assert_eq(cfg->ndevice_allow, 3);
    cr_assert_str_eq(cfg->device_allow[2], "eth0");
    cr_assert_eq(cfg->select_policy, TERN_SELECT_ROUND_ROBIN);
    cr_assert_eq(cfg->slice_size, 1 << 20);
    cr_assert_eq(cfg->retries, 0);
    cr_assert_eq(cfg->log_level, TERN_LOG_DEBUG);
    cr_assert_eq(cfg->handshake_max_frame, 4 << 20);
    cr_assert_eq(cfg->connect_timeout_ms, 250);
    cr_assert_eq(cfg->io_timeout_ms, 60000);
    cr_assert_eq(cfg->endpoint_cache, 65536);
    cr_assert_eq(cfg->eviction, TERN_EVICT_FIFO);
    cr_assert_str_eq(cfg->auth_secret_file, "/etc/tern/secret");
    tern_config_free(cfg);
}

Test(config, accepted_value_forms)
{
    tern_config *cfg = load_ok("server_name: localhost:12001\nlog_level: WARN\n"
                               "slice_size: 4KiB\nhandshake_max_frame: 64MB\n"
                               "transports: [{name: tcp, required: True}]\n"
                               "plugin_path: ~\ndevices: []\nauth_secret_file: null\n");
    cr_assert_eq(cfg->log_level, TERN_LOG_WARN);
    cr_assert_eq(cfg->slice_size, 4096);
    cr_assert_eq(cfg->handshake_max_frame, 64 << 20);
    cr_assert_eq(cfg->transports[0].required, 1);
    cr_assert_eq(cfg->nplugin_path, 0);
    cr_assert_eq(cfg->ndevice_allow, 0);
    cr_assert_null(cfg->auth_secret_file);
    tern_config_free(cfg);
    cfg = load_ok("log_level: 0\nretries: 16\nendpoint_cache: 1\n");
    cr_assert_eq(cfg->log_level, TERN_LOG_ERROR);
    cr_assert_eq(cfg->retries, 16);
    tern_config_free(cfg);
}

Test(config, metadata_uris)
{
    const char *good[] = {"p2p", "redis://127.0.0.1:6379", "redis://redis.local:6379/3",
                          "etcd://127.0.0.1:2379", "etcd://a:1,b:2,[::1]:3",
                          "http://127.0.0.1:8080/tern", "http://meta.local", "http://m:80/x/y"};
    const char *bad[] = {"P2P", "redis://", "redis://host", "redis://host:6379/",
                         "redis://host:6379/x", "etcd://a:1,", "etcd://a:1,,b:2",
                         "http://", "http://h:99999/x", "mysql://h:1", "http://h/a b",
                         "https://m:443/x/y"};
    char yaml[256], msg[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(yaml, sizeof yaml, "metadata: \"%s\"\n", good[i]);
        tern_config *cfg = load_ok(yaml);
        cr_assert_str_eq(cfg->metadata, good[i]);
        tern_config_free(cfg);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(yaml, sizeof yaml, "metadata: \"%s\"\n", bad[i]);
        snprintf(msg, sizeof msg,
                 "t.yaml:1:1: metadata: expected p2p, redis://host:port[/db], "
                 "etcd://host:port[,host:port...] or http://host[:port][/path], got \"%s\"",
                 bad[i]);
        expect_err(yaml, msg);
    }
}

Test(config, server_names)
{
    const char *good[] = {"127.0.0.1:0", "127.0.0.1:65535", "[::1]:12001", "node-7.cluster:1",
                          "[fe80::1%eth0]:5"};
    const char *bad[] = {"127.0.0.1", "127.0.0.1:", ":12001", "127.0.0.1:65536", "a b:1",
                         "::1:12001", "[::1]", "h:1x", "h:123456"};
    char yaml[256], msg[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(yaml, sizeof yaml, "server_name: \"%s\"\n", good[i]);
        tern_config_free(load_ok(yaml));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(yaml, sizeof yaml, "server_name: \"%s\"\n", bad[i]);
        snprintf(msg, sizeof msg,
                 "t.yaml:1:1: server_name: expected host:port (port 0..65535; [addr] for "
                 "IPv6), got \"%s\"", bad[i]);
        expect_err(yaml, msg);
    }
}

Test(config, parse_size)
{
    struct { const char *t; uint64_t v; } good[] = {
        {"0", 0}, {"4096", 4096}, {"64K", 65536}, {"64k", 65536}, {"1M", 1 << 20},
        {"2G", 2ull << 30}, {"1T", 1ull << 40}, {"64KB", 65536}, {"64KiB", 65536},
        {"100B", 100}, {"18446744073709551615", UINT64_MAX}};
    const char *bad[] = {"", "K", "-1", "1.5M", " 1M", "1M ", "1Q", "1MiBx", "0x10",
                         "18446744073709551616", "17179869184G", NULL};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 1;
        cr_assert_eq(tern_parse_size(good[i].t, &v), 0, "%s", good[i].t);
        cr_assert_eq(v, good[i].v, "%s", good[i].t);
    }
    for (size_t i = 0; bad[i]; i++) {
        uint64_t v = 7;
        cr_assert_eq(tern_parse_size(bad[i], &v), TERN_ERR_INVAL, "%s", bad[i]);
        cr_assert_eq(v, 7);
    }
    uint64_t v;
    cr_assert_eq(tern_parse_size(NULL, &v), TERN_ERR_INVAL);
}

/* ---- environment and precedence -------------------------------------------- */

Test(config, tern_config_names_the_file)
{
    char *path = write_tmp("server_name: 127.0.0.1:4444\nlog_level: warn\n");
    setenv("TERN_CONFIG", path, 1);
    char err[256] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(NULL, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(cfg->origin, path);
    cr_assert_str_eq(cfg->server_name, "127.0.0.1:4444");
    cr_assert_eq(cfg->log_level, TERN_LOG_WARN);
    cr_assert_eq(cfg->env_overrides, TERN_CFG_ENV_CONFIG);
    tern_config_free(cfg);
    /* an explicit path wins over $TERN_CONFIG */
    cr_assert_eq(tern_config_load_file(FIXTURE("full.yaml"), &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(cfg->server_name, "[::1]:0");
    cr_assert_eq(cfg->env_overrides & TERN_CFG_ENV_CONFIG, 0);
    tern_config_free(cfg);
    /* an empty $TERN_CONFIG counts as unset */
    setenv("TERN_CONFIG", "", 1);
    cr_assert_eq(tern_config_load_file(NULL, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(cfg->origin, "<embedded>");
    tern_config_free(cfg);
    unlink(path);
    free(path);
}

Test(config, tern_config_missing_file)
{
    setenv("TERN_CONFIG", "/nonexistent/tern.yaml", 1);
    char err[256] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(NULL, &cfg, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_null(cfg);
    cr_assert_str_eq(err, "TERN_CONFIG=/nonexistent/tern.yaml: cannot open: No such file or "
                          "directory");
    cr_assert_eq(tern_config_load_file("/nonexistent/x.yaml", &cfg, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "/nonexistent/x.yaml: cannot open: No such file or directory");
    cr_assert_eq(tern_config_load_file("/", &cfg, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "/: cannot read: Is a directory");
}

Test(config, tern_log_level_overrides_file_and_default)
{
    setenv("TERN_LOG_LEVEL", "debug", 1);
    tern_config *cfg = load_ok("log_level: error\n");
    cr_assert_eq(cfg->log_level, TERN_LOG_DEBUG);
    cr_assert_eq(cfg->env_overrides, TERN_CFG_ENV_LOG_LEVEL);
    tern_config_free(cfg);
    setenv("TERN_LOG_LEVEL", "1", 1);
    char err[256] = "";
    cr_assert_eq(tern_config_load_file(NULL, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg->log_level, TERN_LOG_WARN, "env beats the embedded default too");
    tern_config_free(cfg);
    setenv("TERN_LOG_LEVEL", "", 1);
    cfg = load_ok("log_level: error\n");
    cr_assert_eq(cfg->log_level, TERN_LOG_ERROR, "an empty variable counts as unset");
    cr_assert_eq(cfg->env_overrides, 0);
    tern_config_free(cfg);
}

Test(config, tern_log_level_invalid)
{
    setenv("TERN_LOG_LEVEL", "verbose", 1);
    char err[256] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml("retries: 1\n", "t.yaml", &cfg, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_null(cfg);
    cr_assert_str_eq(err, "TERN_LOG_LEVEL (environment): expected one of error, warn, info, "
                          "debug, 0, 1, 2, 3, got \"verbose\"");
}

Test(config, tern_plugin_path_is_prepended)
{
    setenv("TERN_PLUGIN_PATH", "/env/a::/env/b:", 1);
    tern_config *cfg = load_ok("plugin_path: [/file/c]\n");
    cr_assert_eq(cfg->nplugin_path, 3);
    cr_assert_eq(cfg->nplugin_path_env, 2);
    cr_assert_str_eq(cfg->plugin_path[0], "/env/a");
    cr_assert_str_eq(cfg->plugin_path[1], "/env/b");
    cr_assert_str_eq(cfg->plugin_path[2], "/file/c");
    cr_assert_eq(cfg->env_overrides, TERN_CFG_ENV_PLUGIN_PATH);
    tern_config_free(cfg);
    setenv("TERN_PLUGIN_PATH", ":::", 1);
    cfg = load_ok("plugin_path: [/file/c]\n");
    cr_assert_eq(cfg->nplugin_path, 1);
    cr_assert_eq(cfg->nplugin_path_env, 0);
    cr_assert_eq(cfg->env_overrides, 0);
    tern_config_free(cfg);
}

Test(config, environment_beats_file_beats_default)
{
    char *path = write_tmp("log_level: warn\nplugin_path: [/file]\nretries: 9\n");
    setenv("TERN_CONFIG", path, 1);
    setenv("TERN_LOG_LEVEL", "error", 1);
    setenv("TERN_PLUGIN_PATH", "/env", 1);
    char err[256] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(NULL, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg->retries, 9, "file beats default");
    cr_assert_eq(cfg->io_timeout_ms, 2000, "default where the file says nothing");
    cr_assert_eq(cfg->log_level, TERN_LOG_ERROR, "environment beats file");
    cr_assert_str_eq(cfg->plugin_path[0], "/env");
    cr_assert_str_eq(cfg->plugin_path[1], "/file");
    cr_assert_eq(cfg->env_overrides,
                 TERN_CFG_ENV_CONFIG | TERN_CFG_ENV_LOG_LEVEL | TERN_CFG_ENV_PLUGIN_PATH);
    tern_config_free(cfg);
    unlink(path);
    free(path);
}

/* ---- error classes: one exact message each ------------------------------------ */

Test(config, error_malformed_yaml)
{
    expect_err("a: b: c\n", "t.yaml:1:5: (root): expected valid YAML, got mapping values are "
                            "not allowed in this context");
    expect_err("server_name: \"127.0.0.1:0\n",
               "t.yaml:2:1: server_name: expected valid YAML, got found unexpected end of "
               "stream (while scanning a quoted scalar at 1:14)");
    expect_err("transports:\n  - name: tcp\n\tport: 1\n",
               "t.yaml:3:1: transports[0].name: expected valid YAML, got found a tab "
               "character that violates indentation (while scanning a plain scalar at 2:11)");
    expect_err("a: \"\xff\"\n",
               "t.yaml:1:5: (root): expected valid YAML, got invalid leading UTF-8 octet");
}

Test(config, error_malformed_yaml_in_a_file)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(FIXTURE("bad_syntax.yaml"), &cfg, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_null(cfg);
    cr_assert_str_eq(err, FIXTURE("bad_syntax.yaml") ":5:10: transports[0].connections[2]: "
                          "expected valid YAML, got did not find expected ',' or ']' (while "
                          "parsing a flow sequence at 4:18)");
}

Test(config, error_unknown_key)
{
    expect_err("server_name: 127.0.0.1:0\nslize_size: 64K\n",
               "t.yaml:2:1: slize_size: expected a top-level key (did you mean slice_size?), "
               "got unknown key \"slize_size\"");
    expect_err("bananas: 3\n", "t.yaml:1:1: bananas: expected a top-level key (see "
                               "docs/configuration.md), got unknown key \"bananas\"");
}

Test(config, error_wrong_type)
{
    expect_err("server_name:\n  host: a\n",
               "t.yaml:1:1: server_name: expected host:port (port 0..65535; [addr] for IPv6), "
               "got a mapping");
    expect_err("retries: abc\n", "t.yaml:1:1: retries: expected an integer in 0..16, got \"abc\"");
    expect_err("retries: [1]\n", "t.yaml:1:1: retries: expected an integer in 0..16, got a list");
    expect_err("retries: 3.0\n", "t.yaml:1:1: retries: expected an integer in 0..16, got \"3.0\"");
    expect_err("retries:\n", "t.yaml:1:1: retries: expected an integer in 0..16, got null");
    expect_err("plugin_path: /opt/tern\n",
               "t.yaml:1:1: plugin_path: expected a list of directories, got \"/opt/tern\"");
    expect_err("plugin_path: [/a, [b]]\n",
               "t.yaml:1:19: plugin_path[1]: expected a directory, got a list");
    expect_err("devices: [mlx5_0, \"a/b\"]\n",
               "t.yaml:1:19: devices[1]: expected a device name (A-Z a-z 0-9 . _ -, at "
               "most 63), got \"a/b\"");
    expect_err("transports: tcp\n",
               "t.yaml:1:1: transports: expected a list of at least one transport, got \"tcp\"");
    expect_err("transports:\n  - tcp\n",
               "t.yaml:2:5: transports[0]: expected a mapping with at least name, got \"tcp\"");
    expect_err("transports:\n  - name: tcp\n    required: maybe\n",
               "t.yaml:3:5: transports[0].required: expected true or false, got \"maybe\"");
    expect_err("transports:\n  - name: tcp\n    port: {a: 1}\n",
               "t.yaml:3:5: transports[0].port: expected a value or a list of values, got a "
               "mapping");
    expect_err("transports:\n  - name: tcp\n    port:\n",
               "t.yaml:3:5: transports[0].port: expected a value or a list of values, got null");
    expect_err("transports:\n  - name: tcp\n    devices: [a, [b]]\n",
               "t.yaml:3:18: transports[0].devices[1]: expected a value, got a list");
    expect_err("select_policy: fastest\n",
               "t.yaml:1:1: select_policy: expected one of random, round_robin, got \"fastest\"");
    expect_err("eviction: LRU\n", "t.yaml:1:1: eviction: expected one of sieve, fifo, got \"LRU\"");
    expect_err("huge_pages: yes\n",
               "t.yaml:1:1: huge_pages: expected one of off, advise, collapse, got \"yes\"");
    expect_err("log_level: loud\n", "t.yaml:1:1: log_level: expected one of error, warn, info, "
                                    "debug, 0, 1, 2, 3, got \"loud\"");
    expect_err("cluster_id: \"a b\"\n", "t.yaml:1:1: cluster_id: expected a name of 1..64 "
                                        "characters from A-Z a-z 0-9 . _ -, got \"a b\"");
    expect_err("topology: \"\"\n",
               "t.yaml:1:1: topology: expected auto or the path of a JSON file, got \"\"");
    expect_err("- a\n- b\n", "t.yaml:1:1: (root): expected a mapping of settings, got a list");
    expect_err("? [a]\n: b\n", "t.yaml:1:3: (root): expected a plain key, got a list");
}

Test(config, error_out_of_range)
{
    expect_err("retries: 17\n", "t.yaml:1:1: retries: expected an integer in 0..16, got 17");
    expect_err("retries: -1\n", "t.yaml:1:1: retries: expected an integer in 0..16, got -1");
    expect_err("retries: 99999999999999999999\n",
               "t.yaml:1:1: retries: expected an integer in 0..16, got 99999999999999999999");
    expect_err("slice_size: 1K\n",
               "t.yaml:1:1: slice_size: expected a size in 4K..64M (K/M/G suffix), got \"1K\"");
    expect_err("slice_size: 128M\n",
               "t.yaml:1:1: slice_size: expected a size in 4K..64M (K/M/G suffix), got \"128M\"");
    expect_err("handshake_max_frame: 1G\n", "t.yaml:1:1: handshake_max_frame: expected a size "
                                            "in 4K..64M (K/M/G suffix), got \"1G\"");
    expect_err("endpoint_cache: 0\n",
               "t.yaml:1:1: endpoint_cache: expected an integer in 1..65536, got 0");
    expect_err("connect_timeout_ms: 0\n",
               "t.yaml:1:1: connect_timeout_ms: expected an integer in 1..3600000, got 0");
    expect_err("io_timeout_ms: 3600001\n",
               "t.yaml:1:1: io_timeout_ms: expected an integer in 1..3600000, got 3600001");
    expect_err("server_name: 127.0.0.1:70000\n",
               "t.yaml:1:1: server_name: expected host:port (port 0..65535; [addr] for IPv6), "
               "got \"127.0.0.1:70000\"");
}

Test(config, error_duplicate_transport_name)
{
    expect_err("transports:\n  - name: tcp\n  - name: rdma\n  - name: tcp\n    port: 1\n",
               "t.yaml:4:5: transports[2].name: expected a unique transport name, got \"tcp\" "
               "again (first in transports[0] at 2:5)");
}

Test(config, error_missing_required_key)
{
    expect_err("transports:\n  - name: tcp\n  - path: /opt/x.so\n    required: true\n",
               "t.yaml:3:5: transports[1]: expected key name, got an entry without it");
    expect_err("transports:\n  - {}\n",
               "t.yaml:2:5: transports[0]: expected key name, got an empty entry");
    expect_err("transports: []\n", "t.yaml:1:1: transports: expected a list of at least one "
                                   "transport, got an empty list");
    expect_err("transports:\n  - name: \"\"\n",
               "t.yaml:2:5: transports[0].name: expected a transport name (A-Z a-z 0-9 . _ -, "
               "at most 63), got \"\"");
}

Test(config, error_duplicate_key)
{
    expect_err("retries: 1\nlog_level: info\nretries: 2\n",
               "t.yaml:3:1: retries: expected each key once, got a duplicate (first at 1:1)");
    expect_err("transports:\n  - name: rdma\n    mtu: 1024\n    mtu: 4096\n",
               "t.yaml:4:5: transports[0].mtu: expected each key once, got a duplicate (first "
               "at 3:5)");
    expect_err("transports:\n  - {name: a, name: b}\n",
               "t.yaml:2:15: transports[0].name: expected each key once, got a duplicate "
               "(first at 2:6)");
}

Test(config, error_hostile_structure)
{
    expect_err("a: &x 1\nb: *x\n",
               "t.yaml:2:4: b: expected a value, got alias *x (aliases are not supported)");
    expect_err("retries: !!int 3\n",
               "t.yaml:1:10: retries: expected an untagged value, got tag tag:yaml.org,2002:int");
    expect_err("retries: 1\n---\nretries: 2\n",
               "t.yaml:2:1: (root): expected a single document, got a second one");
    expect_err("a:\n  b:\n    - [1, {c: [[[[1]]]]}]\n",
               "t.yaml:3:18: a.b[0][1].c[0][0][0]: expected at most 8 levels of nesting, got "
               "deeper");
    /* a flow-nesting bomb stops at the cap, not at the end of the input */
    size_t n = 200000;
    char *deep = malloc(n + 1);
    memset(deep, '[', n);
    deep[n] = '\0';
    expect_err(deep, "t.yaml:1:9: [0][0][0][0][0][0][0][0]: expected at most 8 levels of "
                     "nesting, got deeper");
    free(deep);
}

Test(config, error_hostile_sizes)
{
    /* more than 1 MiB of text */
    size_t n = (1u << 20) + 10;
    char *big = malloc(n + 1);
    memset(big, '#', n);
    big[n] = '\0';
    expect_err(big, "t.yaml:1:1: (root): expected at most 1 MiB of YAML, got 1048586 bytes");
    free(big);
    /* a 5000-byte scalar */
    char *lng = malloc(6000);
    strcpy(lng, "cluster_id: ");
    memset(lng + 12, 'x', 5000);
    strcpy(lng + 5012, "\n");
    expect_err(lng, "t.yaml:1:13: cluster_id: expected a value of at most 4096 bytes, got a "
                    "longer one");
    free(lng);
    /* a mapping with 300 keys */
    char *keys = malloc(300 * 16 + 1), *p = keys;
    for (int i = 0; i < 300; i++)
        p += sprintf(p, "k%03d: 1\n", i);
    expect_err(keys, "t.yaml:257:1: (root): expected at most 256 keys in a mapping, got more");
    free(keys);
    /* a list with 2000 items */
    char *items = malloc(2000 * 3 + 32);
    p = items + sprintf(items, "devices: [");
    for (int i = 0; i < 2000; i++)
        p += sprintf(p, "a,");
    strcpy(p, "a]\n");
    expect_err(items, "t.yaml:1:2059: devices[1024]: expected at most 1024 list items, got more");
    free(items);
    /* 70 lists of 1024 items: more values than the cap */
    char *many = malloc(70 * (2 + 1024 * 2) + 16), *q = many;
    q += sprintf(q, "x: [");
    for (int l = 0; l < 70; l++) {
        *q++ = '[';
        for (int i = 0; i < 1024; i++)
            q += sprintf(q, i ? ",1" : "1");
        q += sprintf(q, "],");
    }
    strcpy(q - 1, "]\n");
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml(many, "t.yaml", &cfg, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_null(cfg);
    cr_assert(strstr(err, ": x[63][") && strstr(err, ": expected at most 65536 values, got more"),
              "%s", err);
    free(many);
    /* an escaped NUL inside a double-quoted scalar */
    expect_err("cluster_id: \"a\\0b\"\n", "t.yaml:1:13: cluster_id: expected text, got a NUL byte");
}

Test(config, error_text_is_sanitised_and_bounded)
{
    expect_err("\"a\\tb\\x1b[31m\": 1\n",
               "t.yaml:1:1: a?b?[31m: expected a top-level key (see docs/configuration.md), got "
               "unknown key \"a?b?[31m\"");
    char yaml[256], msg[512], xs[128];
    memset(xs, 'x', 100);
    xs[100] = '\0';
    snprintf(yaml, sizeof yaml, "cluster_id: %s\n", xs);
    xs[57] = '\0';
    snprintf(msg, sizeof msg, "t.yaml:1:1: cluster_id: expected a name of 1..64 characters from "
                              "A-Z a-z 0-9 . _ -, got \"%s...\"", xs);
    expect_err(yaml, msg);
}

Test(config, error_nul_byte_in_file)
{
    char *path = write_tmp("retries: 1\n");
    FILE *f = fopen(path, "ab");
    fwrite("x\0y\n", 1, 4, f);
    fclose(f);
    char err[512] = "", want[512];
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(path, &cfg, err, sizeof err), TERN_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:1:1: (root): expected YAML text, got a NUL byte at offset 12",
             path);
    cr_assert_str_eq(err, want);
    unlink(path);
    free(path);
}

Test(config, error_messages_fit_small_buffers)
{
    char err[16];
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml("retries: abc\n", "t.yaml", &cfg, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_str_eq(err, "t.yaml:1:1: ret");
    cr_assert_eq(tern_config_load_yaml("retries: abc\n", "t.yaml", &cfg, NULL, 0),
                 TERN_ERR_CONFIG);
    cr_assert_eq(tern_config_load_yaml(NULL, "t.yaml", &cfg, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert_eq(tern_config_load_yaml("", "t.yaml", NULL, err, sizeof err), TERN_ERR_INVAL);
}
