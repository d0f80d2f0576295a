/* Loader tests: every load outcome with a deliberately broken plugin built
 * by tests/support/CMakeLists.txt (in TERN_TP_DIR, never in the default
 * directory), the search order, required/optional handling and the host
 * services.  The same suite continues in test_loader_memcpy.c (the memcpy
 * example transport end to end); both build the test program test_loader.
 * Criterion runs each test in its own process, so setenv() does not leak
 * between tests. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define TERN_STR_(x) #x
#define TERN_STR(x) TERN_STR_(x)
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "config/load.h"
#include "desc/desc.h"
#include "loader_harness.h"
#include "plugin/plugin.h"
#include "tern/tern.h"
#include "base/util.h"

TestSuite(loader, .init = setup);

/* Load one transport by name from TERN_TP_DIR; returns tern_plugins_load's rc. */
static int load_one(const char *name, tern_plugin_set *set, char *err, size_t errlen)
{
    tcfg c;
    cfg_init(&c);
    cfg_dir(&c, TERN_TP_DIR);
    cfg_add(&c, name, NULL, 0);
    return tern_plugins_load(&c.cfg, test_log, NULL, set, err, errlen);
}

/* An optional broken plugin: the set records the outcome, the load fails
 * because nothing else loaded, and the message says what is wrong. */
static void expect_outcome(const char *name, tern_load_outcome o, const char *text)
{
    tern_plugin_set set;
    char err[4096] = "";
    int rc = load_one(name, &set, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_PLUGIN, "%s: rc %d", name, rc);
    cr_assert_eq(set.n, 1);
    tern_plugin *p = &set.plugins[0];
    cr_assert_eq(p->outcome, o, "%s: outcome '%s', expected '%s': %s", name,
                 tern_load_outcome_name(p->outcome), tern_load_outcome_name(o), p->message);
    cr_assert(strstr(p->message, text), "%s: message lacks '%s': %s", name, text, p->message);
    cr_assert(strstr(err, text), "error lacks '%s': %s", text, err);
    cr_assert(strstr(err, "no transport could be loaded"), "%s", err);
    cr_assert_null(p->ops);
    cr_assert_null(p->dl);
    cr_assert_eq(nwarn, 1, "an optional failure is logged once: %s", logbuf);
    tern_plugins_unload(&set);
}

/* ---- each outcome ------------------------------------------------------------- */

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* The fake sysfs tree a test made, depth first. */
static void remove_tree(const char *root)
{
    if (nftw(root, remove_one, 8, FTW_DEPTH | FTW_PHYS) != 0)
        cr_log_warn("could not remove %s", root);
}

