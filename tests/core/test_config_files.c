/* tests/core/test_config_files.c: every file a configuration names (the file
 * itself, auth_secret_file, topology, a transport's path) is opened without
 * blocking, must be a regular file and is read with a size cap.  A FIFO with
 * no writer, /dev/zero, a directory, a missing file and secrets of 5 and
 * 5000 bytes each end in one line and an error (see docs/configuration.md,
 * "Files the configuration names").  A blocking open() would hang: each test
 * has a timeout, so a regression fails instead of stalling the suite. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/auth.h"
#include "config/config.h"
#include "config/load.h"
#include "base/fileio.h"
#include "tern/tern.h"
#include "host/topology.h"
#include "host/topology_load.h"

static char dir[64], fifo[96], sub[96], missing[96], s5[96], s5000[96], good[96], badjson[96];

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void make_inputs(void)
{
    unsetenv("TERN_CONFIG");
    unsetenv("TERN_LOG_LEVEL");
    unsetenv("TERN_PLUGIN_PATH");
    strcpy(dir, "/tmp/tern-files-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(sub, sizeof sub, "%s/dir", dir);
    snprintf(missing, sizeof missing, "%s/missing", dir);
    snprintf(s5, sizeof s5, "%s/secret5", dir);
    snprintf(s5000, sizeof s5000, "%s/secret5000", dir);
    snprintf(good, sizeof good, "%s/secret", dir);
    snprintf(badjson, sizeof badjson, "%s/bad.json", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(mkdir(sub, 0700), 0);
    write_file(s5, "12345", 5);
    char *big = malloc(5000);
    memset(big, 'k', 5000);
    write_file(s5000, big, 5000);
    free(big);
    write_file(good, "0123456789abcdef0123456789abcdef\n", 33);
    write_file(badjson, "{\"cpu:0\": [", 11);
}

static void remove_inputs(void)
{
    const char *files[] = {fifo, s5, s5000, good, badjson};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        unlink(files[i]);
    rmdir(sub);
    rmdir(dir);
}

TestSuite(files, .init = make_inputs, .fini = remove_inputs, .timeout = 10);

static void assert_one_line(const char *msg)
{
    cr_assert(msg[0] != '\0', "no message");
    cr_assert_null(strchr(msg, '\n'), "more than one line: %s", msg);
}

/* ---- the configuration file ------------------------------------------------ */
static void expect_config_err(const char *path, const char *want)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_file(path, &cfg, err, sizeof err), TERN_ERR_CONFIG, "%s", path);
    cr_assert_null(cfg);
    cr_assert_str_eq(err, want);
    assert_one_line(err);
}

Test(files, config_file_fifo_devzero_dir_missing)
{
    char want[256];
    snprintf(want, sizeof want, "%s: cannot read: a FIFO, not a regular file", fifo);
    expect_config_err(fifo, want);
    expect_config_err("/dev/zero", "/dev/zero: cannot read: a character device, not a regular file");
    snprintf(want, sizeof want, "%s: cannot read: Is a directory", sub);
    expect_config_err(sub, want);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
    expect_config_err(missing, want);
    /* named by $TERN_CONFIG: the message says so */
    setenv("TERN_CONFIG", fifo, 1);
    snprintf(want, sizeof want, "TERN_CONFIG=%s: cannot read: a FIFO, not a regular file", fifo);
    expect_config_err(NULL, want);
}

Test(files, config_file_over_the_cap)
{
    char path[128], want[256];
    snprintf(path, sizeof path, "%s/big.yaml", dir);
    size_t n = (1u << 20) + 1;
    char *big = malloc(n);
    memset(big, '#', n);
    write_file(path, big, n);
    free(big);
    snprintf(want, sizeof want, "%s:1:1: (root): expected at most 1 MiB of YAML, got more", path);
    expect_config_err(path, want);
    unlink(path);
}

/* ---- auth_secret_file ------------------------------------------------------- */
static void expect_secret_err(const char *path, const char *part)
{
    char err[512] = "";
    tern_auth *a = NULL;
    cr_assert_lt(tern_auth_load(path, &a, err, sizeof err), 0, "%s accepted", path);
    cr_assert_null(a);
    cr_assert_not_null(strstr(err, part), "%s: %s", path, err);
    cr_assert_not_null(strstr(err, path), "the message names the file: %s", err);
    assert_one_line(err);
}

Test(files, secret_fifo_devzero_dir_missing_short_long)
{
    expect_secret_err(fifo, "a FIFO, not a regular file");
    expect_secret_err("/dev/zero", "a character device, not a regular file");
    expect_secret_err(sub, "Is a directory");
    expect_secret_err(missing, "No such file or directory");
    expect_secret_err(s5, "the shared secret is 5 bytes; it must be 16..4096 bytes");
    expect_secret_err(s5000, "the shared secret is 5000 bytes; it must be 16..4096 bytes");
    tern_auth *a = NULL;
    char err[512] = "";
    cr_assert_eq(tern_auth_load(good, &a, err, sizeof err), 0, "%s", err);
    tern_auth_free(a);
}

/* ---- topology ----------------------------------------------------------------- */
static tern_config *config_with(const char *yaml)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    cr_assert_eq(tern_config_load_yaml(yaml, "t.yaml", &cfg, err, sizeof err), 0, "%s", err);
    return cfg;
}

static const tern_device_info devs[3] = {{.name = "a"}, {.name = "b"}, {.name = "c"}};

