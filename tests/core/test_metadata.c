/* tests/core/test_metadata.c: one metadata suite (publish, fetch, update, list,
 * unpublish, not found) run over p2p, redis:// and etcd://, against real
 * redis-server and etcd processes this test starts on loopback
 * (tests/support/stores.c); plus stores
 * that are down, black-holed, or die mid-way: a clear error in time. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "desc/segment_desc.h"
#include "control/handshake.h"
#include "peer/metadata.h"
#include "stores.h"
#include "tern/errors.h"
#include "base/util.h"

static char err[1024];

/* ---- helpers: a store that never answers ---- */

/* A socket that listens but never accepts: connects succeed, nothing answers. */
static int black_hole(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t sl = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    listen(fd, 16);
    getsockname(fd, (struct sockaddr *)&a, &sl);
    *port = ntohs(a.sin_port);
    return fd;
}

/* ---- configuration ---- */

/* "Failed in time" bound for operations under an 800 ms timeout: long
 * enough for a loaded 2-core machine, still below the 5 s default, so a
 * configured timeout that is ignored is caught. */
#define IN_TIME_MS 4500

/* A handle on uri in cluster; the test fails with err if it does not open. */
static tern_metadata *open_md(const char *uri, const char *cluster)
{
    return test_md_open(uri, cluster, err, sizeof err);
}

/* ---- the shared suite ---- */

static char *descriptor(const char *name, uint64_t ts, uint64_t addr)
{
    tern_segment_desc d = {0};
    tern_buffer_desc b = {0};
    tern_buffer_keys k = {.transport = "tcp"};
    tern_seg_transport t = {.name = "tcp"};
    snprintf(d.name, sizeof d.name, "%s", name);
    strcpy(d.protocol, "tcp");
    d.timestamp = ts;
    strcpy(b.location, "cpu:0");
    b.addr = addr;
    b.length = 4096;
    b.keys = &k;
    b.nkeys = 1;
    d.buffers = &b;
    d.nbuffers = 1;
    d.transports = &t;
    d.ntransports = 1;
    return tern_segment_desc_encode(&d);
}

typedef struct seen {
    char names[8][300];
    int n;
} seen;

static int on_segment(void *arg, const char *name)
{
    seen *s = arg;
    if (s->n < 8)
        snprintf(s->names[s->n++], sizeof s->names[0], "%s", name);
    return 0;
}

