/* tests/core/test_topology.c: discovery on fake sysfs trees, the JSON matrix,
 * select_device's rules (docs/topology.md), memory location and the
 * two-level path choice (core/datapath/route.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "desc/desc.h"
#include "desc/segment_desc.h"
#include "datapath/route.h"
#include "host/topology.h"

#define FIX TERN_TEST_DIR "/support/fixtures/sysfs/"

static char err[512];

/* n devices mlx5_0..mlx5_{n-1}, numa_node read from sysfs. */
static void make_devs(tern_device_info *d, int n)
{
    memset(d, 0, sizeof(*d) * (size_t)n);
    for (int i = 0; i < n; i++) {
        snprintf(d[i].name, sizeof d[i].name, "mlx5_%d", i);
        snprintf(d[i].sysfs_path, sizeof d[i].sysfs_path, "class/infiniband/mlx5_%d/device", i);
        d[i].numa_node = -2;
    }
}

static tern_topology *discover(const char *tree, int n, const char *const *allow, size_t nallow,
                               int policy)
{
    tern_device_info d[16];
    make_devs(d, n);
    tern_topology *t = NULL;
    int rc = tern_topology_discover(tree, d, n, allow, nallow, policy, &t, err, sizeof err);
    cr_assert_eq(rc, 0, "discover %s: %d %s", tree, rc, err);
    cr_assert_not_null(t);
    return t;
}

static void assert_json(const tern_topology *t, const char *expect)
{
    char *s = tern_topology_to_json(t);
    cr_assert_not_null(s);
    cr_assert_str_eq(s, expect);
    free(s);
}

static tern_topology *from_json(const char *json, const tern_device_info *devs, int ndev,
                                int policy)
{
    tern_topology *t = NULL;
    int rc = tern_topology_from_json(json, devs, ndev, policy, &t, err, sizeof err);
    cr_assert_eq(rc, 0, "from_json: %d %s", rc, err);
    return t;
}

/* ---- discovery: the matrices, exactly ---------------------------------- */

Test(discover, one_node_one_nic)
{
    tern_topology *t = discover(FIX "one_node_one_nic", 1, NULL, 0, 0);
    assert_json(t, "{\"cpu:0\":[[\"mlx5_0\"],[]],\"*\":[[\"mlx5_0\"],[]]}");
    tern_topology_free(t);
}

Test(discover, two_nodes_four_nics)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, 0);
    assert_json(t, "{\"cpu:0\":[[\"mlx5_0\",\"mlx5_2\"],[\"mlx5_1\",\"mlx5_3\"]],"
                   "\"cpu:1\":[[\"mlx5_1\",\"mlx5_3\"],[\"mlx5_0\",\"mlx5_2\"]],"
                   "\"*\":[[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\"],[]]}");
    cr_assert_eq(tern_topology_device_count(t), 4);
    cr_assert_str_eq(tern_topology_device_name(t, 2), "mlx5_2");
    cr_assert_eq(tern_topology_device_index(t, "mlx5_3"), 3);
    cr_assert_eq(tern_topology_device_index(t, "mlx5_9"), TERN_ERR_NOT_FOUND);
    cr_assert_null(tern_topology_device_name(t, 4));
    tern_topology_free(t);
}

/* mlx5_5 has numa_node -1: never preferred, available everywhere. */
Test(discover, four_nodes_eight_nics_one_unknown)
{
    tern_topology *t = discover(FIX "four_nodes_eight_nics", 8, NULL, 0, 0);
    assert_json(t,
        "{\"cpu:0\":[[\"mlx5_0\",\"mlx5_1\"],"
        "[\"mlx5_2\",\"mlx5_3\",\"mlx5_4\",\"mlx5_5\",\"mlx5_6\",\"mlx5_7\"]],"
        "\"cpu:1\":[[\"mlx5_2\",\"mlx5_3\"],"
        "[\"mlx5_0\",\"mlx5_1\",\"mlx5_4\",\"mlx5_5\",\"mlx5_6\",\"mlx5_7\"]],"
        "\"cpu:2\":[[\"mlx5_4\"],"
        "[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\",\"mlx5_5\",\"mlx5_6\",\"mlx5_7\"]],"
        "\"cpu:3\":[[\"mlx5_6\",\"mlx5_7\"],"
        "[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\",\"mlx5_4\",\"mlx5_5\"]],"
        "\"*\":[[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\",\"mlx5_4\",\"mlx5_5\",\"mlx5_6\","
        "\"mlx5_7\"],[]]}");
    tern_topology_free(t);
}

/* node1 has memory but no NIC: nothing preferred, everything available. */
Test(discover, memory_only_node)
{
    tern_topology *t = discover(FIX "memory_only_node", 2, NULL, 0, 0);
    assert_json(t, "{\"cpu:0\":[[\"mlx5_0\",\"mlx5_1\"],[]],"
                   "\"cpu:1\":[[],[\"mlx5_0\",\"mlx5_1\"]],"
                   "\"*\":[[\"mlx5_0\",\"mlx5_1\"],[]]}");
    tern_topology_free(t);
}

