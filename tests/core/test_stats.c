#define _GNU_SOURCE /* engine.h needs pthread_rwlock_t */
/* Statistics (tern_engine_stats) between two engines in one process over
 * the memcpy transport: requests and bytes by direction per engine,
 * transport and peer, the latency histogram, failures by error, retries
 * and refetches against a peer that went away, `stats: false`; the
 * exposition text (label escaping, buckets) and the endpoint's HTTP
 * answers and idle deadline. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine.h"
#include "obs/metrics.h"
#include "obs/metrics_text.h"
#include "obs/stats.h"
#include "base/util.h"
#include "tern/tern.h"

#define MiB (1024u * 1024u)
#define BUF (4u * MiB)

static const char *yaml_on = "server_name: 127.0.0.1:0\n"
                             "transports:\n"
                             "  - name: memcpy\n"
                             "retries: 2\n"
                             "log_level: error\n";
static const char *yaml_off = "server_name: 127.0.0.1:0\n"
                              "transports:\n"
                              "  - name: memcpy\n"
                              "stats: false\n"
                              "log_level: error\n";

static tern_engine *A, *B;
static uint8_t *la, *rb;
static tern_segment_id seg;

static void pair(const char *yaml)
{
    char err[1024] = "";
    A = tern_engine_create_from_yaml(yaml, "A", err, sizeof err);
    cr_assert_not_null(A, "%s", err);
    B = tern_engine_create_from_yaml(yaml, "B", err, sizeof err);
    cr_assert_not_null(B, "%s", err);
    la = calloc(1, BUF);
    rb = calloc(1, BUF);
    cr_assert_eq(tern_register_memory(A, la, BUF, NULL), 0, "%s", tern_engine_last_error(A));
    cr_assert_eq(tern_register_memory(B, rb, BUF, NULL), 0, "%s", tern_engine_last_error(B));
    seg = tern_segment_open(A, tern_engine_server_name(B));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(A));
}

static void unpair(void)
{
    tern_engine_destroy(A);
    tern_engine_destroy(B);
    A = B = NULL;
    free(la);
    free(rb);
}

static int run(tern_opcode op, uint64_t off, uint64_t len, int n)
{
    tern_batch *b = tern_batch_alloc(A, (size_t)n);
    cr_assert_not_null(b);
    for (int i = 0; i < n; i++) {
        tern_request r = {.opcode = op, .local = la + off, .segment = seg,
                          .remote = (uintptr_t)rb + off, .length = len};
        cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    }
    int rc = tern_batch_wait(b, 30000);
    cr_assert_eq(tern_batch_free(b), 0);
    return rc;
}

/* The sets by kind, copied out of the walk. */
typedef struct seen {
    tern_stats engine, xport, peer;
    char xname[64], pname[300];
    int nengine, nxport, npeer;
} seen;

static int grab(const tern_stats *s, void *arg)
{
    seen *v = arg;
    cr_assert_eq(s->size, sizeof *s, "size %u", s->size);
    if (s->kind == TERN_STATS_ENGINE) {
        v->engine = *s;
        v->nengine++;
    } else if (s->kind == TERN_STATS_TRANSPORT) {
        v->xport = *s;
        snprintf(v->xname, sizeof v->xname, "%s", s->name);
        v->nxport++;
    } else {
        v->peer = *s;
        snprintf(v->pname, sizeof v->pname, "%s", s->name);
        v->npeer++;
    }
    return 0;
}

static seen stats_of(tern_engine *e)
{
    seen v;
    memset(&v, 0, sizeof v);
    cr_assert_eq(tern_engine_stats(e, grab, &v), 0);
    return v;
}

static void same_counts(const tern_stats *s, const char *who)
{
    cr_expect_eq(s->ops[TERN_WRITE], 3, "%s: write ops %llu", who,
                 (unsigned long long)s->ops[TERN_WRITE]);
    cr_expect_eq(s->ops[TERN_READ], 2, "%s: read ops", who);
    cr_expect_eq(s->bytes[TERN_WRITE], 3ull * MiB, "%s: write bytes %llu", who,
                 (unsigned long long)s->bytes[TERN_WRITE]);
    cr_expect_eq(s->bytes[TERN_READ], 2ull * 65536, "%s: read bytes", who);
    cr_expect_eq(s->latency_count[TERN_WRITE], 3, "%s: write latencies", who);
    cr_expect_eq(s->latency_count[TERN_READ], 2, "%s: read latencies", who);
    cr_expect_gt(s->latency_sum_ns[TERN_WRITE], 0, "%s: latency sum", who);
    cr_expect_eq(s->failures[TERN_WRITE] + s->failures[TERN_READ], 0, "%s: failures", who);
}