Test(loader, loads_good_plugin_with_devices_and_host_services)
{
    char root[] = "/tmp/tern-sysfs-XXXXXX", path[PATH_MAX], out[256], err[1024] = "";
    cr_assert_not_null(mkdtemp(root));
    snprintf(path, sizeof path, "%s/class", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/class/net", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/class/net/tp0", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/class/net/tp0/device", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/class/net/tp0/device/numa_node", root);
    FILE *f = fopen(path, "w");
    fputs("1\n", f);
    fclose(f);

    tcfg c;
    cfg_init(&c);
    c.cfg.topology_sysfs_root = root;
    c.cfg.server_name = "127.0.0.1:4711";
    c.cfg.io_timeout_ms = 1234;
    cfg_dir(&c, TERN_TP_DIR);
    tern_transport_cfg *t = cfg_add(&c, "good", NULL, 1);
    cfg_kv(t, "greeting", "hi");
    cfg_kv(t, "size", "1M");
    tern_cfg_kv *names = &t->kv[t->nkv++];
    char *items[] = {"a", "b"};
    *names = (tern_cfg_kv){.key = "names", .items = items, .nitems = 2, .line = 9, .col = 7};

    tern_plugin_set set;
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err), 0, "%s", err);
    tern_plugin *p = &set.plugins[0];
    cr_assert_eq(p->outcome, TERN_LOAD_OK, "%s", p->message);
    cr_assert_str_eq(p->path, TERN_TP_DIR "/libtern-good.so");
    cr_assert(strstr(p->message, "loaded " TERN_TP_DIR "/libtern-good.so"), "%s", p->message);
    cr_assert_eq(p->ndevices, 2);
    cr_assert_str_eq(p->devices[0].name, "tp0");
    cr_assert_eq(p->devices[0].numa_node, 1, "numa_node -2 is read from the fake sysfs");
    cr_assert_eq(p->devices[1].numa_node, 0);
    cr_assert_str_eq(p->devices[1].gid, "fe80::7");
    cr_assert_eq(p->slice_size, 65536);
    cr_assert(strstr(logbuf, "good: hello from testplug good"), "log: %s", logbuf);
    cr_assert(p->polls, "the plugin has poll(): the core runs a poll thread for it");
    /* the plugin left ep_reset NULL: the core's default stands in for it */
    cr_assert_not_null(p->ops->ep_reset);
    cr_assert_eq(p->ops->ep_reset(NULL), TERN_ERR_NOT_SUPPORTED);
    cr_assert_eq(tern_plugins_find(&set, "good"), p);
    cr_assert_null(tern_plugins_find(&set, "other"));

    struct { const char *q, *want; } qs[] = {
        {"get:greeting", "hi"},        {"get:mode", "fast"},    /* default */
        {"get:names", "a"},            {"list:names:1", "b"},   {"list:names:2", "(null)"},
        {"list:greeting:0", "hi"},     {"int:count", "7"},      {"int:size", "1048576"},
        {"int:greeting", "-999"},      {"get:nosuch", "(null)"}, {"server", "127.0.0.1:4711"},
        {"timeout", "1234"},           {"sysfs", root},
    };
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        cr_assert_eq(p->ops->query(p->ctx, qs[i].q, out, sizeof out), 0);
        cr_assert_str_eq(out, qs[i].want, "query %s", qs[i].q);
    }
    tern_plugins_set_server_name(&set, "127.0.0.1:5000");
    p->ops->query(p->ctx, "server", out, sizeof out);
    cr_assert_str_eq(out, "127.0.0.1:5000");
    tern_plugins_unload(&set);
    remove_tree(root);
    cr_assert_null(set.plugins);
}

Test(loader, v1_0_struct_loads_and_later_ops_count_as_absent)
{
    tern_plugin_set set;
    char err[1024] = "";
    cr_assert_eq(load_one("v10", &set, err, sizeof err), 0, "%s", err);
    /* The struct in memory has query set, but struct_size does not cover
     * it: the core's copy holds the default, which answers "not supported"
     * where the plugin's own query would answer 0. */
    tern_plugin *p = &set.plugins[0];
    char out[64] = "x";
    cr_assert_eq(p->ops->query(p->ctx, "get:greeting", out, sizeof out), TERN_ERR_NOT_SUPPORTED);
    cr_assert_str_empty(out);
    cr_assert_eq(p->ops->ep_reset(NULL), TERN_ERR_NOT_SUPPORTED);
    cr_assert(p->polls, "a 1.0 plugin hands slices back through poll()");
    tern_plugins_unload(&set);
}

Test(loader, wrong_magic)
{
    expect_outcome("badmagic", TERN_LOAD_BAD_MAGIC,
                   "wrong magic 0x0123456789abcdef (expected 0x5452504e5245545f)");
}

Test(loader, older_abi_major)
{
    expect_outcome("oldmajor", TERN_LOAD_ABI_MISMATCH,
                   "built for transport ABI major 0 (0." TERN_STR(TERN_TRANSPORT_ABI_MINOR) "), this tern supports major 1");
}

/* A plugin built for a later major is refused as surely as an older one: a
 * newer major may reorder or retype what this tern reads. */