/* The allow-list filters the matrix; indices still follow devs[]. */
Test(discover, allow_list_filters)
{
    const char *allow[] = {"mlx5_2", "mlx5_1", "not_a_nic"};
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, allow, 3, 0);
    assert_json(t, "{\"cpu:0\":[[\"mlx5_2\"],[\"mlx5_1\"]],"
                   "\"cpu:1\":[[\"mlx5_1\"],[\"mlx5_2\"]],"
                   "\"*\":[[\"mlx5_1\",\"mlx5_2\"],[]]}");
    cr_assert_eq(tern_topology_device_count(t), 4);
    cr_assert_eq(tern_topology_device_index(t, "mlx5_2"), 2);
    for (int i = 0; i < 1000; i++) {
        int d = tern_topology_select(t, "*", i % 3, NULL);
        cr_assert(d == 1 || d == 2, "filtered device %d chosen", d);
    }
    tern_topology_free(t);
}

Test(discover, allow_list_keeps_nothing)
{
    const char *allow[] = {"eth9"};
    tern_device_info d[4];
    make_devs(d, 4);
    tern_topology *t = (void *)1;
    int rc = tern_topology_discover(FIX "two_nodes_four_nics", d, 4, allow, 1, 0, &t, err,
                                    sizeof err);
    cr_assert_eq(rc, TERN_ERR_NOT_FOUND);
    cr_assert_null(t);
    cr_assert(strstr(err, "allow-list"), "%s", err);
}

