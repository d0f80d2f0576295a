/* tests/core/test_metadata_keepalive.c: our entry in a metadata store lives as
 * long as we do (docs/protocol.md, Metadata store entries), against real
 * redis-server and etcd processes this test starts on loopback
 * (tests/support/stores.c):
 *  - the store restarted empty has the segment again within the keep-alive
 *    period, and a peer opening it moves verified data;
 *  - a killed publisher's entry expires (TTL in redis, lease in etcd) while
 *    a living one's is refreshed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "engine.h"
#include "peer/metadata.h"
#include "stores.h"
#include "tern/errors.h"
#include "tern/tern.h"
#include "base/util.h"

static char err[1024];

/* ---- configuration ---- */

/* A handle on uri in cluster; the test fails with err if it does not open. */
static tern_metadata *open_md(const char *uri, const char *cluster)
{
    return test_md_open(uri, cluster, err, sizeof err);
}

#define PERIOD_MS 1000
#define TTL_S 3

static const char *DESC = "{\"name\":\"%s\",\"protocol\":\"tcp\",\"buffers\":[]}";

static void publish(tern_metadata *md, const char *seg)
{
    char d[256];
    snprintf(d, sizeof d, DESC, seg);
    cr_assert_eq(tern_metadata_publish(md, seg, d, err, sizeof err), 0, "%s", err);
}

/* Fetch until found (want 1) or not found (want 0), up to limit_ms; returns
 * the ms it took, or -1. */
static long wait_entry(tern_metadata *md, const char *seg, int want, int limit_ms)
{
    uint64_t t0 = tern_now_ms();
    while (tern_now_ms() - t0 < (uint64_t)limit_ms) {
        char *j = NULL;
        int rc = tern_metadata_fetch(md, seg, &j, err, sizeof err);
        free(j);
        if ((want && rc == 0) || (!want && rc == TERN_ERR_NOT_FOUND))
            return (long)(tern_now_ms() - t0);
        usleep(50 * 1000);
    }
    return -1;
}

typedef struct store {
    const char *scheme;
    test_store srv; /* srv.port kept across a restart */
    char uri[128];
} store;

static void store_up(store *s)
{
    if (strcmp(s->scheme, "redis") == 0)
        test_redis_start(&s->srv);
    else
        test_etcd_start(&s->srv);
    snprintf(s->uri, sizeof s->uri, "%s://127.0.0.1:%d", s->scheme, s->srv.port);
}

static void store_down(store *s)
{
    test_store_stop(&s->srv);
}

/* ---- a store restarted empty ------------------------------------------------- */

static void restarted_empty(const char *scheme)
{
    store s = {.scheme = scheme};
    store_up(&s);
    tern_metadata *pub = open_md(s.uri, "ka"), *rd = open_md(s.uri, "ka");
    tern_metadata_set_keepalive(pub, PERIOD_MS, TTL_S);
    publish(pub, "seg-alive");
    cr_assert_geq(wait_entry(rd, "seg-alive", 1, 1000), 0, "not published: %s", err);
    store_down(&s);
    store_up(&s); /* same port, no data */
    char *j = NULL;
    int rc = tern_metadata_fetch(rd, "seg-alive", &j, err, sizeof err);
    free(j);
    cr_assert(rc != 0, "the restarted store is not empty");
    long ms = wait_entry(rd, "seg-alive", 1, 10 * PERIOD_MS);
    cr_log_info("%s restarted empty: segment back after %ld ms (keep-alive period %d ms)",
                scheme, ms, PERIOD_MS);
    cr_assert_geq(ms, 0, "the segment never came back to the restarted %s: %s", scheme, err);
    tern_metadata_close(pub);
    tern_metadata_close(rd);
    store_down(&s);
}

Test(keepalive, redis_restarted_empty_gets_the_segment_back, .timeout = 60)
{
    restarted_empty("redis");
}

Test(keepalive, etcd_restarted_empty_gets_the_segment_back, .timeout = 90)
{
    restarted_empty("etcd");
}

/* ---- a killed publisher's entry expires ------------------------------------------- */