Test(loader, newer_abi_major)
{
    char want[160];
    snprintf(want, sizeof want,
             "built for transport ABI major %d (%d.%d), this tern supports major %d",
             TERN_TRANSPORT_ABI_MAJOR + 1, TERN_TRANSPORT_ABI_MAJOR + 1,
             TERN_TRANSPORT_ABI_MINOR, TERN_TRANSPORT_ABI_MAJOR);
    expect_outcome("newmajor", TERN_LOAD_ABI_MISMATCH, want);
}

Test(loader, truncated_struct)
{
    char want[128];
    snprintf(want, sizeof want, "struct_size %zu is smaller than the v1.0 layout (%zu bytes)",
             offsetof(tern_transport, poll), (size_t)TERN_TRANSPORT_V1_0_SIZE);
    expect_outcome("truncated", TERN_LOAD_TOO_SMALL, want);
}

Test(loader, struct_size_larger_than_the_symbol)
{
    char want[128];
    snprintf(want, sizeof want, "struct_size says %zu bytes but the symbol is only %zu bytes",
             sizeof(tern_transport) + 64, sizeof(tern_transport));
    expect_outcome("liar", TERN_LOAD_TOO_SMALL, want);
}

Test(loader, null_mandatory_operation)
{
    expect_outcome("nullop", TERN_LOAD_MISSING_OP, "mandatory operation 'submit' is NULL");
}

Test(loader, init_failure_carries_the_plugins_message)
{
    expect_outcome("initfail", TERN_LOAD_INIT_FAILED,
                   "init failed (TERN_ERR_DEVICE): testplug: cannot open "
                   "/dev/tern-test-missing: check the device");
    /* init's own log line also reached the engine's log, with the plugin name */
}

Test(loader, init_not_found_means_no_device)
{
    expect_outcome("nodevice", TERN_LOAD_NO_DEVICE,
                   "no usable device (TERN_ERR_NOT_FOUND): testplug: no test NIC present");
}

Test(loader, zero_devices_means_no_device_and_fini_runs)
{
    char marker[] = "/tmp/tern-fini-XXXXXX";
    int fd = mkstemp(marker);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("TP_FINI_MARKER", marker, 1);
    expect_outcome("zerodev", TERN_LOAD_NO_DEVICE, "libtern-zerodev.so: no usable device");
    char *data = NULL;
    size_t len = 0;
    cr_assert_eq(tern_read_file(marker, &data, &len, NULL, 0), 0);
    cr_assert_str_eq(data, "fini zerodev\n", "init succeeded, so fini must run once");
    free(data);
    unlink(marker);
}

/* Two devices reported without TERN_CAP_MULTI_DEVICE: the core uses the
 * first only ("good", the same plugin with the bit, keeps both). */
Test(loader, several_devices_without_the_multi_device_bit_use_the_first)
{
    tern_plugin_set set;
    char err[4096] = "";
    cr_assert_eq(load_one("nomulti", &set, err, sizeof err), 0, "%s", err);
    tern_plugin *p = &set.plugins[0];
    cr_assert_eq(p->outcome, TERN_LOAD_OK, "%s", p->message);
    cr_assert_eq(p->ndevices, 1);
    cr_assert_str_eq(p->devices[0].name, "tp0");
    tern_plugins_unload(&set);
}

Test(loader, unresolvable_dependency_gives_dlerror_text)
{
    expect_outcome("nodep", TERN_LOAD_DLOPEN,
                   "dlopen failed: libterntestdep.so: cannot open shared object file");
}

Test(loader, missing_symbol)
{
    expect_outcome("nosym", TERN_LOAD_NO_SYMBOL,
                   "libtern-nosym.so does not export the symbol tern_transport_v1");
}

Test(loader, name_mismatch)
{
    expect_outcome("wrongname", TERN_LOAD_NAME_MISMATCH,
                   "the plugin calls itself 'other', not 'wrongname'");
}

Test(loader, not_an_elf_file)
{
    char dir[] = "/tmp/tern-garbage-XXXXXX", path[PATH_MAX];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/libtern-garbage.so", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 64; i++)
        fputs("this is not an ELF object\n", f);
    fclose(f);
    tcfg c;
    cfg_init(&c);
    cfg_add(&c, "garbage", path, 0);
    tern_plugin_set set;
    char err[2048];
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_DLOPEN);
    cr_assert(strstr(set.plugins[0].message, "invalid ELF header"), "%s", set.plugins[0].message);
    tern_plugins_unload(&set);
    unlink(path);
    rmdir(dir);
}

