/* Loader tests: every load outcome with a deliberately broken plugin built
 * by tests/loader.cmake (in TERN_TP_DIR, never in the default directory),
 * the search order, required/optional handling, the host services, and the
 * memcpy example transport end to end.  Criterion runs each test in its own
 * process, so setenv() does not leak between tests. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define TERN_STR_(x) #x
#define TERN_STR(x) TERN_STR_(x)
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "desc.h"
#include "plugin.h"
#include "tern/tern.h"
#include "util.h"

/* ---- a configuration built by hand (the loader alone, no YAML) ---------- */

typedef struct tcfg {
    tern_config cfg;
    tern_transport_cfg t[8];
    tern_cfg_kv kv[8][8];
    char *pp[4];
} tcfg;

static void cfg_init(tcfg *c)
{
    memset(c, 0, sizeof *c);
    c->cfg.origin = "test.yaml";
    c->cfg.server_name = "127.0.0.1:12001";
    c->cfg.metadata = "p2p";
    c->cfg.transports = c->t;
    c->cfg.plugin_path = c->pp;
    c->cfg.topology_sysfs_root = "/sys";
    c->cfg.slice_size = 65536;
    c->cfg.log_level = TERN_LOG_DEBUG;
    c->cfg.io_timeout_ms = 5000;
}

static tern_transport_cfg *cfg_add(tcfg *c, const char *name, const char *path, int required)
{
    tern_transport_cfg *t = &c->t[c->cfg.ntransports];
    t->name = (char *)name;
    t->path = (char *)path;
    t->required = required;
    t->kv = c->kv[c->cfg.ntransports];
    t->line = 3 + (int)c->cfg.ntransports;
    t->col = 5;
    c->cfg.ntransports++;
    return t;
}

static void cfg_kv(tern_transport_cfg *t, const char *key, const char *value)
{
    tern_cfg_kv *kv = &t->kv[t->nkv++];
    kv->key = (char *)key;
    kv->value = (char *)value;
    kv->line = t->line + (int)t->nkv;
    kv->col = 7;
}

static void cfg_dir(tcfg *c, const char *dir) { c->pp[c->cfg.nplugin_path++] = (char *)dir; }

/* ---- captured log ----------------------------------------------------------- */

static char logbuf[16384];
static int nwarn;

static void test_log(void *arg, int level, const char *fmt, ...)
{
    (void)arg;
    size_t used = strlen(logbuf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(logbuf + used, sizeof logbuf - used, fmt, ap);
    va_end(ap);
    used = strlen(logbuf);
    if (used + 1 < sizeof logbuf)
        strcat(logbuf, "\n");
    nwarn += level == TERN_LOG_WARN;
}

static void setup(void)
{
    logbuf[0] = '\0';
    nwarn = 0;
    unsetenv("TERN_PLUGIN_PATH");
}

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

/* ---- the memcpy example transport ------------------------------------------------ */

typedef struct mc {
    tern_plugin_set set;
    tern_plugin *p;
    const tern_transport *t;
} mc;

/* memcpy hands slices back through the host service complete() (ABI 1.1,
 * no poll()); here they wait for mc_poll.  The loader routes complete() to
 * one function per set, so the queue is this test program's. */
static pthread_mutex_t mc_done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mc_done_cond = PTHREAD_COND_INITIALIZER;
static tern_slice *mc_done_head, *mc_done_tail;

static void mc_complete(tern_slice *s)
{
    s->plugin[0] = NULL;
    pthread_mutex_lock(&mc_done_lock);
    if (mc_done_tail)
        mc_done_tail->plugin[0] = s;
    else
        mc_done_head = s;
    mc_done_tail = s;
    pthread_cond_signal(&mc_done_cond);
    pthread_mutex_unlock(&mc_done_lock);
}

static int mc_poll(tern_slice **out, int max, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&mc_done_lock);
    while (!mc_done_head && pthread_cond_timedwait(&mc_done_cond, &mc_done_lock, &until) == 0)
        ;
    int n = 0;
    for (; n < max && mc_done_head; n++) {
        out[n] = mc_done_head;
        mc_done_head = mc_done_head->plugin[0];
        if (!mc_done_head)
            mc_done_tail = NULL;
    }
    pthread_mutex_unlock(&mc_done_lock);
    return n;
}

static void mc_load(mc *m)
{
    tcfg c;
    cfg_init(&c);
    cfg_add(&c, "memcpy", NULL, 1); /* by name, from the default directory */
    char err[2048] = "";
    cr_assert_eq(tern_plugins_load(&c.cfg, test_log, NULL, &m->set, err, sizeof err), 0, "%s",
                 err);
    tern_plugins_set_completion(&m->set, mc_complete);
    m->p = &m->set.plugins[0];
    m->t = m->p->ops;
}