/* A given numa_node wins over sysfs; no PCI path, no file, garbage: unknown. */
Test(discover, given_missing_and_bad_numa)
{
    tern_device_info d[5];
    make_devs(d, 4);
    d[0].numa_node = 1;                      /* sysfs says 0 */
    d[1].sysfs_path[0] = '\0';               /* not PCI (e.g. lo) */
    snprintf(d[2].sysfs_path, sizeof d[2].sysfs_path, "class/net/nonexistent/device");
    d[3].numa_node = -7;                     /* nonsense: unknown */
    tern_topology *t = NULL;
    int rc = tern_topology_discover(FIX "two_nodes_four_nics", d, 4, NULL, 0, 0, &t, err,
                                    sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    assert_json(t, "{\"cpu:0\":[[],[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\"]],"
                   "\"cpu:1\":[[\"mlx5_0\"],[\"mlx5_1\",\"mlx5_2\",\"mlx5_3\"]],"
                   "\"*\":[[\"mlx5_0\",\"mlx5_1\",\"mlx5_2\",\"mlx5_3\"],[]]}");
    tern_topology_free(t);
}

/* A kernel without /sys/devices/system/node: only the wildcard. */
Test(discover, no_numa_directory)
{
    tern_topology *t = discover(FIX "no-such-root", 2, NULL, 0, 0);
    assert_json(t, "{\"*\":[[\"mlx5_0\",\"mlx5_1\"],[]]}");
    cr_assert_eq(tern_topology_select(t, "cpu:0", 0, NULL) >= 0, 1);
    tern_topology_free(t);
}

Test(discover, bad_arguments)
{
    tern_device_info d[2];
    make_devs(d, 2);
    tern_topology *t = NULL;
    cr_assert_eq(tern_topology_discover(FIX "one_node_one_nic", d, 0, NULL, 0, 0, &t, err,
                                        sizeof err), TERN_ERR_INVAL);
    cr_assert_eq(tern_topology_discover(FIX "one_node_one_nic", NULL, 2, NULL, 0, 0, &t, err,
                                        sizeof err), TERN_ERR_INVAL);
    cr_assert_eq(tern_topology_discover(FIX "one_node_one_nic", d, 2, NULL, 0, 0, NULL, err,
                                        sizeof err), TERN_ERR_INVAL);
    strcpy(d[1].name, "mlx5_0");
    cr_assert_eq(tern_topology_discover(FIX "one_node_one_nic", d, 2, NULL, 0, 0, &t, err,
                                        sizeof err), TERN_ERR_INVAL);
    cr_assert(strstr(err, "'mlx5_0' is listed twice"), "%s", err);
    d[1].name[0] = '\0';
    cr_assert_eq(tern_topology_discover(FIX "one_node_one_nic", d, 2, NULL, 0, 0, &t, err,
                                        sizeof err), TERN_ERR_INVAL);
    cr_assert_null(t);
}

Test(discover, text_form)
{
    tern_topology *t = discover(FIX "memory_only_node", 2, NULL, 0, 0);
    tern_topology_mark_down(t, 1, 1);
    char *s = tern_topology_to_text(t);
    cr_assert_str_eq(s, "cpu:0    preferred: mlx5_0 mlx5_1(down)  available:\n"
                        "cpu:1    preferred:  available: mlx5_0 mlx5_1(down)\n"
                        "*        preferred: mlx5_0 mlx5_1(down)  available:\n");
    free(s);
    tern_topology_free(t);
}

/* ---- JSON matrix -------------------------------------------------------- */

Test(json, round_trip_discovered)
{
    tern_topology *t = discover(FIX "four_nodes_eight_nics", 8, NULL, 0, 0);
    char *a = tern_topology_to_json(t);
    tern_device_info d[8];
    make_devs(d, 8);
    tern_topology *u = from_json(a, d, 8, 0);
    assert_json(u, a);
    tern_topology *v = from_json(a, NULL, 0, 0);     /* names from the JSON itself */
    assert_json(v, a);
    free(a);
    tern_topology_free(t);
    tern_topology_free(u);
    tern_topology_free(v);
}

/* Indices follow devs[] by name, not the JSON's order; "*" is added when
 * absent (every device the matrix names). */
Test(json, indices_and_wildcard)
{
    tern_device_info d[3];
    make_devs(d, 3);
    tern_topology *t = from_json("{\"cpu:0\": [[\"mlx5_2\"], [\"mlx5_0\"]]}", d, 3, 0);
    cr_assert_eq(tern_topology_select(t, "cpu:0", 0, NULL), 2);
    cr_assert_eq(tern_topology_select(t, "cpu:0", 2, NULL), 0);
    assert_json(t, "{\"cpu:0\":[[\"mlx5_2\"],[\"mlx5_0\"]],\"*\":[[\"mlx5_0\",\"mlx5_2\"],[]]}");
    tern_topology_free(t);
    t = from_json("{\"cpu:0\": [[\"b\"], [\"a\"]]}", NULL, 0, 0);
    cr_assert_eq(tern_topology_device_index(t, "b"), 0);
    cr_assert_eq(tern_topology_device_index(t, "a"), 1);
    assert_json(t, "{\"cpu:0\":[[\"b\"],[\"a\"]],\"*\":[[\"b\",\"a\"],[]]}");
    tern_topology_free(t);
}

static void refuse(const char *json, const tern_device_info *d, int n, const char *needle)
{
    tern_topology *t = (void *)1;
    err[0] = '\0';
    int rc = tern_topology_from_json(json, d, n, 0, &t, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_PROTOCOL, "%s: rc %d", json, rc);
    cr_assert_null(t);
    cr_assert(strstr(err, needle), "%s: message '%s' lacks '%s'", json, err, needle);
}

Test(json, malformed_refused_with_key)
{
    tern_device_info d[2];
    make_devs(d, 2);
    refuse("{\"cpu:0\": [[\"mlx5_0\"]", NULL, 0, "not valid JSON");
    refuse("[1, 2]", NULL, 0, "expected a JSON object");
    refuse("{}", NULL, 0, "no location");
    refuse("{\"cpu:0\": \"mlx5_0\"}", NULL, 0, "\"cpu:0\": expected [[preferred");
    refuse("{\"cpu:1\": [[\"mlx5_0\"]]}", NULL, 0, "\"cpu:1\": expected");
    refuse("{\"cpu:0\": [[\"a\"], [], []]}", NULL, 0, "\"cpu:0\"");
    refuse("{\"cpu:0\": [{\"a\":1}, []]}", NULL, 0, "\"cpu:0\": the preferred list");
    refuse("{\"cpu:0\": [[], 7]}", NULL, 0, "\"cpu:0\": the available list");
    refuse("{\"gpu:3\": [[\"a\", 5], []]}", NULL, 0, "\"gpu:3\": preferred[1]");
    refuse("{\"cpu:0\": [[\"\"], []]}", NULL, 0, "\"cpu:0\": preferred[0] is empty");
    refuse("{\"cpu:0\": [[\"a\"], [\"a\"]]}", NULL, 0, "device 'a' is listed twice");
    refuse("{\"cpu:0\": [[\"mlx5_0\"], [\"mlx5_7\"]]}", d, 2, "device 'mlx5_7' is not one");
    refuse("{\"\": [[\"a\"], []]}", NULL, 0, "location key");
    char big[400];
    snprintf(big, sizeof big, "{\"cpu:0\": [[\"%0100d\"], []]}", 0);
    refuse(big, NULL, 0, "longer than");
    tern_topology *t = NULL;
    cr_assert_eq(tern_topology_from_json(NULL, NULL, 0, 0, &t, err, sizeof err), TERN_ERR_INVAL);
}

/* An allow-list applied to a given matrix. */
Test(json, restrict_by_allow_list)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, 0);
    char *a = tern_topology_to_json(t);
    tern_topology *u = from_json(a, NULL, 0, 0);
    const char *allow[] = {"mlx5_3", "mlx5_0"};
    cr_assert_eq(tern_topology_restrict(u, allow, 2, err, sizeof err), 0, "%s", err);
    assert_json(u, "{\"cpu:0\":[[\"mlx5_0\"],[\"mlx5_3\"]],"
                   "\"cpu:1\":[[\"mlx5_3\"],[\"mlx5_0\"]],"
                   "\"*\":[[\"mlx5_0\",\"mlx5_3\"],[]]}");
    cr_assert_eq(tern_topology_restrict(u, NULL, 0, err, sizeof err), 0);  /* no list: no-op */
    const char *none[] = {"eth0"};
    cr_assert_eq(tern_topology_restrict(u, none, 1, err, sizeof err), TERN_ERR_NOT_FOUND);
    cr_assert(strstr(err, "allow-list"), "%s", err);
    cr_assert_eq(tern_topology_select(u, "cpu:0", 0, NULL), TERN_ERR_NOT_FOUND);
    cr_assert_eq(tern_topology_restrict(NULL, none, 1, err, sizeof err), TERN_ERR_INVAL);
    free(a);
    tern_topology_free(t);
    tern_topology_free(u);
}