Test(loader, not_found_lists_every_path_in_search_order)
{
    setenv("TERN_PLUGIN_PATH", "/nonexistent/env1::/nonexistent/env2", 1);
    tcfg c;
    cfg_init(&c);
    /* the configuration loader folds TERN_PLUGIN_PATH into plugin_path: no double listing */
    cfg_dir(&c, "/nonexistent/env1");
    cfg_dir(&c, "/nonexistent/cfg");
    cfg_add(&c, "nosuch", NULL, 0);
    tern_plugin_set set;
    char err[4096];
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    const char *m = set.plugins[0].message;
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_NOT_FOUND);
    char want[2 * PATH_MAX];
    snprintf(want, sizeof want,
             "libtern-nosuch.so not found; tried: /nonexistent/env1/libtern-nosuch.so, "
             "/nonexistent/env2/libtern-nosuch.so, /nonexistent/cfg/libtern-nosuch.so, "
             "%s/libtern-nosuch.so", tern_plugin_default_dir());
    cr_assert(strstr(m, want), "message: %s\nwanted: %s", m, want);
    tern_plugins_unload(&set);
}

Test(loader, explicit_path_is_the_only_candidate)
{
    setenv("TERN_PLUGIN_PATH", TERN_TP_DIR, 1); /* holds a good libtern-good.so */
    tcfg c;
    cfg_init(&c);
    cfg_add(&c, "good", "/nonexistent/libtern-good.so", 0);
    tern_plugin_set set;
    char err[4096];
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_NOT_FOUND);
    cr_assert(strstr(set.plugins[0].message,
                     "plugin not found at its configured path; tried: "
                     "/nonexistent/libtern-good.so (check `path` in test.yaml)"),
              "%s", set.plugins[0].message);
    tern_plugins_unload(&set);
}

Test(loader, explicit_path_may_name_a_directory_or_be_relative_to_the_config)
{
    tcfg c;
    cfg_init(&c);
    cfg_add(&c, "good", TERN_TP_DIR, 1);
    c.cfg.origin = TERN_TP_DIR "/../some.yaml";
    cfg_add(&c, "nullop", "plugins/libtern-nullop.so", 0);
    tern_plugin_set set;
    char err[4096] = "";
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err), 0, "%s", err);
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_OK, "%s", set.plugins[0].message);
    cr_assert_str_eq(set.plugins[0].path, TERN_TP_DIR "/libtern-good.so");
    /* found next to the config file, then refused for its own defect */
    cr_assert_eq(set.plugins[1].outcome, TERN_LOAD_MISSING_OP, "%s", set.plugins[1].message);
    cr_assert_str_eq(set.plugins[1].path, TERN_TP_DIR "/../plugins/libtern-nullop.so");
    tern_plugins_unload(&set);
}

Test(loader, required_failure_stops_loading_with_the_reason)
{
    tcfg c;
    cfg_init(&c);
    cfg_dir(&c, TERN_TP_DIR);
    cfg_add(&c, "good", NULL, 0);
    cfg_add(&c, "badmagic", NULL, 1);
    cfg_add(&c, "v10", NULL, 0);
    tern_plugin_set set;
    char err[4096];
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    cr_assert(strstr(err, "required transport 'badmagic': "), "%s", err);
    cr_assert(strstr(err, "wrong magic"), "%s", err);
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_OK);
    cr_assert_eq(set.plugins[1].outcome, TERN_LOAD_BAD_MAGIC);
    cr_assert_eq(set.plugins[2].outcome, TERN_LOAD_NOT_TRIED);
    cr_assert(strstr(set.plugins[2].message, "not tried: required transport 'badmagic' failed"),
              "%s", set.plugins[2].message);
    tern_plugins_unload(&set);
}