static int listed(tern_metadata *md, const char *name)
{
    seen s = {.n = 0};
    cr_assert_eq(tern_metadata_list(md, on_segment, &s, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < s.n; i++)
        if (strcmp(s.names[i], name) == 0)
            return 1;
    return 0;
}

static void expect_not_found(tern_metadata *md, const char *seg)
{
    char *json = (char *)0x1;
    int rc = tern_metadata_fetch(md, seg, &json, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_NOT_FOUND, "%s: %s (%s)", seg, tern_strerror(rc), err);
    cr_assert_null(json);
    cr_assert(strstr(err, seg) || strstr(err, "segment"), "%s", err);
}

/* pub publishes seg; rd (another handle, as a peer would) reads it. */
static void suite(tern_metadata *pub, tern_metadata *rd, const char *seg)
{
    expect_not_found(rd, seg);
    char *v1 = descriptor(seg, 1, 0x10000);
    cr_assert_eq(tern_metadata_publish(pub, seg, v1, err, sizeof err), 0, "%s", err);
    char *got = NULL;
    cr_assert_eq(tern_metadata_fetch(rd, seg, &got, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(got, v1);
    tern_segment_desc *d = NULL;
    cr_assert_eq(tern_segment_desc_decode(got, strlen(got), &d, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(d->name, seg);
    tern_segment_desc_free(d);
    free(got);
    /* Update (memory registered): the new descriptor replaces the old. */
    char *v2 = descriptor(seg, 2, 0x20000);
    cr_assert_eq(tern_metadata_publish(pub, seg, v2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_metadata_fetch(rd, seg, &got, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(got, v2);
    free(got);
    cr_assert(listed(pub, seg), "list shows %s", seg);
    /* Clean shutdown removes it. */
    cr_assert_eq(tern_metadata_unpublish(pub, seg, err, sizeof err), 0, "%s", err);
    expect_not_found(rd, seg);
    cr_assert(!listed(pub, seg));
    free(v1);
    free(v2);
    /* Bad segment names are refused before any I/O. */
    cr_assert_eq(tern_metadata_publish(pub, "", "{}", err, sizeof err), TERN_ERR_INVAL);
}

/* ---- p2p ---- */

static int md_handler(void *arg, int type, const char *json, size_t len, char **reply,
                      size_t *replylen)
{
    if (type != TERN_HS_METADATA)
        return TERN_ERR_NOT_SUPPORTED;
    return tern_metadata_hs_reply(arg, json, len, reply, replylen);
}

Test(p2p, suite)
{
    tern_metadata *pub = open_md("p2p", "t");
    cr_assert_str_eq(tern_metadata_backend(pub), "p2p");
    tern_hs_options o = {.bind_host = "127.0.0.1", .handler = md_handler, .arg = pub};
    tern_hs_server *s = NULL;
    cr_assert_eq(tern_hs_server_start(&o, &s, err, sizeof err), 0, "%s", err);
    char seg[64];
    snprintf(seg, sizeof seg, "127.0.0.1:%u", tern_hs_server_port(s));
    tern_metadata *rd = open_md(NULL, "t"); /* NULL = the default, p2p */
    cr_assert_str_eq(tern_metadata_backend(rd), "p2p");
    suite(pub, rd, seg);
    char *local = tern_metadata_local_json(pub);
    cr_assert_null(local, "nothing served after unpublish");
    tern_hs_server_stop(s);
    /* The peer's daemon is gone: a connect error naming it, quickly. */
    char *json = NULL;
    uint64_t t0 = tern_now_ms();
    int rc = tern_metadata_fetch(rd, seg, &json, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "%s", err);
    cr_assert(strstr(err, seg) || strstr(err, "127.0.0.1"), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS);
    tern_metadata_close(rd);
    tern_metadata_close(pub);
}

Test(p2p, unknown_scheme_and_garbage_uri)
{
    tern_config c = test_md_config("nosuch://h:1", "t", 500);
    tern_metadata *md = NULL;
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), TERN_ERR_PLUGIN);
    cr_assert(strstr(err, "metadata nosuch://h:1: libtern-meta-nosuch.so not found; tried: "),
              "%s", err);
    cr_assert(strstr(err, TEST_MD_PLUGIN_DIR), "names the directories searched: %s", err);
    cr_assert_null(strstr(err, "did you mean"), "nothing close to 'nosuch': %s", err);
    /* a misspelled scheme names the installed store of the closest name,
     * as a misspelled transport does */
    char *test_dirs[] = {TERN_META_TEST_DIR};
    c = test_md_config("badmagc://h:1", "t", 500);
    c.plugin_path = test_dirs;
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), TERN_ERR_PLUGIN);
    cr_assert(strstr(err, "libtern-meta-badmagc.so not found (did you mean 'badmagic'? "), "%s",
              err);
    c = test_md_config("redis", "t", 500);
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), TERN_ERR_CONFIG);
    c = test_md_config("../../x://h", "t", 500);
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), TERN_ERR_CONFIG, "%s", err);
}

/* ---- redis ---- */

static void two_clusters(const char *uri)
{
    /* Same store, two cluster ids: neither sees the other's segments. */
    tern_metadata *a = open_md(uri, "alpha"), *b = open_md(uri, "beta");
    char *v = descriptor("n:1", 5, 0x1000);
    cr_assert_eq(tern_metadata_publish(a, "n:1", v, err, sizeof err), 0, "%s", err);
    expect_not_found(b, "n:1");
    cr_assert(listed(a, "n:1"));
    cr_assert(!listed(b, "n:1"));
    char key[256];
    cr_assert_eq(tern_metadata_key(a, "n:1", key, sizeof key), 0);
    cr_assert_str_eq(key, "tern/alpha/segments/n:1");
    tern_metadata_unpublish(a, "n:1", err, sizeof err);
    free(v);
    tern_metadata_close(a);
    tern_metadata_close(b);
}