/* ---- select_device ------------------------------------------------------ */

/* Each device of `want` (indices) gets within 5% of a uniform share. */
static void assert_uniform(tern_topology *t, const char *loc, int calls, const int *want, int n)
{
    int count[TERN_MAX_DEVICES] = {0};
    for (int i = 0; i < calls; i++) {
        int d = tern_topology_select(t, loc, 0, NULL);
        cr_assert(d >= 0 && d < TERN_MAX_DEVICES, "select gave %d", d);
        count[d]++;
    }
    double share = (double)calls / n;
    int total = 0;
    for (int k = 0; k < n; k++) {
        int c = count[want[k]];
        total += c;
        cr_log_info("%s device %d: %d of %d (uniform %.0f)", loc, want[k], c, calls, share);
        cr_assert(c >= share * 0.95 && c <= share * 1.05,
                  "%s: device %d chosen %d times, uniform share %.0f +-5%%", loc, want[k], c,
                  share);
    }
    cr_assert_eq(total, calls, "a non-preferred device was chosen at retry 0");
}

Test(select, random_uniform_among_preferred)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, TERN_SELECT_RANDOM);
    tern_topology_seed(t, 42);
    assert_uniform(t, "cpu:0", 10000, (int[]){0, 2}, 2);
    assert_uniform(t, "cpu:1", 10000, (int[]){1, 3}, 2);
    assert_uniform(t, "*", 10000, (int[]){0, 1, 2, 3}, 4);
    tern_topology_free(t);
    /* 8 preferred: 1,250 per device is too few for +-5% of pure chance, so
     * this one takes 100,000 calls. */
    t = discover(FIX "four_nodes_eight_nics", 8, NULL, 0, TERN_SELECT_RANDOM);
    tern_topology_seed(t, 7);
    assert_uniform(t, "*", 100000, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
    assert_uniform(t, "cpu:3", 10000, (int[]){6, 7}, 2);
    tern_topology_free(t);
}

/* Unseeded (the default, seeded from the clock) is just as uniform. */
Test(select, default_seed_uniform)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, TERN_SELECT_RANDOM);
    assert_uniform(t, "cpu:1", 10000, (int[]){1, 3}, 2);
    tern_topology_free(t);
}

Test(select, round_robin_exact)
{
    tern_topology *t = discover(FIX "four_nodes_eight_nics", 8, NULL, 0,
                                TERN_SELECT_ROUND_ROBIN);
    int count[8] = {0};
    for (int i = 0; i < 10000; i++)
        count[tern_topology_select(t, "*", 0, NULL)]++;
    for (int d = 0; d < 8; d++)
        cr_assert_eq(count[d], 1250, "device %d: %d", d, count[d]);
    cr_assert_eq(tern_topology_select(t, "cpu:2", 0, NULL), 4);
    tern_topology_free(t);
}

/* No preferred device: retry 0 picks among available. */
Test(select, empty_preferred_uses_available)
{
    tern_topology *t = discover(FIX "memory_only_node", 2, NULL, 0, TERN_SELECT_RANDOM);
    tern_topology_seed(t, 1);
    assert_uniform(t, "cpu:1", 10000, (int[]){0, 1}, 2);
    tern_topology_free(t);
}

/* retry k >= 1: (k-1) mod N, preferred first, then available: every device
 * exactly once per cycle. */
Test(select, retries_walk_every_device_in_order)
{
    tern_topology *t = discover(FIX "four_nodes_eight_nics", 8, NULL, 0, TERN_SELECT_RANDOM);
    const int order[] = {4, 0, 1, 2, 3, 5, 6, 7};   /* cpu:2: [[4],[0,1,2,3,5,6,7]] */
    for (int cycle = 0; cycle < 3; cycle++) {
        int seen[8] = {0};
        for (int i = 0; i < 8; i++) {
            int k = 1 + cycle * 8 + i;
            int d = tern_topology_select(t, "cpu:2", k, NULL);
            cr_assert_eq(d, order[i], "retry %d: got %d, want %d", k, d, order[i]);
            seen[d]++;
        }
        for (int d = 0; d < 8; d++)
            cr_assert_eq(seen[d], 1, "cycle %d: device %d visited %d times", cycle, d, seen[d]);
    }
    tern_topology_free(t);
}

