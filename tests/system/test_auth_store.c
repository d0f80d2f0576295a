/* tests/system/test_auth_store.c: with auth_secret_file, no one without the
 * secret steers the data (docs/protocol.md, "Signed descriptors" and the
 * identity proofs).  Each case is an attack with a legitimate peer moving
 * verified data beside it:
 *  - store_mooncake_entry_refused*: a third party that can write the store
 *    (a real redis-server) rewrites the victim's key with a Mooncake-shaped
 *    descriptor and a tern descriptor whose tcp entry says "wire":
 *    "mooncake", both pointing at a socket of its own, and (with an engine
 *    of the same cluster running a Mooncake-format port) that engine's
 *    descriptor: zero bytes reach them, the initiator gets TERN_ERR_AUTH
 *    naming the segment; with and without that engine in the cluster;
 *  - store_other_engines_descriptor_refused: the victim's key holds another
 *    engine's (T2's) signed descriptor, in redis, etcd and http: zero bytes land
 *    in T2;
 *  - store_descriptor_without_shm_refused: the victim's signed descriptor
 *    with shm dropped (signature kept): refused;
 *  - store_older_signed_descriptor_refused: an older signed descriptor of
 *    the victim put back (a replay) is refused on refetch;
 *  - shm_relayed_handshake_refused*: a plain socket program X posing as a
 *    segment relays A's handshake to engine B (shm only), with and without
 *    a secret, and rewriting the names it relays: zero bytes written into B,
 *    even though A already holds an endpoint to B.
 * Engines run in this process; the stores are started by support/stores.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/engine_state.h"
#include "stores.h"
#include "tern/errors.h"
#include "tern/metastore.h"
#include "tern/tern.h"

#define CLUSTER "auth-store"
#define BUF (1u << 20)

TestSuite(auth_store, .timeout = 120);

/* ---- a store writer: the store's own plugin, no secret ---------------------------- */

typedef struct rawstore {
    void *dl;
    const tern_metastore *ops;
    void *st;
} rawstore;

static void raw_open(rawstore *s, const char *scheme, const char *uri)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/lib/tern/libtern-meta-%s.so", TERN_BUILD_DIR, scheme);
    s->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(s->dl, "%s", dlerror());
    s->ops = dlsym(s->dl, TERN_METASTORE_SYMBOL);
    cr_assert_not_null(s->ops);
    cr_assert_eq(s->ops->open(uri, 2000, &s->st, err, sizeof err), 0, "%s", err);
}

static void raw_close(rawstore *s)
{
    s->ops->close(s->st);
    dlclose(s->dl);
}

static void key_of(const char *seg, char *key, size_t n)
{
    snprintf(key, n, "tern/" CLUSTER "/segments/%s", seg);
}

static char *store_get(rawstore *s, const char *seg)
{
    char key[512], err[512] = "", *v = NULL;
    size_t len = 0;
    key_of(seg, key, sizeof key);
    cr_assert_eq(s->ops->get(s->st, key, &v, &len, err, sizeof err), 0, "%s: %s", key, err);
    char *z = strndup(v, len);
    free(v);
    return z;
}

static void store_set(rawstore *s, const char *seg, const char *value)
{
    char key[512], err[512] = "";
    key_of(seg, key, sizeof key);
    cr_assert_eq(s->ops->put(s->st, key, value, strlen(value), err, sizeof err), 0, "%s: %s",
                 key, err);
}

/* What a store writer can read without the secret: the descriptor inside a
 * signed envelope (or the descriptor itself, without signing). */
static json_object *inner_of(const char *text)
{
    json_object *o = json_tokener_parse(text), *d;
    cr_assert_not_null(o, "not JSON: %s", text);
    if (json_object_object_get_ex(o, "descriptor", &d)) {
        json_object *in = json_tokener_parse(json_object_get_string(d));
        json_object_put(o);
        o = in;
    }
    return o;
}