Test(redis, suite, .timeout = 60)
{
    test_store r = {0};
    test_redis_start(&r);
    char uri[64];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", r.port);
    tern_metadata *pub = open_md(uri, "t"), *rd = open_md(uri, "t");
    cr_assert_str_eq(tern_metadata_backend(pub), "redis");
    suite(pub, rd, "10.0.0.7:12001");
    two_clusters(uri);
    tern_metadata_close(pub);
    tern_metadata_close(rd);
    /* A database number selects another keyspace. */
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/3", r.port);
    pub = open_md(uri, "t");
    rd = open_md(uri, "t");
    suite(pub, rd, "[fe80::1]:12001");
    tern_metadata_close(pub);
    tern_metadata_close(rd);
    test_store_stop(&r);
}

Test(redis, down_store_fails_clearly_in_time, .timeout = 60)
{
    int port = test_free_port();
    char uri[64];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
    tern_config c = test_md_config(uri, "t", 800);
    tern_metadata *md = NULL;
    uint64_t t0 = tern_now_ms();
    int rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, uri) && strstr(err, "redis-server"), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS);
    /* Accepts connections but never answers. */
    int bh = black_hole(&port);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
    c = test_md_config(uri, "t", 800);
    t0 = tern_now_ms();
    rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_TIMEOUT, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, uri), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS, "gave up after the timeout");
    close(bh);
    if (!test_have_binary("redis-server"))
        cr_skip_test("redis-server not installed: the store-dies-mid-way part did not run");
    /* The store dies after open: the next call fails, in time. */
    test_store r = {0};
    test_redis_start(&r);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", r.port);
    c = test_md_config(uri, "t", 800);
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), 0, "%s", err);
    test_store_stop(&r);
    char *json = NULL;
    t0 = tern_now_ms();
    rc = tern_metadata_fetch(md, "a:1", &json, err, sizeof err);
    cr_assert(rc == TERN_ERR_CONNECT || rc == TERN_ERR_TIMEOUT, "%s: %s", tern_strerror(rc),
              err);
    cr_assert(strstr(err, uri), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS);
    tern_metadata_close(md);
}

/* ---- etcd ---- */

Test(etcd, suite, .timeout = 90)
{
    test_store e = {0};
    test_etcd_start(&e);
    char uri[128];
    /* The first endpoint is down: the plugin moves to the next. */
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d,127.0.0.1:%d", test_free_port(), e.port);
    tern_metadata *pub = open_md(uri, "t");
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d", e.port);
    tern_metadata *rd = open_md(uri, "t");
    cr_assert_str_eq(tern_metadata_backend(pub), "etcd");
    suite(pub, rd, "10.0.0.7:12001");
    two_clusters(uri);
    tern_metadata_close(pub);
    tern_metadata_close(rd);
    test_store_stop(&e);
}

Test(etcd, down_store_fails_clearly_in_time, .timeout = 60)
{
    int port = test_free_port();
    char uri[64];
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d", port);
    tern_config c = test_md_config(uri, "t", 800);
    tern_metadata *md = NULL;
    uint64_t t0 = tern_now_ms();
    int rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, uri) && strstr(err, "etcd is running"), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS);
    int bh = black_hole(&port);
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d", port);
    c = test_md_config(uri, "t", 800);
    t0 = tern_now_ms();
    rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_TIMEOUT, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, "timed out"), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS);
    close(bh);
}

/* A cluster none of whose members is up (every one refuses): no member is
 * electing, so the store is down and the open fails at once, not after the
 * election wait, and does not say a leader is being elected. */
Test(etcd, cluster_all_refused_fails_at_once_not_electing, .timeout = 60)
{
    char uri[96];
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d,127.0.0.1:%d", test_free_port(),
             test_free_port());
    tern_config c = test_md_config(uri, "t", 800);
    tern_metadata *md = NULL;
    uint64_t t0 = tern_now_ms();
    int rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, "etcd is running") && !strstr(err, "electing"), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, IN_TIME_MS);
}