static void expect_topology_err(const char *path, const char *part)
{
    char yaml[256], err[512] = "";
    snprintf(yaml, sizeof yaml, "topology: \"%s\"\n", path);
    tern_config *cfg = config_with(yaml);
    tern_topology *t = NULL;
    cr_assert_lt(tern_topology_load(cfg, devs, 3, &t, err, sizeof err), 0, "%s accepted", path);
    cr_assert_null(t);
    cr_assert_not_null(strstr(err, part), "%s: %s", path, err);
    cr_assert_not_null(strstr(err, path), "the message names the file: %s", err);
    assert_one_line(err);
    tern_config_free(cfg);
}

Test(files, topology_fifo_devzero_dir_missing_invalid)
{
    expect_topology_err(fifo, "a FIFO, not a regular file");
    expect_topology_err("/dev/zero", "a character device, not a regular file");
    expect_topology_err(sub, "Is a directory");
    expect_topology_err(missing, "No such file or directory");
    expect_topology_err(badjson, "topology");
}

/* `devices:` applies to a topology read from a file as to `auto`. */
Test(files, devices_allow_list_applies_to_a_topology_file)
{
    char path[128], yaml[256], err[512] = "";
    snprintf(path, sizeof path, "%s/topo.json", dir);
    const char *json = "{\"cpu:0\": [[\"a\", \"b\"], [\"c\"]], \"*\": [[\"a\", \"b\", \"c\"], []]}";
    write_file(path, json, strlen(json));
    snprintf(yaml, sizeof yaml, "topology: \"%s\"\ndevices: [b]\n", path);
    tern_config *cfg = config_with(yaml);
    tern_topology *t = NULL;
    cr_assert_eq(tern_topology_load(cfg, devs, 3, &t, err, sizeof err), 0, "%s", err);
    for (int retry = 0; retry < 6; retry++) {
        int d = tern_topology_select(t, retry % 2 ? "cpu:0" : "*", retry, NULL);
        cr_assert_geq(d, 0);
        cr_assert_str_eq(tern_topology_device_name(t, d), "b", "retry %d picked a device "
                         "the allow-list excludes", retry);
    }
    tern_topology_free(t);
    tern_config_free(cfg);
    /* an allow-list that keeps nothing is an error, not an empty matrix */
    snprintf(yaml, sizeof yaml, "topology: \"%s\"\ndevices: [z]\n", path);
    cfg = config_with(yaml);
    cr_assert_lt(tern_topology_load(cfg, devs, 3, &t, err, sizeof err), 0);
    cr_assert_not_null(strstr(err, "allow-list"), "%s", err);
    tern_config_free(cfg);
    unlink(path);
}

/* ---- the engine refuses each, in one line ----------------------------------------- */
static void expect_engine_err(const char *yaml_tail, const char *part)
{
    char yaml[512], err[1024] = "";
    snprintf(yaml, sizeof yaml, "server_name: 127.0.0.1:0\n%s", yaml_tail);
    tern_engine *e = tern_engine_create_from_yaml(yaml, "t.yaml", err, sizeof err);
    cr_assert_null(e, "created from:\n%s", yaml);
    cr_assert_not_null(strstr(err, part), "%s", err);
    assert_one_line(err);
}

Test(files, engine_refuses_each_input)
{
    const char *bad[] = {fifo, "/dev/zero", sub, missing};
    const char *part[] = {"a FIFO, not a regular file", "a character device, not a regular file",
                          "Is a directory", "No such file or directory"};
    char tail[256];
    for (size_t i = 0; i < 4; i++) {
        snprintf(tail, sizeof tail, "auth_secret_file: \"%s\"\n", bad[i]);
        expect_engine_err(tail, part[i]);
        snprintf(tail, sizeof tail, "topology: \"%s\"\n", bad[i]);
        expect_engine_err(tail, part[i]);
        snprintf(tail, sizeof tail, "transports:\n  - name: tcp\n    path: \"%s\"\n"
                                    "    required: true\n", bad[i]);
        /* a directory as `path` is searched for libtern-tcp.so */
        expect_engine_err(tail, bad[i] == sub || bad[i] == missing
                                    ? "not found at its configured path"
                                    : part[i]);
    }
    snprintf(tail, sizeof tail, "auth_secret_file: \"%s\"\n", s5);
    expect_engine_err(tail, "is 5 bytes");
    snprintf(tail, sizeof tail, "auth_secret_file: \"%s\"\n", s5000);
    expect_engine_err(tail, "is 5000 bytes");
}

/* ---- the reader itself ---------------------------------------------------------------- */
Test(files, read_capped_limits_and_contents)
{
    char *data = NULL, err[256];
    size_t len = 0;
    cr_assert_eq(tern_file_read_capped(good, 33, &data, &len, err, sizeof err), 0, "%s", err);
    cr_assert_eq(len, 33);
    cr_assert_eq(data[33], '\0');
    free(data);
    cr_assert_eq(tern_file_read_capped(good, 32, &data, &len, err, sizeof err), TERN_ERR_CONFIG);
    char want[256];
    snprintf(want, sizeof want, "%s: cannot read: 33 bytes, more than the limit of 32", good);
    cr_assert_str_eq(err, want);
    /* st_size 0 but endless: the cap still holds */
    cr_assert_eq(tern_file_read_capped("/proc/self/maps", 16, &data, &len, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert_not_null(strstr(err, "more than the limit of 16 bytes"), "%s", err);
    cr_assert_eq(tern_file_check_regular(good, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_file_check_regular(fifo, err, sizeof err), TERN_ERR_CONFIG);
}