/* A down device is skipped without renumbering the others. */
Test(select, down_devices_skipped)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, TERN_SELECT_RANDOM);
    /* cpu:0 order: mlx5_0, mlx5_2 | mlx5_1, mlx5_3 */
    tern_topology_mark_down(t, 2, 1);
    cr_assert_eq(tern_topology_is_down(t, 2), 1);
    const int want[] = {0, 1, 1, 3, 0, 1, 1, 3};
    for (int k = 1; k <= 8; k++)
        cr_assert_eq(tern_topology_select(t, "cpu:0", k, NULL), want[k - 1], "retry %d", k);
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(tern_topology_select(t, "cpu:0", 0, NULL), 0);
    /* All preferred down: retry 0 moves on to available. */
    tern_topology_mark_down(t, 0, 1);
    for (int i = 0; i < 1000; i++) {
        int d = tern_topology_select(t, "cpu:0", 0, NULL);
        cr_assert(d == 1 || d == 3, "got %d", d);
    }
    /* Everything down: not found, at every retry and via "*". */
    tern_topology_mark_down(t, 1, 1);
    tern_topology_mark_down(t, 3, 1);
    for (int k = 0; k < 6; k++) {
        cr_assert_eq(tern_topology_select(t, "cpu:0", k, NULL), TERN_ERR_NOT_FOUND);
        cr_assert_eq(tern_topology_select(t, "cpu:9", k, NULL), TERN_ERR_NOT_FOUND);
    }
    tern_topology_mark_down(t, 3, 0);
    cr_assert_eq(tern_topology_select(t, "cpu:0", 0, NULL), 3);
    cr_assert_eq(tern_topology_is_down(t, 3), 0);
    cr_assert_eq(tern_topology_is_down(t, 9), TERN_ERR_INVAL);
    tern_topology_mark_down(t, 99, 1);   /* ignored */
    tern_topology_free(t);
}

/* Nothing usable in the location's own lists: fall back to "*". */
Test(select, location_exhausted_falls_back_to_wildcard)
{
    tern_topology *t = from_json("{\"cpu:0\":[[\"a\"],[]],\"*\":[[\"a\",\"b\"],[]]}", NULL, 0,
                                 TERN_SELECT_RANDOM);
    tern_topology_mark_down(t, 0, 1);
    for (int k = 0; k < 4; k++)
        cr_assert_eq(tern_topology_select(t, "cpu:0", k, NULL), 1);
    tern_topology_free(t);
}

Test(select, hint_wins)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, TERN_SELECT_RANDOM);
    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(tern_topology_select(t, "cpu:0", 0, "mlx5_3"), 3);  /* an available one */
        cr_assert_eq(tern_topology_select(t, "cpu:0", 0, "mlx5_2"), 2);
        cr_assert_eq(tern_topology_select(t, "nowhere", 0, "mlx5_1"), 1); /* via "*" */
    }
    /* A hint that names no listed device is ignored. */
    for (int i = 0; i < 1000; i++) {
        int d = tern_topology_select(t, "cpu:0", 0, "eth0");
        cr_assert(d == 0 || d == 2, "got %d", d);
    }
    /* A down hinted device does not win. */
    tern_topology_mark_down(t, 3, 1);
    for (int i = 0; i < 1000; i++)
        cr_assert_neq(tern_topology_select(t, "cpu:0", 0, "mlx5_3"), 3);
    tern_topology_mark_down(t, 3, 0);
    /* Retries walk the order, hint or not, so a failing hinted device is left. */
    cr_assert_eq(tern_topology_select(t, "cpu:0", 1, "mlx5_3"), 0);
    cr_assert_eq(tern_topology_select(t, "cpu:0", 2, "mlx5_3"), 2);
    tern_topology_free(t);
}

Test(select, unknown_location_uses_wildcard)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, TERN_SELECT_RANDOM);
    tern_topology_seed(t, 3);
    assert_uniform(t, "cpu:7", 10000, (int[]){0, 1, 2, 3}, 4);
    for (int k = 1; k <= 8; k++) {
        cr_assert_eq(tern_topology_select(t, "gpu:0", k, NULL), (k - 1) % 4);
        cr_assert_eq(tern_topology_select(t, NULL, k, NULL), (k - 1) % 4);
        cr_assert_eq(tern_topology_select(t, "", k, NULL), (k - 1) % 4);
    }
    cr_assert_eq(tern_topology_select(NULL, "cpu:0", 0, NULL), TERN_ERR_INVAL);
    cr_assert_eq(tern_topology_select(t, "cpu:0", -5, NULL) >= 0, 1);
    tern_topology_free(t);
}

struct sel_arg {
    tern_topology *t;
    int count[4];
};

static void *sel_thread(void *p)
{
    struct sel_arg *a = p;
    for (int i = 0; i < 200000; i++) {
        int d = tern_topology_select(a->t, (i & 1) ? "cpu:1" : "cpu:0", i % 5, NULL);
        if (d >= 0 && d < 4)
            a->count[d]++;
        if (i % 1000 == 0)
            tern_topology_mark_down(a->t, 3, (i / 1000) & 1);
    }
    return NULL;
}

/* Concurrent selects (and down flips) from 4 threads: always a valid index. */
Test(select, concurrent)
{
    tern_topology *t = discover(FIX "two_nodes_four_nics", 4, NULL, 0, TERN_SELECT_RANDOM);
    pthread_t th[4];
    struct sel_arg a[4];
    for (int i = 0; i < 4; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].t = t;
        pthread_create(&th[i], NULL, sel_thread, &a[i]);
    }
    long total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        for (int d = 0; d < 4; d++)
            total += a[i].count[d];
    }
    cr_assert_eq(total, 4L * 200000);
    tern_topology_free(t);
}

/* ---- memory location ------------------------------------------------------ */