/* ---- engines ------------------------------------------------------------------------- */

static char *secret_file(void)
{
    char *path = strdup("/tmp/tern-auth-store-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *s = "the-cluster-secret-of-this-test\n";
    cr_assert_eq(write(fd, s, strlen(s)), (ssize_t)strlen(s));
    close(fd);
    return path;
}

/* An engine on metadata uri; xports "tcp", "shm" or "shm,tcp"; mooncake:
 * with a Mooncake-format port. */
static tern_engine *engine_yaml(const char *uri, const char *secret, const char *xports,
                                int mooncake, const char *extra);

static tern_engine *engine_on(const char *uri, const char *secret, const char *xports,
                              int mooncake)
{
    return engine_yaml(uri, secret, xports, mooncake, "");
}

/* extra: more top-level YAML lines. */
static tern_engine *engine_yaml(const char *uri, const char *secret, const char *xports,
                                int mooncake, const char *extra)
{
    char yaml[2048], e[1024] = "", list[256] = "";
    char copy[64];
    snprintf(copy, sizeof copy, "%s", xports);
    for (char *sv = NULL, *t = strtok_r(copy, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "  - name: %s\n%s", t,
                 mooncake && !strcmp(t, "tcp") ? "    mooncake_port: 0\n" : "");
    }
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: %s\ncluster_id: " CLUSTER "\n"
             "plugin_path: [%s/lib/tern]\nlog_level: error\nio_timeout_ms: 2000\n"
             "connect_timeout_ms: 2000\n%s%s%s%stransports:\n%s",
             uri, TERN_BUILD_DIR, secret ? "auth_secret_file: \"" : "", secret ? secret : "",
             secret ? "\"\n" : "", extra, list);
    tern_engine *eng = tern_engine_create_from_yaml(yaml, "test_auth_store", e, sizeof e);
    cr_assert_not_null(eng, "%s", e);
    /* No keep-alive write during the test: the attacker's rewrite stays. */
    tern_metadata_set_keepalive(eng->md, 600000, 600);
    return eng;
}

static uint8_t *reg(tern_engine *e, size_t n)
{
    uint8_t *p = calloc(1, n);
    cr_assert_eq(tern_register_memory(e, p, n, NULL), 0, "%s", tern_engine_last_error(e));
    return p;
}

static int one(tern_engine *e, tern_segment_id s, int op, void *local, uint64_t remote,
               uint64_t n, char *msg, size_t msglen)
{
    tern_request r = {.opcode = op, .local = local, .segment = s, .remote = remote,
                      .length = n};
    tern_batch *b = tern_batch_alloc(e, 1);
    int rc = tern_batch_submit(b, &r, 1) == 1 ? tern_batch_wait(b, 10000) : -1;
    tern_request_state st;
    tern_batch_state(b, 0, &st);
    if (st.status != TERN_COMPLETED && msg)
        snprintf(msg, msglen, "%s", tern_batch_error(b, 0));
    tern_batch_free(b);
    return rc == 0 && st.status == TERN_COMPLETED ? 0 : -1;
}

/* The legitimate traffic beside the attack: A writes L's buffer and reads
 * it back, the bytes checked on both sides. */