Test(loader, optional_failure_is_skipped_and_the_next_loads)
{
    tcfg c;
    cfg_init(&c);
    cfg_dir(&c, TERN_TP_DIR);
    cfg_add(&c, "initfail", NULL, 0);
    cfg_add(&c, "nosuch", NULL, 0)->optional = 1; /* a missing plugin needs `optional` */
    cfg_add(&c, "good", NULL, 0);
    tern_plugin_set set;
    char err[4096] = "";
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err), 0, "%s", err);
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_INIT_FAILED);
    cr_assert_eq(set.plugins[1].outcome, TERN_LOAD_NOT_FOUND);
    cr_assert_eq(set.plugins[2].outcome, TERN_LOAD_OK);
    cr_assert_eq(nwarn, 2, "one warning per skipped transport: %s", logbuf);
    cr_assert(strstr(logbuf, "init failed (TERN_ERR_DEVICE): testplug: cannot open"), "%s",
              logbuf);
    cr_assert(strstr(logbuf, "initfail: init is failing on purpose"), "%s", logbuf);
    cr_assert(strstr(logbuf, "skipped (optional)"), "%s", logbuf);
    tern_plugins_unload(&set);
}

/* A misspelled transport never silently runs on the next one: a plugin
 * that does not exist is an error unless the entry says optional, and the
 * message suggests the installed plugin with the closest name. */
Test(loader, missing_plugin_is_an_error_with_did_you_mean)
{
    tcfg c;
    cfg_init(&c);
    cfg_dir(&c, TERN_TP_DIR);
    cfg_add(&c, "goood", NULL, 0);
    cfg_add(&c, "good", NULL, 0);
    tern_plugin_set set;
    char err[4096] = "";
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    cr_assert(strstr(err, "libtern-goood.so not found (did you mean 'good'? "), "%s", err);
    cr_assert(strstr(err, "optional: true"), "%s", err);
    cr_assert_eq(set.plugins[1].outcome, TERN_LOAD_NOT_TRIED);
    cr_assert(strstr(set.plugins[1].message, "the earlier transport 'goood' failed"), "%s",
              set.plugins[1].message);
    tern_plugins_unload(&set);
    /* nothing close: no suggestion */
    cfg_init(&c);
    cfg_dir(&c, TERN_TP_DIR);
    cfg_add(&c, "zzzzzzzz", NULL, 0);
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    cr_assert_null(strstr(err, "did you mean"), "%s", err);
    tern_plugins_unload(&set);
}

Test(loader, empty_transport_list_fails_clearly)
{
    tcfg c;
    cfg_init(&c);
    tern_plugin_set set;
    char err[1024];
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err),
                 TERN_ERR_PLUGIN);
    cr_assert(strstr(err, "no transport could be loaded"), "%s", err);
    tern_plugins_unload(&set);
}

/* Which of two same-named plugins wins. */
static void expect_order(const char *env, const char *dir1, const char *dir2, const char *version)
{
    if (env)
        setenv("TERN_PLUGIN_PATH", env, 1);
    else
        unsetenv("TERN_PLUGIN_PATH");
    tcfg c;
    cfg_init(&c);
    if (dir1)
        cfg_dir(&c, dir1);
    if (dir2)
        cfg_dir(&c, dir2);
    cfg_add(&c, "order", NULL, 1);
    tern_plugin_set set;
    char err[4096] = "";
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &set, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(set.plugins[0].ops->version, version, "env %s, dirs %s %s: %s",
                     env ? env : "-", dir1 ? dir1 : "-", dir2 ? dir2 : "-", set.plugins[0].path);
    tern_plugins_unload(&set);
}

Test(loader, tern_plugin_path_order)
{
    const char *a = TERN_TP_DIR "/order_a", *b = TERN_TP_DIR "/order_b";
    expect_order(TERN_TP_DIR "/order_b:" TERN_TP_DIR "/order_a", NULL, NULL, "B");
    expect_order(TERN_TP_DIR "/order_a:" TERN_TP_DIR "/order_b", NULL, NULL, "A");
    expect_order(TERN_TP_DIR "/order_b", a, NULL, "B"); /* env before plugin_path */
    expect_order("/nonexistent:" TERN_TP_DIR "/order_a", b, NULL, "A");
    expect_order(NULL, b, a, "B");
    expect_order(NULL, a, b, "A");
}