Test(memloc, touched_page_reports_its_node)
{
    if (numa_available() < 0)
        cr_skip_test("libnuma reports no NUMA support on this machine");
    long pg = sysconf(_SC_PAGESIZE);
    char *p = aligned_alloc((size_t)pg, (size_t)pg * 4);
    memset(p, 1, (size_t)pg * 4);
    int node = -1;
    cr_assert_eq(get_mempolicy(&node, NULL, 0, p + pg, MPOL_F_NODE | MPOL_F_ADDR), 0);
    char want[32], got[32];
    snprintf(want, sizeof want, "cpu:%d", node);
    tern_memory_location(p + pg + 17, got, sizeof got);
    cr_assert_str_eq(got, want);
    free(p);
}

/* An untouched page is not faulted in: it reports "*" and stays absent. */
Test(memloc, untouched_page_is_unknown)
{
    long pg = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    char got[32];
    tern_memory_location(p, got, sizeof got);
    cr_assert_str_eq(got, "*");
    unsigned char vec = 1;
    cr_assert_eq(mincore(p, (size_t)pg, &vec), 0);
    cr_assert_eq(vec & 1, 0, "tern_memory_location faulted the page in");
    munmap(p, (size_t)pg * 2);
}

Test(memloc, bad_arguments)
{
    char got[8] = "xxxxxxx";
    tern_memory_location(NULL, got, sizeof got);
    cr_assert_str_eq(got, "*");
    tern_memory_location(got, NULL, 10);                 /* no crash */
    char tiny[3];
    static char page[8192] = {1};
    page[4096] = 1;
    tern_memory_location(page + 4096, tiny, sizeof tiny); /* truncated, terminated */
    cr_assert_lt(strlen(tiny), sizeof tiny);
}

/* ---- two-level path choice ---------------------------------------------- */

/* A hand-built pair of descriptors:
 *  local "10.0.0.1:12001", transport "rdma", devices mlx5_0..3 (the
 *   two_nodes_four_nics topology), buffers at 0x10000 (cpu:1) and 0x40000
 *   (cpu:0), lkey = 100 + dev, rkey = 200 + dev (second buffer +10);
 *  peer "10.0.0.2:12001", devices [mlx5_0, mlx5_1] but a published matrix
 *   that names mlx5_1 first (so its indices differ from the device list),
 *   one buffer at 0x7f0000 (cpu:0) with rkey = 900 + dev. */
struct fixture {
    tern_device_desc ldev[4], pdev[2];
    tern_buffer_keys lkeys[2][2], pkeys[1];
    tern_buffer_desc lbuf[2], pbuf[1];
    tern_seg_transport lt, pt;
    tern_segment_desc local, peer;
    tern_topology *ltopo, *ptopo;
};

static void keys(tern_buffer_keys *k, const char *tr, int ndev, uint64_t lbase, uint64_t rbase)
{
    memset(k, 0, sizeof *k);
    snprintf(k->transport, sizeof k->transport, "%s", tr);
    k->ndev = ndev;
    for (int i = 0; i < ndev; i++) {
        k->lkey[i] = lbase + (uint64_t)i;
        k->rkey[i] = rbase + (uint64_t)i;
    }
}

static void fixture_build(struct fixture *f, int policy)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 4; i++)
        snprintf(f->ldev[i].name, sizeof f->ldev[i].name, "mlx5_%d", i);
    for (int i = 0; i < 2; i++)
        snprintf(f->pdev[i].name, sizeof f->pdev[i].name, "mlx5_%d", i);
    f->ltopo = discover(FIX "two_nodes_four_nics", 4, NULL, 0, policy);
    f->ptopo = from_json("{\"cpu:0\":[[\"mlx5_1\"],[\"mlx5_0\"]],"
                         "\"cpu:1\":[[\"mlx5_0\"],[\"mlx5_1\"]]}", NULL, 0, policy);
    keys(&f->lkeys[0][0], "tcp", 1, 1, 1);
    keys(&f->lkeys[0][1], "rdma", 4, 100, 200);
    keys(&f->lkeys[1][0], "rdma", 4, 110, 210);
    keys(&f->pkeys[0], "rdma", 2, 800, 900);
    f->lbuf[0] = (tern_buffer_desc){.location = "cpu:1", .addr = 0x10000, .length = 0x10000,
                                    .keys = f->lkeys[0], .nkeys = 2};
    f->lbuf[1] = (tern_buffer_desc){.location = "cpu:0", .addr = 0x40000, .length = 0x1000,
                                    .keys = f->lkeys[1], .nkeys = 1};
    f->pbuf[0] = (tern_buffer_desc){.location = "cpu:0", .addr = 0x7f0000, .length = 0x100000,
                                    .keys = f->pkeys, .nkeys = 1};
    snprintf(f->lt.name, sizeof f->lt.name, "rdma");
    f->lt.devices = f->ldev;
    f->lt.ndevices = 4;
    f->lt.topology = f->ltopo;
    snprintf(f->pt.name, sizeof f->pt.name, "rdma");
    f->pt.devices = f->pdev;
    f->pt.ndevices = 2;
    f->pt.topology = f->ptopo;
    snprintf(f->local.name, sizeof f->local.name, "10.0.0.1:12001");
    f->local.buffers = f->lbuf;
    f->local.nbuffers = 2;
    f->local.transports = &f->lt;
    f->local.ntransports = 1;
    snprintf(f->peer.name, sizeof f->peer.name, "10.0.0.2:12001");
    f->peer.buffers = f->pbuf;
    f->peer.nbuffers = 1;
    f->peer.transports = &f->pt;
    f->peer.ntransports = 1;
}