static void legit_move(tern_engine *A, tern_engine *L, uint8_t *lbuf, int round)
{
    tern_segment_id s = tern_segment_open(A, tern_engine_server_name(L));
    cr_assert_geq(s, 0, "the legitimate peer: %s", tern_engine_last_error(A));
    uint8_t *src = reg(A, BUF), *back = reg(A, BUF);
    for (size_t i = 0; i < BUF; i++)
        src[i] = (uint8_t)(i * 31 + (size_t)round);
    char msg[512] = "";
    cr_assert_eq(one(A, s, TERN_WRITE, src, (uint64_t)(uintptr_t)lbuf, BUF, msg, sizeof msg),
                 0, "legitimate write: %s", msg);
    cr_assert_eq(one(A, s, TERN_READ, back, (uint64_t)(uintptr_t)lbuf, BUF, msg, sizeof msg),
                 0, "legitimate read: %s", msg);
    cr_assert_eq(memcmp(src, lbuf, BUF), 0, "the legitimate peer holds other bytes");
    cr_assert_eq(memcmp(src, back, BUF), 0, "the legitimate read-back differs");
    tern_unregister_memory(A, src);
    tern_unregister_memory(A, back);
    free(src);
    free(back);
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Open `seg` and write a pattern to remote; returns the open's result (or
 * the write's failure) with the message in msg. */
static int attempt(tern_engine *A, const char *seg, uint64_t remote, char *msg, size_t msglen)
{
    tern_segment_id s = tern_segment_open(A, seg);
    if (s < 0) {
        snprintf(msg, msglen, "%s", tern_engine_last_error(A));
        return s;
    }
    uint8_t *src = reg(A, BUF);
    memset(src, 0xA5, BUF);
    int rc = one(A, s, TERN_WRITE, src, remote, BUF, msg, msglen);
    tern_unregister_memory(A, src);
    free(src);
    tern_segment_close(A, s);
    return rc ? TERN_ERR_IO : 0;
}

/* ---- an attacker's socket: counts what reaches it ----------------------------------- */

typedef struct sink {
    int lfd, port;
    atomic_ulong bytes;
    atomic_int stop;
    pthread_t th;
} sink;

static void *sink_main(void *arg)
{
    sink *k = arg;
    struct pollfd p[33] = {{.fd = k->lfd, .events = POLLIN}};
    int n = 1;
    char buf[65536];
    while (!atomic_load(&k->stop)) {
        if (poll(p, (nfds_t)n, 20) <= 0)
            continue;
        for (int i = n - 1; i >= 1; i--) {
            if (!p[i].revents)
                continue;
            ssize_t r = read(p[i].fd, buf, sizeof buf);
            if (r > 0) {
                atomic_fetch_add(&k->bytes, (unsigned long)r);
            } else {
                close(p[i].fd);
                p[i] = p[--n];
            }
        }
        if ((p[0].revents & POLLIN) && n < 33) {
            int c = accept(k->lfd, NULL, NULL);
            if (c >= 0)
                p[n++] = (struct pollfd){.fd = c, .events = POLLIN};
        }
    }
    for (int i = 1; i < n; i++)
        close(p[i].fd);
    return NULL;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 64) == 0);
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static void sink_start(sink *k)
{
    k->lfd = listen_any(&k->port);
    atomic_store(&k->bytes, 0);
    atomic_store(&k->stop, 0);
    cr_assert_eq(pthread_create(&k->th, NULL, sink_main, k), 0);
}

static void sink_stop(sink *k)
{
    atomic_store(&k->stop, 1);
    pthread_join(k->th, NULL);
    close(k->lfd);
}

/* ---- a cluster on a store: A initiates, L is the legitimate peer, T the victim ---- */

typedef struct cluster {
    test_store r;
    char uri[128];
    char *secret;
    rawstore raw;
    tern_engine *A, *L, *T;
    uint8_t *lbuf, *tbuf;
} cluster;

/* The HTTP metadata server of the tests (support/helpers/
 * http_metadata_server.py); its first line on stdout is "port N". */
static void http_start(test_store *s)
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
    s->pid = pid;
    cr_assert_eq(sscanf(line, "port %d", &s->port), 1, "unexpected first line: %s", line);
}

static void cluster_up(cluster *c, const char *store, const char *xports)
{
    memset(c, 0, sizeof *c);
    if (!strcmp(store, "etcd"))
        test_etcd_start(&c->r);
    else if (!strcmp(store, "http"))
        http_start(&c->r);
    else
        test_redis_start(&c->r);
    snprintf(c->uri, sizeof c->uri, "%s://127.0.0.1:%d%s", store, c->r.port,
             strcmp(store, "http") ? "" : "/metadata");
    raw_open(&c->raw, store, c->uri);
    c->secret = secret_file();
    c->A = engine_on(c->uri, c->secret, xports, 0);
    c->L = engine_on(c->uri, c->secret, xports, 0);
    c->T = engine_on(c->uri, c->secret, xports, 0);
    c->lbuf = reg(c->L, BUF);
    c->tbuf = reg(c->T, BUF);
    legit_move(c->A, c->L, c->lbuf, 1);
}