Test(loader, default_dir_is_next_to_the_core)
{
    char want[PATH_MAX];
    cr_assert_not_null(realpath(TERN_BUILD_DIR "/lib/tern", want));
    cr_assert_str_eq(tern_plugin_default_dir(), want);
}

/* ---- YAML end to end (core/config/) --------------------------------------------- */

static int load_yaml(const char *yaml, tern_config **cfg, tern_plugin_set *set, char *err,
                     size_t errlen)
{
    int rc = tern_config_load_yaml(yaml, "loader.yaml", cfg, err, errlen);
    cr_assert_eq(rc, 0, "config: %s", err);
    return tern_plugins_load(*cfg, test_log, NULL, set, err, errlen);
}

Test(loader, bad_option_is_refused_before_init)
{
    tern_config *cfg;
    tern_plugin_set set;
    char err[2048];
    int rc = load_yaml("plugin_path: [" TERN_TP_DIR "]\n"
                       "transports:\n"
                       "  - name: good\n"
                       "    required: true\n"
                       "    count: 1000\n",
                       &cfg, &set, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONFIG);
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_BAD_OPTION);
    cr_assert(strstr(err, "transport 'good': bad option: loader.yaml:5:5: transports[0].count"),
              "%s", err);
    cr_assert_not(strstr(logbuf, "hello from testplug"), "init must not run: %s", logbuf);
    tern_plugins_unload(&set);
    tern_config_free(cfg);

    rc = load_yaml("plugin_path: [" TERN_TP_DIR "]\n"
                   "transports:\n"
                   "  - name: good\n"
                   "    bogus: 1\n",
                   &cfg, &set, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONFIG, "an optional transport's bad key is an error too");
    cr_assert_eq(set.plugins[0].outcome, TERN_LOAD_BAD_OPTION);
    cr_assert(strstr(set.plugins[0].message, "loader.yaml:4:5: transports[0].bogus"), "%s",
              set.plugins[0].message);
    tern_plugins_unload(&set);
    tern_config_free(cfg);
}

Test(loader, host_services_outlive_the_config)
{
    tern_config *cfg;
    tern_plugin_set set;
    char err[2048], out[128];
    cr_assert_eq(load_yaml("plugin_path: [" TERN_TP_DIR "]\n"
                           "transports:\n"
                           "  - name: good\n"
                           "    greeting: bonjour\n"
                           "    names: [x, y, z]\n",
                           &cfg, &set, err, sizeof err), 0, "%s", err);
    tern_config_free(cfg); /* the plugin keeps reading its keys */
    tern_plugin *p = &set.plugins[0];
    p->ops->query(p->ctx, "get:greeting", out, sizeof out);
    cr_assert_str_eq(out, "bonjour");
    p->ops->query(p->ctx, "list:names:2", out, sizeof out);
    cr_assert_str_eq(out, "z");
    tern_plugins_unload(&set);
}

/* A plugin refused before init is unmapped again; one whose code ran stays
 * mapped (its libraries keep global state; see pin_image in plugin.c). */
Test(loader, images_refused_before_init_are_unloaded_others_stay)
{
    tern_plugin_set set;
    char err[1024];
    cr_assert_eq(load_one("badmagic", &set, err, sizeof err), TERN_ERR_PLUGIN);
    tern_plugins_unload(&set);
    cr_assert_null(dlopen(TERN_TP_DIR "/libtern-badmagic.so", RTLD_NOW | RTLD_NOLOAD));
    cr_assert_eq(load_one("good", &set, err, sizeof err), 0, "%s", err);
    tern_plugins_unload(&set);
    void *h = dlopen(TERN_TP_DIR "/libtern-good.so", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h);
    dlclose(h);
}