static void fixture_free(struct fixture *f)
{
    tern_topology_free(f->ltopo);
    tern_topology_free(f->ptopo);
}

static int choose(struct fixture *f, uint64_t laddr, uint64_t raddr, uint64_t len, int retry,
                  tern_path *p)
{
    memset(p, 0, sizeof *p);
    err[0] = '\0';
    return tern_path_choose(&f->local, f->ltopo, &f->peer, f->ptopo, "rdma", laddr, raddr, len,
                            retry, p, err, sizeof err);
}

Test(path, two_level_choice)
{
    struct fixture f;
    fixture_build(&f, TERN_SELECT_ROUND_ROBIN);
    tern_path p;
    /* local cpu:1 -> preferred mlx5_1, mlx5_3 (round robin); peer cpu:0 ->
     * mlx5_1, which is index 1 of the peer's device list. */
    cr_assert_eq(choose(&f, 0x10000, 0x7f0000, 0x10000, 0, &p), 0, "%s", err);
    cr_assert_eq(p.local_dev, 1);
    cr_assert_eq(p.lkey, 101);
    cr_assert_eq(p.peer_dev, 1);
    cr_assert_eq(p.rkey, 901);
    cr_assert_str_eq(p.peer_nic_path, "10.0.0.2:12001@mlx5_1");
    cr_assert_str_eq(p.local_nic_path, "10.0.0.1:12001@mlx5_1");
    cr_assert_eq(choose(&f, 0x1ff00, 0x8effff, 1, 0, &p), 0, "%s", err);
    cr_assert_eq(p.local_dev, 3);
    cr_assert_eq(p.lkey, 103);
    cr_assert_str_eq(p.local_nic_path, "10.0.0.1:12001@mlx5_3");
    /* second local buffer: cpu:0, its own keys */
    cr_assert_eq(choose(&f, 0x40800, 0x7f0000, 0x800, 0, &p), 0, "%s", err);
    cr_assert(p.local_dev == 0 || p.local_dev == 2);
    cr_assert_eq(p.lkey, 110 + (uint64_t)p.local_dev);
    fixture_free(&f);
}

/* Retries walk both sides: local cpu:1 order 1,3,0,2; peer cpu:0 order
 * mlx5_1, mlx5_0. */
Test(path, retries_walk_both_sides)
{
    struct fixture f;
    fixture_build(&f, TERN_SELECT_RANDOM);
    const int lwant[] = {1, 3, 0, 2, 1};
    const int pwant[] = {1, 0, 1, 0, 1};
    for (int k = 1; k <= 5; k++) {
        tern_path p;
        cr_assert_eq(choose(&f, 0x10000, 0x7f0000, 64, k, &p), 0, "%s", err);
        cr_assert_eq(p.local_dev, lwant[k - 1], "retry %d", k);
        cr_assert_eq(p.peer_dev, pwant[k - 1], "retry %d", k);
        cr_assert_eq(p.rkey, 900 + (uint64_t)pwant[k - 1]);
    }
    /* A down peer device is skipped. */
    tern_topology_mark_down(f.ptopo, tern_topology_device_index(f.ptopo, "mlx5_1"), 1);
    tern_path p;
    cr_assert_eq(choose(&f, 0x10000, 0x7f0000, 64, 0, &p), 0, "%s", err);
    cr_assert_str_eq(p.peer_nic_path, "10.0.0.2:12001@mlx5_0");
    cr_assert_eq(p.rkey, 900);
    fixture_free(&f);
}