static void cluster_down(cluster *c)
{
    legit_move(c->A, c->L, c->lbuf, 2); /* still served after the attack */
    cr_assert(all_zero(c->tbuf, BUF), "bytes landed in the victim's buffer");
    tern_engine_destroy(c->A);
    tern_engine_destroy(c->L);
    tern_engine_destroy(c->T);
    free(c->lbuf);
    free(c->tbuf);
    raw_close(&c->raw);
    test_store_stop(&c->r);
    unlink(c->secret);
    free(c->secret);
}

static void expect_refused(tern_engine *A, const char *victim, uint64_t remote, const char *what,
                           const char *why)
{
    char msg[1024] = "";
    int rc = attempt(A, victim, remote, msg, sizeof msg);
    cr_assert_eq(rc, TERN_ERR_AUTH, "%s: the initiator must refuse with TERN_ERR_AUTH, got %d: %s",
                 what, rc, msg);
    cr_assert(strstr(msg, victim), "%s: the error names the segment: %s", what, msg);
    cr_assert(strstr(msg, why), "%s: the error says '%s': %s", what, why, msg);
    cr_log_info("%s: %s", what, msg);
}

/* ---- 1a: entries on Mooncake's unauthenticated wire --------------------------------- */

/* with_port: an engine of the same cluster runs a Mooncake-format port
 * (without a secret: the port is refused together with one). */
static void mooncake_entries(int with_port)
{
    cluster c;
    cluster_up(&c, "redis", "tcp");
    tern_engine *M = with_port ? engine_on(c.uri, NULL, "tcp", 1) : NULL;
    uint8_t *mbuf = M ? reg(M, BUF) : NULL;
    const char *victim = tern_engine_server_name(c.T);
    char *orig = store_get(&c.raw, victim);
    sink k;
    sink_start(&k);
    /* (i) Mooncake's shape, pointing at the attacker's port */
    char forged[1024];
    snprintf(forged, sizeof forged,
             "{\"name\":\"%s\",\"protocol\":\"tcp\",\"tcp_data_port\":%d,\"timestamp\":\"x\","
             "\"buffers\":[{\"name\":\"%s\",\"addr\":%llu,\"length\":%u}]}",
             victim, k.port, victim, (unsigned long long)(uintptr_t)c.tbuf, BUF);
    store_set(&c.raw, victim, forged);
    expect_refused(c.A, victim, (uint64_t)(uintptr_t)c.tbuf, "Mooncake-shaped entry",
                   "Mooncake");
    /* (ii) the victim's own descriptor, its tcp entry on Mooncake's wire */
    json_object *d = inner_of(orig), *ts;
    cr_assert(json_object_object_get_ex(d, "transports", &ts));
    json_object *addr = json_object_new_object();
    char mcname[64];
    snprintf(mcname, sizeof mcname, "127.0.0.1:%d", k.port);
    json_object_object_add(addr, "wire", json_object_new_string("mooncake"));
    json_object_object_add(addr, "name", json_object_new_string(mcname));
    json_object_object_add(addr, "tcp_data_port", json_object_new_int(k.port));
    json_object_object_add(json_object_array_get_idx(ts, 0), "addr", addr);
    store_set(&c.raw, victim, json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN));
    json_object_put(d);
    expect_refused(c.A, victim, (uint64_t)(uintptr_t)c.tbuf, "\"wire\":\"mooncake\" entry",
                   "not signed");
    /* (iii) the descriptor of the engine with the Mooncake-format port */
    if (M) {
        char *mdesc = store_get(&c.raw, tern_engine_server_name(M));
        store_set(&c.raw, victim, mdesc);
        free(mdesc);
        expect_refused(c.A, victim, (uint64_t)(uintptr_t)mbuf,
                       "the Mooncake-port engine's entry", "not signed");
    }
    sink_stop(&k);
    cr_assert_eq(atomic_load(&k.bytes), 0, "%lu bytes reached the attacker's socket",
                 atomic_load(&k.bytes));
    if (M) {
        cr_assert(all_zero(mbuf, BUF), "bytes landed in the Mooncake-port engine's buffer");
        tern_engine_destroy(M);
        free(mbuf);
    }
    free(orig);
    cluster_down(&c);
}