/* A member that answers every request "503, leader changed", as etcd does
 * while its members elect a leader; closed by shutting its socket down. */
static void *answer_503(void *arg)
{
    int lfd = *(int *)arg;
    static const char body[] = "{\"message\":\"etcdserver: leader changed\"}";
    char buf[4096], head[256];
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        ssize_t n = recv(fd, buf, sizeof buf, 0); /* the request: small, one read */
        (void)n;
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
                          "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                          sizeof body - 1);
        if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) == hl)
            send(fd, body, sizeof body - 1, MSG_NOSIGNAL);
        close(fd);
    }
}

/* A 5xx answer is an election: the open is retried for the election wait
 * (not failed at once) and, when no leader comes, says so. */
Test(etcd, answer_5xx_is_waited_for_as_an_election, .timeout = 60)
{
    int port;
    int lfd = black_hole(&port);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, answer_503, &lfd), 0);
    char uri[64];
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d", port);
    tern_config c = test_md_config(uri, "t", 800);
    tern_metadata *md = NULL;
    int rc = tern_metadata_open(&c, &md, err, sizeof err);
    shutdown(lfd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(lfd);
    cr_assert_neq(rc, 0, "opened against a store that only answers 503");
    cr_assert(strstr(err, "electing a leader"), "%s", err);
}

/* A cluster whose members hold requests past the timeout (electing, here a
 * listener that never answers) and refuse (the member not up yet): the
 * open is retried rather than failed at once, and succeeds once a member
 * answers.  A single endpoint that times out still fails in time (above). */
typedef struct opener {
    tern_config c;
    tern_metadata *md;
    int rc;
    char err[1024];
} opener;

static void *open_main(void *arg)
{
    opener *o = arg;
    o->rc = tern_metadata_open(&o->c, &o->md, o->err, sizeof o->err);
    return NULL;
}

Test(etcd, members_that_hold_requests_are_waited_for, .timeout = 60)
{
    if (!test_have_binary("etcd"))
        cr_skip_test("etcd not installed (Debian package etcd-server)");
    int hold;
    int bh = black_hole(&hold);
    test_store e = {.port = test_free_port(), .peer_port = test_free_port()};
    char uri[128];
    snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d,127.0.0.1:%d", hold, e.port);
    opener o = {.c = test_md_config(uri, "t", 800)};
    pthread_t t;
    uint64_t t0 = tern_now_ms();
    cr_assert_eq(pthread_create(&t, NULL, open_main, &o), 0);
    usleep(1500 * 1000); /* past a whole round: the holder's timeout, the refusal */
    test_etcd_start(&e);
    pthread_join(t, NULL);
    cr_assert_eq(o.rc, 0, "opened %llu ms after the start: %s",
                 (unsigned long long)(tern_now_ms() - t0), o.err);
    tern_metadata_close(o.md);
    test_store_stop(&e);
    close(bh);
}

/* ---- plugin checks before any plugin code runs ---- */

static int open_with(const char *dir, const char *uri, char *msg, size_t len)
{
    char *dirs[] = {(char *)dir};
    tern_config c = test_md_config(uri, "t", 500);
    c.plugin_path = dirs;
    tern_metadata *md = NULL;
    int rc = tern_metadata_open(&c, &md, msg, len);
    cr_assert(rc != 0 || md, "%s", uri);
    if (!rc)
        tern_metadata_close(md);
    return rc;
}

static void check_refused(const char *uri, int code, const char *want)
{
    int rc = open_with(TERN_META_TEST_DIR, uri, err, sizeof err);
    cr_assert_eq(rc, code, "%s: %s (%s)", uri, tern_strerror(rc), err);
    cr_assert(strstr(err, want), "%s: \"%s\" lacks \"%s\"", uri, err, want);
}