/* An endpoint of a towards b (a and b may be the same instance). */
static void *mc_connect(mc *a, mc *b)
{
    tern_desc *seg = tern_desc_new();
    cr_assert_eq(b->t->segment_describe(b->p->ctx, seg), 0);
    tern_ep_params prm = {.struct_size = sizeof prm, .peer_name = "self",
                          .peer_nic_path = "self@mem0", .local_nic_path = "self@mem0",
                          .peer_segment = seg};
    void *ep = NULL;
    char err[256] = "";
    cr_assert_eq(a->t->ep_open(a->p->ctx, &prm, &ep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a->t->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    tern_desc_free(seg);
    return ep;
}

static tern_slice *mc_run(mc *m, void *ep, tern_slice *s)
{
    tern_slice *sp[1] = {s}, *done[4];
    cr_assert_eq(m->t->submit(ep, sp, 1), 1);
    cr_assert_eq(mc_poll(done, 4, 1000), 1);
    cr_assert_eq(done[0], s);
    return done[0];
}

Test(loader, memcpy_transport_moves_bytes_and_checks_ranges)
{
    mc a;
    mc_load(&a);
    char want[PATH_MAX];
    cr_assert_not_null(realpath(TERN_BUILD_DIR "/lib/tern/libtern-memcpy.so", want));
    cr_assert_str_eq(a.p->path, want);
    cr_assert_eq(a.p->ndevices, 1);
    cr_assert_str_eq(a.p->devices[0].name, "mem0");
    cr_assert_not(a.p->polls, "memcpy hands slices back through complete()");
    cr_assert_eq(a.t->poll(a.p->ctx, NULL, 0, 0), TERN_ERR_NOT_SUPPORTED, "the default poll");

    static char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (char)(i * 7);
    tern_mr_keys ks, kd;
    void *ms, *md;
    char err[256];
    cr_assert_eq(a.t->mr_register(a.p->ctx, src, sizeof src, &ks, &ms, err, sizeof err), 0);
    cr_assert_eq(a.t->mr_register(a.p->ctx, dst, sizeof dst, &kd, &md, err, sizeof err), 0);
    cr_assert_eq(ks.ndev, 1);
    cr_assert_neq(ks.rkey[0], kd.rkey[0]);
    void *ep = mc_connect(&a, &a);

    tern_slice s = {.struct_size = sizeof s, .opcode = TERN_WRITE, .local = src + 100,
                    .remote = (uint64_t)(uintptr_t)(dst + 200), .length = 1000,
                    .lkey = ks.lkey[0], .rkey = kd.rkey[0]};
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, 0, "%s", s.errmsg);
    cr_assert_eq(s.transferred, 1000);
    cr_assert_eq(memcmp(dst + 200, src + 100, 1000), 0);

    memset(dst, 0, sizeof dst);
    s = (tern_slice){.struct_size = sizeof s, .opcode = TERN_READ, .local = dst,
                     .remote = (uint64_t)(uintptr_t)src, .length = sizeof src,
                     .lkey = kd.lkey[0], .rkey = ks.rkey[0]};
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, 0, "%s", s.errmsg);
    cr_assert_eq(memcmp(dst, src, sizeof src), 0);

    /* one byte past the registration, and a wrong key: refused, nothing copied */
    s.remote = (uint64_t)(uintptr_t)(src + 1);
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_RANGE);
    cr_assert(strstr(s.errmsg, "not registered with rkey"), "%s", s.errmsg);
    s.remote = (uint64_t)(uintptr_t)src;
    s.rkey = kd.rkey[0];
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_RANGE);
    s.rkey = ks.rkey[0];
    s.lkey = ks.lkey[0];
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_RANGE);
    cr_assert(strstr(s.errmsg, "local"), "%s", s.errmsg);

    tern_slice *done[1];
    cr_assert_eq(mc_poll(done, 1, 10), 0, "every slice came back exactly once");
    cr_assert_eq(a.t->mr_deregister(a.p->ctx, ms), 0);
    cr_assert_eq(a.t->mr_deregister(a.p->ctx, ms), TERN_ERR_NOT_FOUND);
    a.t->ep_close(ep);
    tern_plugins_unload(&a.set);
}

Test(loader, memcpy_between_two_instances_and_a_peer_that_left)
{
    mc a, b;
    mc_load(&a);
    mc_load(&b);
    static char src[256] = "from a to b", dst[256];
    tern_mr_keys ka, kb;
    void *ma, *mb;
    char err[256];
    cr_assert_eq(a.t->mr_register(a.p->ctx, src, sizeof src, &ka, &ma, err, sizeof err), 0);
    cr_assert_eq(b.t->mr_register(b.p->ctx, dst, sizeof dst, &kb, &mb, err, sizeof err), 0);
    void *ep = mc_connect(&a, &b);
    tern_slice s = {.struct_size = sizeof s, .opcode = TERN_WRITE, .local = src,
                    .remote = (uint64_t)(uintptr_t)dst, .length = sizeof src,
                    .lkey = ka.lkey[0], .rkey = kb.rkey[0]};
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, 0, "%s", s.errmsg);
    cr_assert_str_eq(dst, "from a to b");

    tern_plugins_unload(&b.set); /* the peer goes away */
    mc_run(&a, ep, &s);
    cr_assert_eq(s.status, TERN_ERR_CLOSED, "%s", s.errmsg);
    cr_assert(strstr(s.errmsg, "is gone"), "%s", s.errmsg);
    a.t->ep_close(ep);
    tern_plugins_unload(&a.set);
}