Test(auth_store, store_mooncake_entry_refused)
{
    mooncake_entries(0);
}

Test(auth_store, store_mooncake_entry_refused_with_a_mooncake_port_in_the_cluster)
{
    mooncake_entries(1);
}

/* ---- 1b: another engine's signed descriptor under the victim's key ------------------ */

static void other_engine(const char *store)
{
    cluster c;
    cluster_up(&c, store, "tcp");
    tern_engine *T2 = engine_on(c.uri, c.secret, "tcp", 0);
    uint8_t *t2buf = reg(T2, BUF);
    const char *victim = tern_engine_server_name(c.T);
    char *t2 = store_get(&c.raw, tern_engine_server_name(T2)); /* readable without the secret */
    store_set(&c.raw, victim, t2);
    free(t2);
    /* the initiator asks for T and names T's range: T2's buffer would get
     * what is meant for T if its descriptor were taken for T's */
    expect_refused(c.A, victim, (uint64_t)(uintptr_t)t2buf, store, "signed for segment");
    cr_assert(all_zero(t2buf, BUF), "bytes meant for %s landed in T2 (%s store)", victim, store);
    tern_engine_destroy(T2);
    free(t2buf);
    cluster_down(&c);
}

Test(auth_store, store_other_engines_descriptor_refused_redis)
{
    other_engine("redis");
}

Test(auth_store, store_other_engines_descriptor_refused_etcd)
{
    other_engine("etcd");
}

Test(auth_store, store_other_engines_descriptor_refused_http)
{
    other_engine("http");
}

/* ---- 1c: shm dropped from the victim's signed descriptor ---------------------------- */

Test(auth_store, store_descriptor_without_shm_refused)
{
    cluster c;
    cluster_up(&c, "redis", "shm,tcp");
    const char *victim = tern_engine_server_name(c.T);
    char *orig = store_get(&c.raw, victim);
    json_object *env = json_tokener_parse(orig), *d = inner_of(orig), *ts, *keep;
    cr_assert(json_object_object_get_ex(d, "transports", &ts));
    keep = json_object_new_array();
    int dropped = 0;
    for (size_t i = 0; i < json_object_array_length(ts); i++) {
        json_object *t = json_object_array_get_idx(ts, i), *nm;
        json_object_object_get_ex(t, "name", &nm);
        if (!strcmp(json_object_get_string(nm), "shm"))
            dropped = 1;
        else
            json_object_array_add(keep, json_object_get(t));
    }
    cr_assert(dropped, "the victim publishes no shm entry: %s", orig);
    json_object_object_add(d, "transports", keep);
    json_object_object_add(d, "protocol", json_object_new_string("tcp"));
    const char *dtext = json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN);
    if (json_object_object_get_ex(env, "descriptor", NULL)) { /* signed: keep the signature */
        json_object_object_add(env, "descriptor", json_object_new_string(dtext));
        store_set(&c.raw, victim, json_object_to_json_string_ext(env, JSON_C_TO_STRING_PLAIN));
    } else {
        store_set(&c.raw, victim, dtext);
    }
    json_object_put(d);
    json_object_put(env);
    free(orig);
    expect_refused(c.A, victim, (uint64_t)(uintptr_t)c.tbuf, "shm dropped", "signature");
    cluster_down(&c);
}