Test(stats, counts_per_engine_transport_and_peer, .fini = unpair)
{
    pair(yaml_on);
    cr_assert_eq(run(TERN_WRITE, 0, MiB, 3), 0, "%s", tern_engine_last_error(A));
    cr_assert_eq(run(TERN_READ, MiB, 65536, 2), 0, "%s", tern_engine_last_error(A));
    seen v = stats_of(A);
    cr_assert_eq(v.nengine, 1);
    cr_assert_eq(v.nxport, 1);
    cr_assert_eq(v.npeer, 1);
    cr_expect_str_eq(v.xname, "memcpy");
    cr_expect_str_eq(v.pname, tern_engine_server_name(B));
    same_counts(&v.engine, "engine");
    same_counts(&v.xport, "transport");
    same_counts(&v.peer, "peer");
    cr_expect_eq(v.engine.in_flight, 0);
    cr_expect_eq(v.peer.in_flight, 0);
    /* the target initiated nothing: its engine set is empty */
    seen t = stats_of(B);
    cr_expect_eq(t.engine.ops[TERN_WRITE] + t.engine.ops[TERN_READ], 0);
    cr_expect_eq(t.npeer, 0);
}

/* One batch alternating READ and WRITE: every completed request changes
 * the batch's accumulator key; the counts are in once tern_batch_wait
 * returned, before the batch is freed. */
Test(stats, mixed_batch_counted_by_wait, .fini = unpair)
{
    pair(yaml_on);
    tern_batch *b = tern_batch_alloc(A, 6);
    for (int i = 0; i < 6; i++) {
        tern_request r = {.opcode = i & 1 ? TERN_READ : TERN_WRITE, .local = la + i * 8192,
                          .segment = seg, .remote = (uintptr_t)rb + i * 8192,
                          .length = 4096};
        cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    }
    cr_assert_eq(tern_batch_wait(b, 30000), 0, "%s", tern_engine_last_error(A));
    seen v = stats_of(A);
    cr_expect_eq(v.peer.ops[TERN_READ], 3);
    cr_expect_eq(v.peer.ops[TERN_WRITE], 3);
    cr_expect_eq(v.xport.bytes[TERN_READ], 3 * 4096);
    cr_expect_eq(v.engine.bytes[TERN_WRITE], 3 * 4096);
    cr_expect_eq(v.engine.in_flight, 0);
    cr_assert_eq(tern_batch_reset(b), 0);
    cr_assert_eq(tern_batch_free(b), 0);
    v = stats_of(A);
    cr_expect_eq(v.peer.ops[TERN_READ] + v.peer.ops[TERN_WRITE], 6, "nothing counted twice");
}

Test(stats, failures_by_error, .fini = unpair)
{
    pair(yaml_on);
    /* INVALID: the remote range is outside what the peer registered */
    tern_batch *b = tern_batch_alloc(A, 1);
    tern_request r = {.opcode = TERN_WRITE, .local = la, .segment = seg,
                      .remote = (uintptr_t)rb + BUF, .length = 4096};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    cr_assert_neq(tern_batch_wait(b, 30000), 0);
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    cr_assert_eq(tern_batch_free(b), 0);
    seen v = stats_of(A);
    cr_expect_eq(v.engine.failures[TERN_WRITE], 1);
    cr_expect_eq(v.peer.failures[TERN_WRITE], 1);
    cr_expect_eq(v.engine.errors[-st.error], 1, "errors[%d]", -st.error);
    cr_expect_eq(v.engine.ops[TERN_WRITE], 0);
    cr_expect_eq(v.engine.in_flight, 0);
}

Test(stats, retries_and_refetches_against_a_peer_gone, .fini = unpair)
{
    pair(yaml_on);
    tern_engine_destroy(B); /* before any connect: every attempt fails */
    B = tern_engine_create_from_yaml(yaml_on, "B2", NULL, 0);
    cr_assert_not_null(B);
    usleep(150 * 1000); /* past the refetch rate limit (100 ms from the open) */
    int rc = run(TERN_WRITE, 0, 4096, 1);
    cr_assert_neq(rc, 0);
    seen v = stats_of(A);
    cr_log_info("failed with %s: %s; retries %llu, refetches %llu", tern_strerror(rc),
                tern_engine_last_error(A), (unsigned long long)v.engine.retries,
                (unsigned long long)v.engine.refetches);
    cr_expect_eq(v.engine.failures[TERN_WRITE], 1);
    cr_expect_eq(v.peer.failures[TERN_WRITE], 1);
    cr_expect_eq(v.engine.errors[-rc], 1, "errors[%d]", -rc);
    cr_expect_eq(v.engine.retries, 2, "retries: 2 in the configuration");
    cr_expect_eq(v.peer.retries, 2);
    cr_expect_geq(v.peer.refetches, 1);
    cr_expect_eq(v.engine.in_flight, 0);
}