Test(loader, memcpy_refuses_another_process)
{
    mc a;
    mc_load(&a);
    tern_desc *seg = tern_desc_new();
    tern_desc_set_u64(seg, "pid", (uint64_t)getpid() + 1);
    tern_desc_set_u64(seg, "instance", 1);
    tern_ep_params prm = {.struct_size = sizeof prm, .peer_name = "10.0.0.1:12001",
                          .peer_segment = seg};
    void *ep = NULL;
    char err[256] = "";
    cr_assert_eq(a.t->ep_open(a.p->ctx, &prm, &ep, err, sizeof err), TERN_ERR_CONNECT);
    cr_assert(strstr(err, "only reaches the same process"), "%s", err);
    tern_desc *empty = tern_desc_new();
    prm.peer_segment = empty;
    cr_assert_eq(a.t->ep_open(a.p->ctx, &prm, &ep, err, sizeof err), TERN_ERR_PROTOCOL);
    tern_desc_free(seg);
    tern_desc_free(empty);
    tern_plugins_unload(&a.set);
}

/* Several submitters at once, completions collected by one thread: every
 * slice comes back exactly once, with the right bytes (the threading contract of transport.h). */
#define MC_THREADS 4
#define MC_SLICES 2000
#define MC_LEN 64

typedef struct mc_worker {
    mc *m;
    void *ep;
    char *src, *dst;
    uint64_t lkey, rkey;
    tern_slice *slices;
} mc_worker;

static void *mc_submitter(void *arg)
{
    mc_worker *w = arg;
    for (int i = 0; i < MC_SLICES;) {
        tern_slice *s = &w->slices[i];
        tern_slice *sp[1] = {s};
        int rc = w->m->t->submit(w->ep, sp, 1);
        if (rc < 0)
            return (void *)1;
        i += rc; /* 0: nothing taken, try again */
    }
    return NULL;
}

Test(loader, memcpy_concurrent_submitters_and_poller)
{
    mc a;
    mc_load(&a);
    static char src[MC_THREADS][MC_SLICES * MC_LEN], dst[MC_THREADS][MC_SLICES * MC_LEN];
    static tern_slice slices[MC_THREADS][MC_SLICES];
    mc_worker w[MC_THREADS];
    pthread_t th[MC_THREADS];
    char err[256];
    for (int t = 0; t < MC_THREADS; t++) {
        tern_mr_keys ks, kd;
        void *ms, *md;
        for (size_t i = 0; i < sizeof src[t]; i++)
            src[t][i] = (char)(i * 13 + t);
        cr_assert_eq(a.t->mr_register(a.p->ctx, src[t], sizeof src[t], &ks, &ms, err, 256), 0);
        cr_assert_eq(a.t->mr_register(a.p->ctx, dst[t], sizeof dst[t], &kd, &md, err, 256), 0);
        w[t] = (mc_worker){.m = &a, .ep = mc_connect(&a, &a), .src = src[t], .dst = dst[t],
                           .lkey = ks.lkey[0], .rkey = kd.rkey[0], .slices = slices[t]};
        for (int i = 0; i < MC_SLICES; i++)
            slices[t][i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                                        .local = src[t] + i * MC_LEN,
                                        .remote = (uint64_t)(uintptr_t)(dst[t] + i * MC_LEN),
                                        .length = MC_LEN, .lkey = w[t].lkey, .rkey = w[t].rkey,
                                        .status = 1};
    }
    for (int t = 0; t < MC_THREADS; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, mc_submitter, &w[t]), 0);
    static char seen[MC_THREADS][MC_SLICES];
    int got = 0;
    while (got < MC_THREADS * MC_SLICES) {
        tern_slice *done[64];
        int n = mc_poll(done, 64, 2000);
        cr_assert_gt(n, 0, "poll timed out after %d of %d slices", got, MC_THREADS * MC_SLICES);
        for (int k = 0; k < n; k++) {
            ptrdiff_t t = -1, i = -1;
            for (int u = 0; u < MC_THREADS; u++)
                if (done[k] >= slices[u] && done[k] < slices[u] + MC_SLICES)
                    t = u, i = done[k] - slices[u];
            cr_assert_geq(t, 0, "poll returned a slice nobody submitted");
            cr_assert_eq(seen[t][i]++, 0, "slice %td/%td returned twice", t, i);
            cr_assert_eq(done[k]->status, 0, "%s", done[k]->errmsg);
        }
        got += n;
    }
    for (int t = 0; t < MC_THREADS; t++) {
        void *rv;
        pthread_join(th[t], &rv);
        cr_assert_null(rv);
        cr_assert_eq(memcmp(src[t], dst[t], sizeof src[t]), 0);
        a.t->ep_close(w[t].ep);
    }
    tern_plugins_unload(&a.set);
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