/* ---- a replayed older signed descriptor ---------------------------------------------- */

/* A's refetch of its open segment, past the refetch rate limit. */
static int refetch(tern_engine *A, tern_segment_id id, char *msg, size_t msglen)
{
    tern_segment *sg = tern_segments_get(&A->segs, id);
    cr_assert_not_null(sg);
    usleep((TERN_REFETCH_MIN_MS + 20) * 1000);
    return tern_segment_refetch(&A->segs, sg, 0, NULL, msg, msglen);
}

Test(auth_store, store_older_signed_descriptor_refused)
{
    cluster c;
    cluster_up(&c, "redis", "tcp");
    const char *victim = tern_engine_server_name(c.T);
    char *old = store_get(&c.raw, victim); /* generation 1, signed */
    tern_segment_id id = tern_segment_open(c.A, victim);
    cr_assert_geq(id, 0, "%s", tern_engine_last_error(c.A));
    uint8_t *more = reg(c.T, 4096); /* generation 2 */
    char msg[1024] = "";
    cr_assert_eq(refetch(c.A, id, msg, sizeof msg), 1, "the newer generation: %s", msg);
    store_set(&c.raw, victim, old); /* the replay */
    int rc = refetch(c.A, id, msg, sizeof msg);
    cr_log_info("replayed generation: %d %s", rc, msg);
    cr_assert_eq(rc, TERN_ERR_AUTH, "an older signed descriptor was taken (%d): %s", rc, msg);
    cr_assert(strstr(msg, "older") && strstr(msg, victim), "%s", msg);
    /* the segment keeps generation 2: a write into the new buffer lands */
    uint8_t *src = reg(c.A, 4096);
    memset(src, 0x5A, 4096);
    cr_assert_eq(one(c.A, id, TERN_WRITE, src, (uint64_t)(uintptr_t)more, 4096, msg, sizeof msg),
                 0, "%s", msg);
    cr_assert_eq(memcmp(more, src, 4096), 0);
    tern_segment_close(c.A, id);
    tern_unregister_memory(c.A, src);
    free(src);
    free(old);
    cluster_down(&c);
    free(more);
}

/* ---- 2: a relayed shm handshake ------------------------------------------------------ */

/* X: a plain socket program posing as a segment; every connection to it is
 * relayed byte for byte to B's handshake daemon. */
typedef struct relay {
    int lfd, port, to_port;
    char xname[32], bname[32]; /* rewrite: B's name and X's swapped in transit */
    atomic_int stop, active;
    pthread_t th;
} relay;

typedef struct relay_pipe {
    relay *r;
    int a, b;
} relay_pipe;

/* Replace every `from` by `to` (the same length) in buf. */
static void swap_name(char *buf, size_t n, const char *from, const char *to)
{
    size_t l = strlen(from);
    for (char *p = buf; (p = memmem(p, n - (size_t)(p - buf), from, l)); p += l)
        memcpy(p, to, l);
}

static void *pump_main(void *arg)
{
    relay_pipe *p = arg;
    struct pollfd f[2] = {{.fd = p->a, .events = POLLIN}, {.fd = p->b, .events = POLLIN}};
    char buf[65536];
    while (!atomic_load(&p->r->stop)) {
        if (poll(f, 2, 20) <= 0)
            continue;
        int done = 0;
        for (int i = 0; i < 2 && !done; i++) {
            if (!f[i].revents)
                continue;
            ssize_t n = read(f[i].fd, buf, sizeof buf);
            if (n > 0 && p->r->xname[0]) /* an active relay: each side sees its own name */
                swap_name(buf, (size_t)n, i == 0 ? p->r->xname : p->r->bname,
                          i == 0 ? p->r->bname : p->r->xname);
            done = n <= 0 || write(f[1 - i].fd, buf, (size_t)n) != n;
        }
        if (done)
            break;
    }
    close(p->a);
    close(p->b);
    atomic_fetch_sub(&p->r->active, 1);
    free(p);
    return NULL;
}