Test(stats, off_counts_nothing, .fini = unpair)
{
    pair(yaml_off);
    cr_assert_eq(run(TERN_WRITE, 0, MiB, 2), 0, "%s", tern_engine_last_error(A));
    seen v = stats_of(A);
    cr_expect_eq(v.engine.ops[TERN_WRITE], 0);
    cr_expect_eq(v.engine.bytes[TERN_WRITE], 0);
    cr_expect_eq(v.xport.bytes[TERN_WRITE], 0);
    cr_expect_eq(v.npeer, 0, "no peer set is made when counting is off");
}

Test(stats, exposition_text)
{
    tern_stats_obj *s = tern_stats_create(1);
    tern_stats_set_transport(s, 0, "tcp");
    tern_stat_set *p = tern_stats_peer(s, "we\"ird\\name\nx");
    cr_assert_not_null(p);
    cr_assert_eq(tern_stats_peer(s, "we\"ird\\name\nx"), p, "one set per name");
    tern_stats_started(s, p, 1);
    tern_stats_end(s, p, 0, TERN_READ, 1, 0, 1500, 100);            /* 1.5 us: le 2 us */
    tern_stats_end(s, p, 0, TERN_WRITE, 0, TERN_ERR_TIMEOUT, 0, 0); /* never started */
    size_t len = 0;
    char *t = tern_metrics_render(s, "eng", &len);
    cr_assert_not_null(t);
    cr_assert_eq(strlen(t), len);
    cr_expect(strstr(t, "tern_peer_transfer_bytes_total{peer=\"we\\\"ird\\\\name\\nx\","
                        "op=\"read\"} 100\n"), "%s", t);
    cr_expect(strstr(t, "tern_transfer_duration_seconds_bucket{op=\"read\",le=\"1e-06\"} 0\n"));
    cr_expect(strstr(t, "tern_transfer_duration_seconds_bucket{op=\"read\",le=\"2e-06\"} 1\n"));
    cr_expect(strstr(t, "tern_transfer_duration_seconds_bucket{op=\"read\",le=\"+Inf\"} 1\n"));
    cr_expect(strstr(t, "tern_transfer_duration_seconds_count{op=\"read\"} 1\n"));
    cr_expect(strstr(t, "tern_transfer_errors_total{error=\"timeout\"} 1\n"), "%s", t);
    cr_expect(strstr(t, "tern_transport_transfer_requests_total{transport=\"tcp\",op=\"read\"} 1\n"));
    cr_expect(strstr(t, "tern_requests_in_flight 0\n"), "in flight: started once, ended once");
    cr_expect(strstr(t, "# TYPE tern_peer_transfer_duration_seconds histogram\n"));
    free(t);
    tern_stats_free(s);
}

/* ---- the endpoint --------------------------------------------------------------- */

static int dial(const char *addr)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* The whole answer to req (the server closes after it). */
static void ask(const char *addr, const char *req, char *out, size_t outlen)
{
    int fd = dial(addr);
    cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t n = 0;
    ssize_t r;
    while (n + 1 < outlen && (r = read(fd, out + n, outlen - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(fd);
}

Test(stats, endpoint_answers_and_drops_idle_clients)
{
    tern_stats_obj *s = tern_stats_create(1);
    tern_metrics *m = NULL;
    char err[256] = "";
    cr_assert_eq(tern_metrics_start("127.0.0.1:0", s, "eng", &m, err, sizeof err), 0, "%s", err);
    const char *addr = tern_metrics_address(m);
    static char out[1 << 16];
    ask(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof out);
    cr_expect(!strncmp(out, "HTTP/1.1 200 OK\r\n", 17), "%.80s", out);
    cr_expect(strstr(out, "Content-Type: text/plain; version=0.0.4"));
    cr_expect(strstr(out, "tern_engine_info{engine=\"eng\"} 1\n"));
    ask(addr, "GET /other HTTP/1.1\r\n\r\n", out, sizeof out);
    cr_expect(!strncmp(out, "HTTP/1.1 404", 12), "%.80s", out);
    ask(addr, "POST /metrics HTTP/1.1\r\n\r\n", out, sizeof out);
    cr_expect(!strncmp(out, "HTTP/1.1 405", 12), "%.80s", out);
    /* a client that sends nothing is closed at the idle deadline (5 s) */
    int fd = dial(addr);
    uint64_t t0 = tern_now_ms();
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 20000), 1, "the idle connection was not closed");
    char c;
    cr_expect_eq(read(fd, &c, 1), 0);
    uint64_t took = tern_now_ms() - t0;
    cr_log_info("idle connection closed after %llu ms", (unsigned long long)took);
    cr_expect_geq(took, 4000);
    close(fd);
    tern_metrics_stop(m);
    tern_stats_free(s);
}