static void killed_expires(const char *scheme)
{
    store s = {.scheme = scheme};
    store_up(&s);
    tern_metadata *live = open_md(s.uri, "ka"), *rd = open_md(s.uri, "ka");
    tern_metadata_set_keepalive(live, PERIOD_MS, TTL_S);
    publish(live, "seg-live");
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) { /* the publisher that dies */
        tern_config c = test_md_config(s.uri, "ka", 2000);
        tern_metadata *md = NULL;
        char d[256];
        snprintf(d, sizeof d, DESC, "seg-dead");
        if (tern_metadata_open(&c, &md, err, sizeof err) != 0)
            _exit(2);
        tern_metadata_set_keepalive(md, PERIOD_MS, TTL_S);
        if (tern_metadata_publish(md, "seg-dead", d, err, sizeof err) != 0)
            _exit(3);
        if (write(p[1], "R", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    char c;
    cr_assert_eq(read(p[0], &c, 1), 1, "the publisher did not start");
    cr_assert_geq(wait_entry(rd, "seg-dead", 1, 1000), 0, "%s", err);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    long ms = wait_entry(rd, "seg-dead", 0, (TTL_S + 10) * 1000);
    cr_log_info("%s: killed publisher's entry gone after %ld ms (TTL %d s)", scheme, ms, TTL_S);
    cr_assert_geq(ms, 0, "the killed publisher's entry is still in %s after %d s", scheme,
                  TTL_S + 10);
    /* the living publisher's entry outlived several TTLs */
    cr_assert_geq(wait_entry(rd, "seg-live", 1, 1000), 0, "the living entry expired: %s", err);
    cr_assert_geq(tern_metadata_keepalive_rounds(live), 2);
    cr_assert_eq(tern_metadata_unpublish(live, "seg-live", err, sizeof err), 0, "%s", err);
    cr_assert_geq(wait_entry(rd, "seg-live", 0, 1000), 0, "unpublished but still there");
    tern_metadata_close(live);
    tern_metadata_close(rd);
    close(p[0]);
    close(p[1]);
    store_down(&s);
}

Test(keepalive, redis_killed_publisher_expires, .timeout = 60)
{
    killed_expires("redis");
}

Test(keepalive, etcd_killed_publisher_expires, .timeout = 90)
{
    killed_expires("etcd");
}

/* ---- engines: a peer opening the segment after the restart moves data ---------------- */

static tern_engine *engine_on(const char *uri)
{
    char yaml[512], e2[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: %s\ncluster_id: ka-engine\n"
             "plugin_path: [%s/lib/tern]\nlog_level: error\ntransports:\n  - name: tcp\n",
             uri, TERN_BUILD_DIR);
    tern_engine *e = tern_engine_create_from_yaml(yaml, "test_metadata_keepalive", e2, sizeof e2);
    cr_assert(e, "%s", e2);
    return e;
}

static int move_verified(tern_engine *i, tern_segment_id seg, uint8_t *src, uint8_t *dst,
                         uint64_t remote, size_t n)
{
    for (size_t k = 0; k < n; k++)
        src[k] = (uint8_t)(k * 7 + 3);
    tern_request r = {.opcode = TERN_WRITE, .local = src, .segment = seg, .remote = remote,
                      .length = n};
    tern_batch *b = tern_batch_alloc(i, 1);
    tern_batch_submit(b, &r, 1);
    tern_batch_wait(b, 30000);
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    tern_batch_free(b);
    if (st.status != TERN_COMPLETED)
        return 0;
    r.opcode = TERN_READ;
    r.local = dst;
    b = tern_batch_alloc(i, 1);
    tern_batch_submit(b, &r, 1);
    tern_batch_wait(b, 30000);
    tern_batch_state(b, 0, &st);
    tern_batch_free(b);
    return st.status == TERN_COMPLETED && memcmp(src, dst, n) == 0;
}

Test(keepalive, redis_engine_segment_back_after_restart, .timeout = 60)
{
    store s = {.scheme = "redis"};
    store_up(&s);
    tern_engine *t = engine_on(s.uri), *i = engine_on(s.uri);
    tern_metadata_set_keepalive(t->md, PERIOD_MS, TTL_S);
    size_t n = 1 << 20;
    uint8_t *tb = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *src = malloc(n), *dst = malloc(n);
    cr_assert_eq(tern_register_memory(t, tb, n, NULL), 0, "%s", tern_engine_last_error(t));
    cr_assert_eq(tern_register_memory(i, src, n, NULL), 0);
    cr_assert_eq(tern_register_memory(i, dst, n, NULL), 0);
    tern_segment_id seg = tern_segment_open(i, tern_engine_server_name(t));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(i));
    cr_assert(move_verified(i, seg, src, dst, (uint64_t)(uintptr_t)tb, n));
    tern_segment_close(i, seg);
    store_down(&s);
    store_up(&s);
    uint64_t t0 = tern_now_ms();
    while ((seg = tern_segment_open(i, tern_engine_server_name(t))) < 0 &&
           tern_now_ms() - t0 < 10u * PERIOD_MS)
        usleep(50 * 1000);
    long ms = (long)(tern_now_ms() - t0);
    cr_assert_geq(seg, 0, "the target's segment never came back: %s", tern_engine_last_error(i));
    cr_log_info("redis restarted empty: the initiator opened the target again after %ld ms", ms);
    cr_assert(move_verified(i, seg, src, dst, (uint64_t)(uintptr_t)tb, n),
              "the transfer after the restart failed or differs");
    tern_segment_close(i, seg);
    tern_engine_destroy(i);
    tern_engine_destroy(t);
    munmap(tb, n);
    free(src);
    free(dst);
    store_down(&s);
}