static void *relay_main(void *arg)
{
    relay *r = arg;
    struct pollfd f = {.fd = r->lfd, .events = POLLIN};
    while (!atomic_load(&r->stop)) {
        if (poll(&f, 1, 20) <= 0)
            continue;
        int a = accept(r->lfd, NULL, NULL), b = a >= 0 ? dial(r->to_port) : -1;
        if (b < 0) {
            if (a >= 0)
                close(a);
            continue;
        }
        relay_pipe *p = malloc(sizeof *p);
        *p = (relay_pipe){r, a, b};
        pthread_t t;
        atomic_fetch_add(&r->active, 1);
        if (pthread_create(&t, NULL, pump_main, p) == 0)
            pthread_detach(t);
        else
            atomic_fetch_sub(&r->active, 1);
    }
    return NULL;
}

static void relay_stop(relay *r)
{
    atomic_store(&r->stop, 1);
    pthread_join(r->th, NULL);
    while (atomic_load(&r->active) > 0)
        usleep(1000);
    close(r->lfd);
}

static void relayed(int with_secret, int rewrite)
{
    char *secret = with_secret ? secret_file() : NULL;
    /* rewrite: with the setting of clusters with Mooncake peers */
    const char *extra = rewrite ? "handshake_confirm: false\n" : "";
    tern_engine *A = engine_yaml("p2p", secret, "shm", 0, extra);
    tern_engine *B = engine_yaml("p2p", secret, "shm", 0, extra);
    uint8_t *bbuf = reg(B, BUF), *lbuf = reg(B, BUF);
    legit_move(A, B, lbuf, 1); /* A reaches B directly */
    memset(lbuf, 0, BUF);
    relay x = {0};
    x.lfd = listen_any(&x.port);
    x.to_port = atoi(strrchr(tern_engine_server_name(B), ':') + 1);
    cr_assert_eq(pthread_create(&x.th, NULL, relay_main, &x), 0);
    char xname[64], msg[1024] = "";
    snprintf(xname, sizeof xname, "127.0.0.1:%d", x.port);
    if (rewrite && strlen(xname) == strlen(tern_engine_server_name(B))) {
        snprintf(x.xname, sizeof x.xname, "%s", xname);
        snprintf(x.bname, sizeof x.bname, "%s", tern_engine_server_name(B));
    }
    int rc = attempt(A, xname, (uint64_t)(uintptr_t)bbuf, msg, sizeof msg);
    cr_log_info("relayed handshake%s%s: %d %s", with_secret ? " (with a secret)" : "",
                x.xname[0] ? " rewriting names" : "", rc, msg);
    cr_assert_neq(rc, 0, "A's write through the relay %s succeeded", xname);
    cr_assert(all_zero(bbuf, BUF), "bytes meant for %s landed in B", xname);
    legit_move(A, B, lbuf, 2);
    relay_stop(&x);
    tern_engine_destroy(A);
    tern_engine_destroy(B);
    free(bbuf);
    free(lbuf);
    if (secret) {
        unlink(secret);
        free(secret);
    }
}

Test(auth_store, shm_relayed_handshake_refused)
{
    relayed(0, 0);
}

/* X also swaps the two names in what it relays (the descriptor's name, the
 * Connection's peer_nic_path), with handshake_confirm: false as in clusters
 * with Mooncake peers: B still asks A, which denies the Connection.  (The
 * shm proof bound to B's own name, the layer behind, is tested alone in
 * test_shm_transport, relayed_handshake_is_refused_by_the_initiator.) */
Test(auth_store, shm_relayed_handshake_rewriting_names_refused)
{
    relayed(0, 1);
}

Test(auth_store, shm_relayed_handshake_refused_with_secret)
{
    relayed(1, 0);
}