Test(plugin, every_abi_check_is_made)
{
    /* the same loader and messages as a transport's (plugin_load.c), each
     * naming the file and what to check */
    check_refused("badmagic://h:1", TERN_ERR_ABI,
                  "libtern-meta-badmagic.so: symbol tern_metastore_v1 has wrong magic "
                  "0x0000000000001234 (expected 0x4154454d4e524554): not a tern metadata store "
                  "plugin");
    check_refused("badabi://h:1", TERN_ERR_ABI,
                  "libtern-meta-badabi.so: built for metadata store ABI major 2 (2.0), this tern "
                  "supports major 1: rebuild the plugin");
    check_refused("small://h:1", TERN_ERR_ABI, "smaller than the v1.0 layout");
    check_refused("noop://h:1", TERN_ERR_ABI,
                  "libtern-meta-noop.so: mandatory operation 'list' is NULL");
    check_refused("wrongscheme://h:1", TERN_ERR_ABI,
                  "the plugin calls itself 'redis', not 'wrongscheme': check the scheme of the "
                  "`metadata` URI");
    check_refused("nosym://h:1", TERN_ERR_PLUGIN,
                  "libtern-meta-nosym.so does not export the symbol tern_metastore_v1: not a "
                  "tern metadata store plugin");
    check_refused("openfail://h:1", TERN_ERR_CONNECT,
                  "metadata openfail://h:1: test plugin refuses openfail://h:1");
    /* A file that is not a shared object. */
    char dir[] = "/tmp/tern-meta-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/libtern-meta-garbage.so", dir);
    FILE *f = fopen(path, "w");
    fputs("not an ELF file\n", f);
    fclose(f);
    int rc = open_with(dir, "garbage://h:1", err, sizeof err);
    unlink(path);
    rmdir(dir);
    cr_assert_eq(rc, TERN_ERR_PLUGIN, "%s", err);
    cr_assert(strstr(err, "dlopen failed"), "%s", err);
}

/* An ABI 1.0 store (no put_ttl in its struct_size) gets the core's default
 * put_ttl, which answers "not supported": publishing falls back to put and
 * the keep-alive to get-then-put.  The plugin's own put_ttl, in memory past
 * struct_size, fails every call: reading it would fail the publish. */
Test(plugin, abi_1_0_store_gets_the_default_put_ttl)
{
    char *dirs[] = {TERN_META_TEST_DIR};
    tern_config c = test_md_config("v10://h:1", "t", 500);
    c.plugin_path = dirs;
    tern_metadata *md = NULL;
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_metadata_publish(md, "seg", "{\"name\":\"seg\"}", err, sizeof err), 0,
                 "%s", err);
    tern_metadata_set_keepalive(md, 20, 1);
    uint64_t t0 = tern_now_ms();
    while (tern_metadata_keepalive_rounds(md) < 2 && tern_now_ms() - t0 < 20000)
        usleep(10000);
    cr_assert_geq(tern_metadata_keepalive_rounds(md), 2, "the keep-alive runs without put_ttl");
    tern_metadata_close(md);
}

Test(plugin, found_through_env_path)
{
    setenv("TERN_PLUGIN_PATH", "/nonexistent:" TERN_META_TEST_DIR, 1);
    int rc = open_with("/also-nonexistent", "badmagic://h:1", err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_ABI, "%s", err);
    unsetenv("TERN_PLUGIN_PATH");
}

/* The search order is a transport's: $TERN_PLUGIN_PATH, then plugin_path
 * (docs/plugins.md).  plugin_path holds a garbage file of the same name:
 * reaching it first would fail with "dlopen failed" instead. */
Test(plugin, env_path_is_searched_before_plugin_path)
{
    char dir[] = "/tmp/tern-meta-XXXXXX", path[128];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/libtern-meta-badmagic.so", dir);
    FILE *f = fopen(path, "w");
    fputs("not an ELF file\n", f);
    fclose(f);
    setenv("TERN_PLUGIN_PATH", TERN_META_TEST_DIR, 1);
    int rc = open_with(dir, "badmagic://h:1", err, sizeof err);
    unsetenv("TERN_PLUGIN_PATH");
    unlink(path);
    rmdir(dir);
    cr_assert_eq(rc, TERN_ERR_ABI, "%s", err);
    cr_assert(strstr(err, TERN_META_TEST_DIR "/libtern-meta-badmagic.so"), "%s", err);
}