/* NULL topologies: the descriptor's published ones are used. */
Test(path, topology_from_descriptor)
{
    struct fixture f;
    fixture_build(&f, TERN_SELECT_RANDOM);
    tern_path p;
    int rc = tern_path_choose(&f.local, NULL, &f.peer, NULL, "rdma", 0x10000, 0x7f0000, 8, 1,
                              &p, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(p.local_dev, 1);
    cr_assert_str_eq(p.peer_nic_path, "10.0.0.2:12001@mlx5_1");
    fixture_free(&f);
}

Test(path, errors_are_clear)
{
    struct fixture f;
    fixture_build(&f, TERN_SELECT_RANDOM);
    tern_path p;
    /* local range not registered */
    cr_assert_eq(choose(&f, 0x30000, 0x7f0000, 8, 0, &p), TERN_ERR_RANGE);
    cr_assert(strstr(err, "local address 0x30000") && strstr(err, "10.0.0.1:12001"), "%s", err);
    /* crosses the end of the local buffer */
    cr_assert_eq(choose(&f, 0x1fff0, 0x7f0000, 0x20, 0, &p), TERN_ERR_RANGE);
    /* stale peer descriptor: no buffer covers the target */
    cr_assert_eq(choose(&f, 0x10000, 0x900000, 8, 0, &p), TERN_ERR_RANGE);
    cr_assert(strstr(err, "peer address 0x900000") && strstr(err, "stale"), "%s", err);
    cr_assert_eq(choose(&f, 0x10000, UINT64_MAX - 4, 8, 0, &p), TERN_ERR_RANGE);
    /* no keys for the transport on the local buffer */
    f.lbuf[1].nkeys = 0;
    cr_assert_eq(choose(&f, 0x40000, 0x7f0000, 8, 0, &p), TERN_ERR_NOT_FOUND);
    cr_assert(strstr(err, "no keys for transport 'rdma'"), "%s", err);
    /* peer keys shorter than its device list */
    f.pkeys[0].ndev = 1;
    cr_assert_eq(choose(&f, 0x10000, 0x7f0000, 8, 1, &p), TERN_ERR_PROTOCOL);
    cr_assert(strstr(err, "needs index 1"), "%s", err);
    f.pkeys[0].ndev = 2;
    /* topology names a device the descriptor does not list */
    f.pt.ndevices = 1;
    cr_assert_eq(choose(&f, 0x10000, 0x7f0000, 8, 1, &p), TERN_ERR_PROTOCOL);
    cr_assert(strstr(err, "'mlx5_1'") && strstr(err, "not in the 'rdma' device list"), "%s",
              err);
    f.pt.ndevices = 2;
    /* every local device down */
    for (int d = 0; d < 4; d++)
        tern_topology_mark_down(f.ltopo, d, 1);
    cr_assert_eq(choose(&f, 0x10000, 0x7f0000, 8, 0, &p), TERN_ERR_NOT_FOUND);
    cr_assert(strstr(err, "no usable 'rdma' device for location 'cpu:1'"), "%s", err);
    for (int d = 0; d < 4; d++)
        tern_topology_mark_down(f.ltopo, d, 0);
    /* a transport the peer does not have, and no topology given */
    cr_assert_eq(tern_path_choose(&f.local, f.ltopo, &f.peer, NULL, "efa", 0x10000, 0x7f0000, 8,
                                  0, &p, err, sizeof err), TERN_ERR_NOT_FOUND);
    cr_assert_eq(tern_path_choose(NULL, f.ltopo, &f.peer, NULL, "rdma", 0, 0, 8, 0, &p, err,
                                  sizeof err), TERN_ERR_INVAL);
    fixture_free(&f);
}

/* The peer's descriptor as it travels: encoded to JSON, decoded by the
 * control code (buffers sorted, the published matrix rebuilt), then used
 * with its own topology (NULL) for the remote half of the choice. */
Test(path, through_encoded_descriptor)
{
    struct fixture f;
    fixture_build(&f, TERN_SELECT_RANDOM);
    tern_segment_desc src = f.peer;
    tern_buffer_desc bufs[3];
    tern_buffer_keys k[3];
    for (int i = 0; i < 3; i++) {
        keys(&k[i], "rdma", 2, 500 + 10 * (uint64_t)i, 600 + 10 * (uint64_t)i);
        /* out of address order on purpose; locations cpu:1, cpu:0, cpu:1 */
        bufs[i] = (tern_buffer_desc){.addr = 0x900000 - (uint64_t)i * 0x100000,
                                     .length = 0x100000, .keys = &k[i], .nkeys = 1};
        snprintf(bufs[i].location, sizeof bufs[i].location, "cpu:%d", (i + 1) % 2);
    }
    src.buffers = bufs;
    src.nbuffers = 3;
    tern_seg_transport tr = f.pt;
    tr.addr = tern_desc_new();
    src.transports = &tr;
    snprintf(src.protocol, sizeof src.protocol, "rdma");
    char *json = tern_segment_desc_encode(&src);
    cr_assert_not_null(json);
    tern_segment_desc *peer = NULL;
    int rc = tern_segment_desc_decode(json, strlen(json), &peer, err, sizeof err);
    cr_assert_eq(rc, 0, "decode: %s\n%s", err, json);
    tern_path p;
    /* 0x800000.. is bufs[1], cpu:0: the published matrix prefers mlx5_1 */
    rc = tern_path_choose(&f.local, f.ltopo, peer, NULL, "rdma", 0x10000, 0x800010, 64, 0, &p,
                          err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(p.peer_nic_path, "10.0.0.2:12001@mlx5_1");
    cr_assert_eq(p.peer_dev, 1);
    cr_assert_eq(p.rkey, 611);
    /* 0x900000.. is bufs[0], cpu:1: mlx5_0 preferred */
    rc = tern_path_choose(&f.local, f.ltopo, peer, NULL, "rdma", 0x10000, 0x9ffff0, 16, 0, &p,
                          err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(p.peer_nic_path, "10.0.0.2:12001@mlx5_0");
    cr_assert_eq(p.rkey, 600);
    /* beyond the last buffer: stale descriptor */
    cr_assert_eq(tern_path_choose(&f.local, f.ltopo, peer, NULL, "rdma", 0x10000, 0xa00000, 1,
                                  0, &p, err, sizeof err), TERN_ERR_RANGE);
    tern_segment_desc_free(peer);
    tern_desc_free(tr.addr);
    free(json);
    fixture_free(&f);
}
