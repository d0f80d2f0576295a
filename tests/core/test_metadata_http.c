/* tests/core/test_metadata_http.c: the http:// metadata store against a real
 * HTTP server started by the test (tests/support/helpers/http_metadata_server.py,
 * GET/PUT/DELETE <path>?key=K): publish, fetch, update, unpublish, not
 * found, a server that is down or black-holed, a wrong path, and two engines
 * that find each other through it and move verified bytes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "peer/metadata.h"
#include "stores.h"
#include "tern/errors.h"
#include "tern/tern.h"
#include "base/util.h"

static char err[1024];

/* Start the server; its first stdout line is "port N". */
static pid_t start_server(int *port)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0)
        cr_skip_test("python3 not installed: the HTTP metadata server cannot run");
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        close(fds[0]);
        execlp("python3", "python3", TERN_TEST_DIR "/support/helpers/http_metadata_server.py",
               (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[64] = "";
    cr_assert_not_null(fgets(line, sizeof line, f), "the HTTP metadata server did not start");
    fclose(f);
    cr_assert_eq(sscanf(line, "port %d", port), 1, "unexpected first line: %s", line);
    return pid;
}

static void stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* A handle on uri; the test fails with err if it does not open. */
static tern_metadata *open_md(const char *uri)
{
    return test_md_open(uri, "t", err, sizeof err);
}

static void expect_not_found(tern_metadata *md, const char *seg)
{
    char *json = NULL;
    int rc = tern_metadata_fetch(md, seg, &json, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_NOT_FOUND, "%s: %s (%s)", seg, tern_strerror(rc), err);
    cr_assert_null(json);
}

Test(http, publish_fetch_update_unpublish, .timeout = 60)
{
    int port;
    pid_t pid = start_server(&port);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/metadata", port);
    tern_metadata *pub = open_md(uri);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d", port); /* the default path */
    tern_metadata *rd = open_md(uri);
    cr_assert_str_eq(tern_metadata_backend(pub), "http");
    const char *seg = "10.0.0.7:12001";
    expect_not_found(rd, seg);
    /* Descriptors are opaque to the store: any JSON text round-trips. */
    const char *v1 = "{\"name\":\"10.0.0.7:12001\",\"v\":1,\"s\":\"a&b=c?d\"}";
    cr_assert_eq(tern_metadata_publish(pub, seg, v1, err, sizeof err), 0, "%s", err);
    char *got = NULL;
    cr_assert_eq(tern_metadata_fetch(rd, seg, &got, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(got, v1);
    free(got);
    const char *v2 = "{\"name\":\"10.0.0.7:12001\",\"v\":2}";
    cr_assert_eq(tern_metadata_publish(pub, seg, v2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_metadata_fetch(rd, seg, &got, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(got, v2);
    free(got);
    cr_assert_eq(tern_metadata_unpublish(pub, seg, err, sizeof err), 0, "%s", err);
    expect_not_found(rd, seg);
    /* Unpublishing what is not there is not an error (404 from DELETE). */
    cr_assert_eq(tern_metadata_unpublish(pub, seg, err, sizeof err), 0, "%s", err);
    tern_metadata_close(pub);
    tern_metadata_close(rd);
    stop(pid);
}

static int on_segment(void *arg, const char *name)
{
    (void)arg;
    (void)name;
    return 0;
}

Test(http, listing_is_not_supported_and_says_so, .timeout = 60)
{
    int port;
    pid_t pid = start_server(&port);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/metadata", port);
    tern_metadata *md = open_md(uri);
    int rc = tern_metadata_list(md, on_segment, NULL, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_NOT_SUPPORTED, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, "cannot list"), "%s", err);
    tern_metadata_close(md);
    stop(pid);
}

Test(http, down_wrong_path_and_black_hole_fail_clearly_in_time, .timeout = 60)
{
    /* Nothing listens. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t sl = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(fd, (struct sockaddr *)&a, &sl);
    int port = ntohs(a.sin_port);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/metadata", port);
    tern_config c = test_md_config(uri, "t", 800);
    tern_metadata *md = NULL;
    uint64_t t0 = tern_now_ms();
    int rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "%s: %s", tern_strerror(rc), err);
    cr_assert(strstr(err, "metadata server is running"), "%s", err);
    cr_assert_lt(tern_now_ms() - t0, 3000);
    /* It listens but never answers: a timeout, in time. */
    cr_assert_eq(listen(fd, 16), 0);
    t0 = tern_now_ms();
    rc = tern_metadata_open(&c, &md, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_TIMEOUT, "%s: %s", tern_strerror(rc), err);
    cr_assert_lt(tern_now_ms() - t0, 3000);
    close(fd);
    /* A real HTTP server that serves another path: refused at open. */
    pid_t pid = start_server(&port);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/other", port);
    c = test_md_config(uri, "t", 2000);
    tern_metadata *m2 = NULL;
    rc = tern_metadata_open(&c, &m2, err, sizeof err);
    /* The server answers 404 for an unknown path too, which a GET of an
     * absent key also gives: the first publish then fails, naming it. */
    if (rc == 0) {
        rc = tern_metadata_publish(m2, "10.0.0.7:1", "{}", err, sizeof err);
        cr_assert_lt(rc, 0, "PUT to a path the server does not serve must fail");
        cr_assert(strstr(err, "HTTP 404") && strstr(err, "/other"), "%s", err);
        tern_metadata_close(m2);
    }
    stop(pid);
}

/* Two engines find each other through the HTTP store and move bytes. */
Test(http, two_engines_move_verified_bytes, .timeout = 120)
{
    int port;
    pid_t pid = start_server(&port);
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "server_name: \"127.0.0.1:0\"\n"
             "metadata: \"http://127.0.0.1:%d/metadata\"\n"
             "cluster_id: \"http-test\"\n"
             "transports:\n  - name: tcp\n",
             port);
    tern_engine *A = tern_engine_create_from_yaml(yaml, "A", err, sizeof err);
    cr_assert_not_null(A, "%s", err);
    tern_engine *B = tern_engine_create_from_yaml(yaml, "B", err, sizeof err);
    cr_assert_not_null(B, "%s", err);
    size_t n = 1 << 20;
    unsigned char *la = malloc(n), *rb = malloc(n);
    for (size_t i = 0; i < n; i++) {
        la[i] = (unsigned char)(i * 7 + 3);
        rb[i] = 0;
    }
    cr_assert_eq(tern_register_memory(A, la, n, NULL), 0, "%s", tern_engine_last_error(A));
    cr_assert_eq(tern_register_memory(B, rb, n, NULL), 0, "%s", tern_engine_last_error(B));
    tern_segment_id seg = tern_segment_open(A, tern_engine_server_name(B));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(A));
    tern_batch *b = tern_batch_alloc(A, 1);
    tern_request r = {TERN_WRITE, la, seg, (uint64_t)(uintptr_t)rb, n, 0};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    int rc = tern_batch_wait(b, 30000);
    cr_assert_eq(rc, 0, "%s", tern_batch_error(b, 0));
    cr_assert_eq(memcmp(la, rb, n), 0, "bytes differ after the write");
    cr_assert_eq(tern_batch_free(b), 0);
    char aname[128];
    snprintf(aname, sizeof aname, "%s", tern_engine_server_name(A));
    tern_engine *C = tern_engine_create_from_yaml(yaml, "C", err, sizeof err);
    cr_assert_not_null(C, "%s", err);
    cr_assert_geq(tern_segment_open(C, aname), 0, "%s", tern_engine_last_error(C));
    tern_engine_destroy(A);
    /* Destroy unpublishes: a fresh engine no longer finds A. */
    tern_engine *D = tern_engine_create_from_yaml(yaml, "D", err, sizeof err);
    cr_assert_not_null(D, "%s", err);
    cr_assert_lt(tern_segment_open(D, aname), 0, "A's segment is still published");
    cr_assert(strstr(tern_engine_last_error(D), aname), "%s", tern_engine_last_error(D));
    tern_engine_destroy(D);
    tern_engine_destroy(B);
    tern_engine_destroy(C);
    free(la);
    free(rb);
    stop(pid);
}

/* A store may hold any value, but a descriptor fetched from it is bounded
 * as one fetched over the handshake is (TERN_METASTORE_MAX_VALUE = the
 * handshake's max frame, 1 MiB): a 2 MiB value is refused naming the limit,
 * while a legitimate descriptor beside it is still fetched intact. */
Test(http, descriptor_larger_than_the_handshake_limit_is_refused, .timeout = 60)
{
    int port;
    pid_t pid = start_server(&port);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/metadata", port);
    tern_metadata *md = open_md(uri);
    size_t n = 2u << 20;
    char *big = malloc(n + 16);
    cr_assert_not_null(big);
    memcpy(big, "{\"pad\":\"", 8);
    memset(big + 8, 'x', n);
    memcpy(big + 8 + n, "\"}", 3);
    cr_assert_eq(tern_metadata_publish(md, "10.0.0.8:1", big, err, sizeof err), 0, "%s", err);
    const char *ok = "{\"name\":\"10.0.0.9:1\",\"v\":1}";
    cr_assert_eq(tern_metadata_publish(md, "10.0.0.9:1", ok, err, sizeof err), 0, "%s", err);
    char *got = NULL;
    int rc = tern_metadata_fetch(md, "10.0.0.8:1", &got, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_PROTOCOL, "a 2 MiB descriptor was accepted: %s (%s)",
                 tern_strerror(rc), err);
    cr_assert_null(got);
    cr_assert(strstr(err, "1 MiB"), "the refusal does not name the limit: %s", err);
    cr_assert_eq(tern_metadata_fetch(md, "10.0.0.9:1", &got, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(got, ok);
    free(got);
    free(big);
    tern_metadata_close(md);
    stop(pid);
}

/* ---- a store that hangs -------------------------------------------------------- */

#define HANG_LEN (64u << 10)

typedef struct hang_xfer {
    pthread_t t;
    atomic_int stop;
    tern_engine *e;
    tern_segment_id seg;
    uint8_t *local, *remote;
    long worst_ms, n, bad;
    char why[512];
} hang_xfer;

/* WRITEs of HANG_LEN from e to the peer, each verified on arrival, timed. */
static void *hang_xfer_main(void *arg)
{
    hang_xfer *x = arg;
    tern_batch *b = tern_batch_alloc(x->e, 1);
    for (unsigned round = 0; b && !atomic_load(&x->stop); round++) {
        memset(x->local, (int)(round & 0xff), HANG_LEN);
        tern_request w = {TERN_WRITE, x->local, x->seg, (uint64_t)(uintptr_t)x->remote, HANG_LEN,
                          0};
        uint64_t t0 = tern_now_ms();
        int rc = tern_batch_submit(b, &w, 1) == 1 ? tern_batch_wait(b, 10000) : -1;
        long ms = (long)(tern_now_ms() - t0);
        if (rc != 0 || memcmp(x->local, x->remote, HANG_LEN) != 0) {
            x->bad++;
            snprintf(x->why, sizeof x->why, "%s", rc ? tern_batch_error(b, 0) : "bytes differ");
        }
        x->worst_ms = ms > x->worst_ms ? ms : x->worst_ms;
        x->n++;
        tern_batch_reset(b);
        usleep(5000);
    }
    if (b)
        tern_batch_free(b);
    return NULL;
}

/* The store stops answering (the server is stopped: the kernel still
 * accepts its connections): a register and an unregister on an engine
 * return at once, its transfers go on (each < 100 ms, verified), and its
 * descriptor reaches the store once the store answers again. */
Test(http, hanging_store_stalls_neither_register_nor_transfers, .timeout = 120)
{
    int port;
    pid_t pid = start_server(&port);
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "server_name: \"127.0.0.1:0\"\n"
             "metadata: \"http://127.0.0.1:%d/metadata\"\n"
             "cluster_id: \"hang-test\"\n"
             "connect_timeout_ms: 3000\n"
             "io_timeout_ms: 3000\n"
             "transports:\n  - name: tcp\n",
             port);
    tern_engine *X = tern_engine_create_from_yaml(yaml, "X", err, sizeof err);
    cr_assert_not_null(X, "%s", err);
    tern_engine *P = tern_engine_create_from_yaml(yaml, "P", err, sizeof err);
    cr_assert_not_null(P, "%s", err);
    static hang_xfer x;
    memset(&x, 0, sizeof x);
    x.e = X;
    x.local = malloc(HANG_LEN);
    x.remote = calloc(1, HANG_LEN);
    uint8_t *extra = malloc(1 << 20);
    cr_assert_eq(tern_register_memory(X, x.local, HANG_LEN, NULL), 0, "%s",
                 tern_engine_last_error(X));
    cr_assert_eq(tern_register_memory(P, x.remote, HANG_LEN, NULL), 0, "%s",
                 tern_engine_last_error(P));
    x.seg = tern_segment_open(X, tern_engine_server_name(P));
    cr_assert_geq(x.seg, 0, "%s", tern_engine_last_error(X));
    cr_assert_eq(kill(pid, SIGSTOP), 0);
    cr_assert_eq(pthread_create(&x.t, NULL, hang_xfer_main, &x), 0);
    usleep(200 * 1000);
    uint64_t t0 = tern_now_ms();
    int rc = tern_register_memory(X, extra, 1 << 20, NULL);
    long reg_ms = (long)(tern_now_ms() - t0);
    cr_assert_eq(rc, 0, "register failed while the store hangs: %s", tern_engine_last_error(X));
    usleep(1500 * 1000); /* the store write hangs meanwhile */
    t0 = tern_now_ms();
    rc = tern_unregister_memory(X, extra);
    long unreg_ms = (long)(tern_now_ms() - t0);
    cr_assert_eq(rc, 0, "unregister failed while the store hangs: %s",
                 tern_engine_last_error(X));
    usleep(1000 * 1000);
    atomic_store(&x.stop, 1);
    pthread_join(x.t, NULL);
    cr_assert_eq(kill(pid, SIGCONT), 0);
    cr_log_info("store hanging: register %ld ms, unregister %ld ms; %ld transfers, the longest "
                "%ld ms", reg_ms, unreg_ms, x.n, x.worst_ms);
    cr_assert_eq(x.bad, 0, "a transfer failed during the hang: %s", x.why);
    cr_assert_gt(x.n, 10, "too few transfers ran during the hang");
    cr_assert_lt(reg_ms, 1000, "register took %ld ms while the store hangs", reg_ms);
    cr_assert_lt(unreg_ms, 1000, "unregister took %ld ms while the store hangs", unreg_ms);
    cr_assert_lt(x.worst_ms, 100, "a transfer took %ld ms while the store hangs", x.worst_ms);
    /* The store answers again: the newest descriptor (one buffer, after the
     * unregister) reaches it, retried in the background. */
    char uri[128], name[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%d/metadata", port);
    snprintf(name, sizeof name, "%s", tern_engine_server_name(X));
    tern_config c = test_md_config(uri, "hang-test", 3000);
    tern_metadata *md = NULL;
    cr_assert_eq(tern_metadata_open(&c, &md, err, sizeof err), 0, "%s", err);
    char *mine = NULL;
    cr_assert_eq(tern_segment_descriptor(X, TERN_LOCAL_SEGMENT, &mine), 0);
    int same = 0;
    for (int i = 0; i < 150 && !same; i++) {
        char *got = NULL;
        if (tern_metadata_fetch(md, name, &got, err, sizeof err) == 0)
            same = strcmp(got, mine) == 0;
        free(got);
        if (!same)
            usleep(100 * 1000);
    }
    cr_assert(same, "the store never got the engine's newest descriptor");
    free(mine);
    tern_metadata_close(md);
    tern_engine_destroy(X);
    tern_engine_destroy(P);
    free(x.local);
    free(x.remote);
    free(extra);
    stop(pid);
}
