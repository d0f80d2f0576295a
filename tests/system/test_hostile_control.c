/* tests/system/test_hostile_control.c: a stranger on the control plane cannot
 * redirect or starve transfers (docs/protocol.md, Handshake frames).
 *
 *  - endpoint hijack: three engines in this process, the initiator I, its
 *    target T and a third engine X.  I moves verified data to T; then a
 *    Connection frame sent to I's daemon names T's NIC path and X's fabric
 *    address.  It must be refused, and the 16 MiB I writes next must land
 *    in T with zero bytes in X (efa over libfabric's tcp provider, and the
 *    tcp transport; with and without auth_secret_file, where the frame is
 *    sent with the shared secret: the third engine's owner knows it).
 *    The same holds with handshake_confirm: false, where a segment that
 *    answers "I did not send it" still refuses the frame.
 *  - unconfirmed Connections (handshake_confirm: false, the opt-in for
 *    Mooncake peers): a frame whose named segment cannot confirm (a daemon
 *    that answers probes without "confirmed", as Mooncake's does not know
 *    them) is refused by default and accepted with the opt-in; one naming
 *    another engine, a device we lack, or a malformed sender is refused,
 *    and so is one that a tern segment says it did not send; our own
 *    active endpoint is never replaced by one (a passive one is: the
 *    sender reconnecting).
 *  - request flood: test_hostile_flood.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <pthread.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "integration_common.h"
#include "control/auth.h"
#include "desc/desc_sign.h"
#include "control/handshake.h"
#include "tern/transport.h"
#include "base/util.h"

#include "hostile_control_harness.h"

TestSuite(hostile_control, .timeout = 240);

/* ---- learning X's fabric address: X connects to a daemon we run ---------- */

typedef struct fake {
    const hc_env *v;
    char name[64];
    char *meta;            /* T's descriptor renamed to us */
    char addr_hex[600];    /* X's efa_addr, from its Connection frame */
    char nic[320];         /* X's local_nic_path */
} fake;

static int fake_handler(void *arg, int type, const char *json, size_t len, char **reply,
                        size_t *replylen)
{
    fake *f = arg;
    if (type == TERN_HS_METADATA) {
        *reply = strdup(f->meta);
    } else {
        json_tokener *tok = json_tokener_new(); /* json is not NUL-terminated */
        json_object *o = json_tokener_parse_ex(tok, json, (int)len);
        json_tokener_free(tok);
        json_object *a, *n;
        if (o && json_object_object_get_ex(o, "efa_addr", &a) &&
            json_object_object_get_ex(o, "local_nic_path", &n)) {
            snprintf(f->addr_hex, sizeof f->addr_hex, "%s", json_object_get_string(a));
            snprintf(f->nic, sizeof f->nic, "%s", json_object_get_string(n));
        }
        json_object_put(o);
        *reply = strdup("{\"reply_msg\":\"the test only wanted your address\"}");
    }
    *replylen = strlen(*reply);
    return 0;
}

static void learn_addr(const hc_env *v, tern_engine *x, uint8_t *xbuf, tern_engine *t, fake *f)
{
    char err[1024];
    int rc;
    char *meta = hs_ask(v, tern_engine_server_name(t), TERN_HS_METADATA, "{}", err, sizeof err,
                        &rc);
    cr_assert_eq(rc, 0, "%s", err);
    tern_hs_server *s;
    tern_hs_options o = {.bind_host = "127.0.0.1", .handler = fake_handler, .arg = f,
                         .auth = v->auth};
    cr_assert_eq(tern_hs_server_start(&o, &s, err, sizeof err), 0, "%s", err);
    snprintf(f->name, sizeof f->name, "127.0.0.1:%u", tern_hs_server_port(s));
    json_object *d = json_tokener_parse(meta), *inner;
    free(meta);
    if (json_object_object_get_ex(d, "descriptor", &inner)) { /* signed (auth): unwrap */
        json_object *plain = json_tokener_parse(json_object_get_string(inner));
        json_object_put(d);
        d = plain;
    }
    json_object_object_add(d, "name", json_object_new_string(f->name));
    char *plain = strdup(json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN));
    json_object_put(d);
    f->meta = plain;
    if (v->auth) { /* this helper holds the secret: its descriptor is signed */
        cr_assert_eq(tern_desc_sign(v->auth, f->name, plain, &f->meta, err, sizeof err), 0,
                     "%s", err);
    }
    uint64_t any = 0;
    json_object *m = json_tokener_parse(plain), *bufs;
    cr_assert(json_object_object_get_ex(m, "buffers", &bufs));
    any = json_object_get_uint64(
        json_object_object_get(json_object_array_get_idx(bufs, 0), "addr"));
    json_object_put(m);
    if (f->meta != plain)
        free(plain);
    tern_segment_id seg = tern_segment_open(x, f->name);
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(x));
    char msg[512]; /* X's own buffer as the source: its byte stays 0 */
    cr_assert_neq(one(x, seg, TERN_WRITE, xbuf, any, 1, msg, sizeof msg), TERN_COMPLETED);
    cr_log_info("X towards our daemon: %s", msg);
    tern_segment_close(x, seg);
    tern_hs_server_stop(s);
    free(f->meta);
    cr_assert(f->addr_hex[0] && strchr(f->nic, '@'), "X sent no efa_addr");
}

/* ---- the hijack ----------------------------------------------------------------- */

static size_t nonzero(const uint8_t *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += p[i] != 0;
    return c;
}

/* One forged Connection frame to I's daemon; returns its reply_msg (or the
 * client error) in why, and 1 when the daemon accepted it. */
static int forge(const hc_env *v, tern_engine *i, const char *local_nic, const char *peer_nic,
                 const char *addr_hex, char *why, size_t whylen)
{
    char json[2048], err[1024] = "";
    snprintf(json, sizeof json,
             "{\"transport\":\"%s\",\"local_nic_path\":\"%s\",\"peer_nic_path\":\"%s\","
             "\"efa_addr\":\"%s\",\"qp_num\":[],\"reply_msg\":\"\"}",
             v->transport, local_nic, peer_nic, addr_hex);
    int rc;
    char *r = hs_ask(v, tern_engine_server_name(i), TERN_HS_CONNECTION, json, err, sizeof err,
                     &rc);
    if (rc) {
        snprintf(why, whylen, "%s", err);
        return 0;
    }
    json_object *o = json_tokener_parse(r), *m = NULL;
    const char *msg = o && json_object_object_get_ex(o, "reply_msg", &m)
                          ? json_object_get_string(m) : "";
    snprintf(why, whylen, "%s", msg);
    json_object_put(o);
    free(r);
    return why[0] == '\0';
}

static void hijack(hc_env *v)
{
    tern_engine *i = engine_new(v), *t = engine_new(v), *x = engine_new(v);
    uint8_t *tb = local_buf(t, BUF), *xb = local_buf(x, BUF);
    uint8_t *src = local_buf(i, BUF), *dst = local_buf(i, BUF);
    tern_segment_id seg = tern_segment_open(i, tern_engine_server_name(t));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(i));
    /* the legitimate pair, before the attack */
    fill(src, 1 << 20, 1);
    write_read_back(i, seg, src, dst, (uint64_t)(uintptr_t)tb, 1 << 20, "before the attack");

    char dev[64] = "lo", xhex[600] = "00";
    if (strcmp(v->transport, "efa") == 0) {
        fake f = {.v = v};
        learn_addr(v, x, xb, t, &f);
        snprintf(dev, sizeof dev, "%s", strrchr(f.nic, '@') + 1);
        snprintf(xhex, sizeof xhex, "%s", f.addr_hex);
    }
    char tnic[400], inic[400], other[400], why[1024];
    snprintf(tnic, sizeof tnic, "%s@%s", tern_engine_server_name(t), dev);
    snprintf(inic, sizeof inic, "%s@%s", tern_engine_server_name(i), dev);
    snprintf(other, sizeof other, "10.1.2.3:4444@%s", dev);
    /* claiming to be T, naming X's address */
    int took = forge(v, i, tnic, inic, xhex, why, sizeof why);
    cr_log_info("%s: forged Connection as T %s: %s", v->transport, took ? "ACCEPTED" : "refused",
                why);
    /* naming another segment as us, or a sender that is no host:port */
    int took_other = forge(v, i, tnic, other, xhex, why, sizeof why);
    int took_noport = forge(v, i, "no-port@x", inic, xhex, why, sizeof why);

    /* the legitimate transfer after the attack: 16 MiB, all in T, none in X */
    char wmsg[512] = "", rmsg[512] = "";
    fill(src, BUF, 9);
    memset(dst, 0, BUF);
    tern_status w = one(i, seg, TERN_WRITE, src, (uint64_t)(uintptr_t)tb, BUF, wmsg, sizeof wmsg);
    tern_status r = one(i, seg, TERN_READ, dst, (uint64_t)(uintptr_t)tb, BUF, rmsg, sizeof rmsg);
    size_t leaked = nonzero(xb, BUF);
    int in_t = memcmp(tb, src, BUF) == 0;
    cr_log_info("%s%s: write %s, read-back %s, T holds the data: %s, bytes reaching X: %zu",
                v->transport, v->auth ? " with auth" : "", w == TERN_COMPLETED ? "ok" : wmsg,
                r == TERN_COMPLETED && !memcmp(src, dst, BUF) ? "verified" : "differs",
                in_t ? "yes" : "NO", leaked);
    cr_assert_not(took, "I accepted a Connection claiming to be %s with X's address", tnic);
    cr_assert_not(took_other, "I accepted a Connection naming %s as its peer", other);
    cr_assert_not(took_noport, "I accepted a Connection from \"no-port@x\"");
    cr_assert_eq(w, TERN_COMPLETED, "%s", wmsg);
    cr_assert_eq(r, TERN_COMPLETED, "%s", rmsg);
    cr_assert_eq(memcmp(src, dst, BUF), 0, "the read-back differs");
    cr_assert(in_t, "T's memory does not hold what I wrote");
    cr_assert_eq(leaked, 0, "%zu bytes reached the third engine", leaked);
    tern_segment_close(i, seg);
    tern_engine_destroy(i);
    tern_engine_destroy(t);
    tern_engine_destroy(x);
    if (v->auth) {
        tern_auth_free(v->auth);
        unlink(v->secret_path);
    }
}

Test(hostile_control, hijack_efa_refused)
{
    hc_env v = {.transport = "efa"};
    hijack(&v);
}

Test(hostile_control, hijack_efa_refused_with_auth)
{
    hc_env v = {.transport = "efa"};
    env_auth(&v);
    hijack(&v);
}

Test(hostile_control, hijack_tcp_refused)
{
    hc_env v = {.transport = "tcp"};
    hijack(&v);
}

Test(hostile_control, hijack_tcp_refused_with_auth)
{
    hc_env v = {.transport = "tcp"};
    env_auth(&v);
    hijack(&v);
}

Test(hostile_control, hijack_efa_refused_without_confirmation)
{
    hc_env v = {.transport = "efa", .no_confirm = 1};
    hijack(&v);
}

/* ---- unconfirmed Connections (handshake_confirm: false) ----------------------- */

static int probe_blind(void *arg, int type, const char *json, size_t len, char **reply,
                       size_t *replylen)
{
    (void)arg, (void)type, (void)json, (void)len; /* knows no "confirm" */
    *reply = strdup("{\"ok\":true,\"name\":\"not-tern\"}");
    *replylen = strlen(*reply);
    return 0;
}

/* How many lines of the redirected stderr contain `what`. */
static int stderr_count(const char *what)
{
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    return n;
}

Test(hostile_control, unconfirmed_connection_only_with_opt_in, .init = cr_redirect_stderr)
{
    hc_env dflt = {.transport = "efa"}, open = {.transport = "efa", .no_confirm = 1};
    tern_engine *i = engine_new(&dflt), *j = engine_new(&open), *t = engine_new(&dflt),
                *x = engine_new(&dflt);
    uint8_t *xb = local_buf(x, 1 << 20), *tb = local_buf(t, 1 << 20);
    uint8_t *src = local_buf(j, 1 << 20), *dst = local_buf(j, 1 << 20);
    (void)local_buf(i, 1 << 20);
    fake f = {.v = &dflt};
    learn_addr(&dflt, x, xb, t, &f);
    const char *dev = strrchr(f.nic, '@') + 1;

    /* the sender named in local_nic_path: a daemon that cannot confirm */
    char err[512];
    tern_hs_server *blind;
    tern_hs_options o = {.bind_host = "127.0.0.1", .handler = probe_blind};
    cr_assert_eq(tern_hs_server_start(&o, &blind, err, sizeof err), 0, "%s", err);
    char bnic[400], inic[400], jnic[400], jbad[400], other[400], why[1024];
    snprintf(bnic, sizeof bnic, "127.0.0.1:%u@%s", tern_hs_server_port(blind), dev);
    snprintf(inic, sizeof inic, "%s@%s", tern_engine_server_name(i), dev);
    snprintf(jnic, sizeof jnic, "%s@%s", tern_engine_server_name(j), dev);
    snprintf(jbad, sizeof jbad, "%s@no-such-dev", tern_engine_server_name(j));
    snprintf(other, sizeof other, "10.1.2.3:4444@%s", dev);

    /* the default: refused, because the sender cannot confirm it */
    cr_assert_not(forge(&dflt, i, bnic, inic, f.addr_hex, why, sizeof why),
                  "the default accepted an unconfirmed Connection");
    cr_log_info("default: %s", why);
    cr_assert(strstr(why, "does not confirm"), "%s", why);

    /* the opt-in: every other check still refuses */
    cr_assert_not(forge(&open, j, bnic, other, f.addr_hex, why, sizeof why),
                  "accepted a Connection naming %s as its peer", other);
    cr_assert(strstr(why, "does not name this engine"), "%s", why);
    cr_assert_not(forge(&open, j, bnic, jbad, f.addr_hex, why, sizeof why),
                  "accepted a Connection naming a device this engine lacks");
    cr_assert(strstr(why, "no efa device"), "%s", why);
    cr_assert_not(forge(&open, j, "no-port@x", jnic, f.addr_hex, why, sizeof why),
                  "accepted a Connection from \"no-port@x\"");
    cr_assert(strstr(why, "local_nic_path"), "%s", why);
    /* ... and a tern segment that answers "not sent by me" is believed */
    cr_assert_not(forge(&open, j, inic, jnic, f.addr_hex, why, sizeof why),
                  "accepted a Connection that %s says it did not send", inic);
    cr_assert(strstr(why, "did not send it"), "%s", why);

    /* the opt-in: a well-formed one is accepted; the same sender again (a
     * restarted Mooncake initiator) replaces the passive endpoint it had */
    int took = forge(&open, j, bnic, jnic, f.addr_hex, why, sizeof why);
    cr_assert(took, "handshake_confirm: false refused a well-formed Connection: %s", why);
    took = forge(&open, j, bnic, jnic, f.addr_hex, why, sizeof why);
    cr_assert(took, "the sender could not reconnect over its passive endpoint: %s", why);
    char warned[500]; /* logged once for the sender, not once per frame */
    snprintf(warned, sizeof warned, "accepting an unconfirmed Connection from %s ", bnic);
    int nwarn = stderr_count(warned);
    cr_assert_eq(nwarn, 1, "%d WARN lines for two frames from %s", nwarn, bnic);

    /* an established active endpoint: j moves data to t, then t's daemon
     * goes away (so nothing can confirm or deny) and a frame claims to be t */
    tern_segment_id seg = tern_segment_open(j, tern_engine_server_name(t));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(j));
    fill(src, 1 << 20, 5);
    write_read_back(j, seg, src, dst, (uint64_t)(uintptr_t)tb, 1 << 20, "before t goes away");
    char tnic[400];
    snprintf(tnic, sizeof tnic, "%s@%s", tern_engine_server_name(t), dev);
    tern_engine_destroy(t);
    took = forge(&open, j, tnic, jnic, f.addr_hex, why, sizeof why);
    cr_log_info("as t, after it went away: %s", took ? "ACCEPTED" : why);
    cr_assert_not(took, "an unconfirmed Connection replaced our active endpoint to %s", tnic);
    cr_assert(strstr(why, "never replaces"), "%s", why);
    cr_assert_eq(nonzero(xb, 1 << 20), 0, "bytes reached the third engine");

    tern_segment_close(j, seg);
    tern_hs_server_stop(blind);
    tern_engine_destroy(i);
    tern_engine_destroy(j);
    tern_engine_destroy(x);
}
/* ---- strangers on an authenticating daemon ------------------------------------ */

typedef struct logcap {
    pthread_mutex_t mu;
    int warns;
    char first[512], last[512];
} logcap;

static void cap_log(void *arg, int level, const char *fmt, ...)
{
    logcap *l = arg;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level != TERN_LOG_WARN)
        return;
    pthread_mutex_lock(&l->mu);
    if (!l->warns++)
        snprintf(l->first, sizeof l->first, "%s", msg);
    snprintf(l->last, sizeof l->last, "%s", msg);
    pthread_mutex_unlock(&l->mu);
}

static int ok_handler(void *arg, int type, const char *json, size_t len, char **reply,
                      size_t *replylen)
{
    (void)arg, (void)type, (void)json, (void)len;
    *reply = strdup("{\"ok\":true}");
    *replylen = strlen(*reply);
    return 0;
}

/* One raw frame to port; returns the reply payload (type byte kept), or NULL. */
static char *raw_frame(uint16_t port, int type, const char *json)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    size_t jl = strlen(json);
    uint8_t hdr[9];
    for (int b = 0; b < 8; b++)
        hdr[b] = (uint8_t)((jl + 1) >> (8 * b));
    hdr[8] = (uint8_t)type;
    uint8_t rh[8];
    char *out = NULL; /* a frame over its limit may be cut off while we write it */
    if (tern_io_write_all(fd, hdr, 9, 2000) == 0 && tern_io_write_all(fd, json, jl, 2000) == 0 &&
        tern_io_read_all(fd, rh, 8, 3000) == 0) {
        uint64_t n = 0;
        for (int b = 7; b >= 0; b--)
            n = (n << 8) | rh[b];
        if (n > 0 && n < (1u << 20)) {
            out = calloc(1, n + 1);
            if (tern_io_read_all(fd, out, n, 3000) != 0) {
                free(out);
                out = NULL;
            }
        }
    }
    close(fd);
    return out;
}

static tern_hs_server *auth_daemon(hc_env *v, logcap *l)
{
    char e2[512];
    env_auth(v);
    tern_hs_server *s;
    tern_hs_options o = {.bind_host = "127.0.0.1", .handler = ok_handler, .arg = l,
                         .auth = v->auth, .log = cap_log};
    cr_assert_eq(tern_hs_server_start(&o, &s, e2, sizeof e2), 0, "%s", e2);
    return s;
}

Test(hostile_control, malformed_auth_hello_is_reported_as_malformed)
{
    hc_env v = {.transport = "tcp"};
    logcap l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    tern_hs_server *s = auth_daemon(&v, &l);
    char *r = raw_frame(tern_hs_server_port(s), TERN_HS_AUTH, "{\"auth\":\"hmac-sha256\"}");
    cr_assert(r, "no reply to a malformed hello");
    cr_log_info("reply: %s / log: %s", r + 1, l.last);
    cr_assert(strstr(r, "malformed") && !strstr(r, "did not match"), "reply: %s", r + 1);
    free(r);
    pthread_mutex_lock(&l.mu);
    cr_assert(strstr(l.last, "malformed") && !strstr(l.last, "did not prove"), "log: %s",
              l.last);
    pthread_mutex_unlock(&l.mu);
    /* a legitimate client is served beside it */
    char e2[512], name[64];
    int rc;
    snprintf(name, sizeof name, "127.0.0.1:%u", tern_hs_server_port(s));
    char *ok = hs_ask(&v, name, TERN_HS_PROBE, "{}", e2, sizeof e2, &rc);
    cr_assert_eq(rc, 0, "%s", e2);
    free(ok);
    tern_hs_server_stop(s);
    tern_auth_free(v.auth);
    unlink(v.secret_path);
}

Test(hostile_control, stranger_warnings_are_rate_limited_with_a_count)
{
    hc_env v = {.transport = "tcp"};
    logcap l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    tern_hs_server *s = auth_daemon(&v, &l);
    uint16_t port = tern_hs_server_port(s);
    char e2[512], name[64];
    snprintf(name, sizeof name, "127.0.0.1:%u", port);
    int strangers = 2000, served = 0;
    for (int k = 0; k < strangers; k++) {
        free(raw_frame(port, TERN_HS_PROBE, "{}")); /* no authentication */
        if (k % 200 == 0) { /* the legitimate client, beside them */
            int rc;
            free(hs_ask(&v, name, TERN_HS_PROBE, "{}", e2, sizeof e2, &rc));
            cr_assert_eq(rc, 0, "%s", e2);
            served++;
        }
    }
    pthread_mutex_lock(&l.mu);
    int during = l.warns;
    pthread_mutex_unlock(&l.mu);
    /* the count of those held back comes once the interval is over */
    int summary = 0;
    for (uint64_t end = now_ms() + 20000; now_ms() < end && !summary; usleep(100000)) {
        pthread_mutex_lock(&l.mu);
        summary = l.warns > during && strstr(l.last, "more warnings") != NULL;
        pthread_mutex_unlock(&l.mu);
    }
    cr_log_info("%d unauthenticated connections: %d warning lines, then: %s (legitimate "
                "client served %d/%d)", strangers, during, l.last, served, served);
    cr_assert_leq(during, 5, "%d warning lines for %d strangers", during, strangers);
    cr_assert(strstr(l.first, "did not prove"), "first: %s", l.first);
    cr_assert(summary, "no summary with the count; last: %s", l.last);
    tern_hs_server_stop(s);
    tern_auth_free(v.auth);
    unlink(v.secret_path);
}

/* A JSON object of exactly n bytes: {"p":"xxx..."}. */
static char *json_of(size_t n)
{
    char *j = malloc(n + 1);
    memset(j, 'x', n);
    memcpy(j, "{\"p\":\"", 6);
    memcpy(j + n - 2, "\"}", 2);
    j[n] = '\0';
    return j;
}

/* A request at its type's limit is answered; one byte more is dropped
 * unanswered (the payload counts the type byte: JSON = limit - 1). */
static void at_and_over(uint16_t port, int type, size_t limit)
{
    char *j = json_of(limit - 1);
    char *r = raw_frame(port, type, j);
    cr_assert(r && strstr(r + 1, "\"ok\""), "type %d at its limit %zu: %s", type, limit,
              r ? r + 1 : "no reply");
    free(r);
    free(j);
    j = json_of(limit);
    r = raw_frame(port, type, j);
    cr_assert_null(r, "type %d at %zu bytes (limit %zu) answered: %s", type, limit + 1, limit,
                   r ? r + 1 : "");
    free(j);
}

Test(hostile_control, request_limits_per_type)
{
    logcap l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    char e2[512], name[64];
    tern_hs_server *s;
    tern_hs_options o = {.bind_host = "127.0.0.1", .handler = ok_handler, .arg = &l,
                         .log = cap_log};
    cr_assert_eq(tern_hs_server_start(&o, &s, e2, sizeof e2), 0, "%s", e2);
    uint16_t port = tern_hs_server_port(s);
    at_and_over(port, TERN_HS_CONNECTION, TERN_HS_LIMIT_CONNECTION);
    at_and_over(port, TERN_HS_METADATA, TERN_HS_LIMIT_METADATA);
    at_and_over(port, TERN_HS_NOTIFY, TERN_HS_LIMIT_NOTIFY);
    at_and_over(port, TERN_HS_PROBE, TERN_HS_LIMIT_PROBE);
    pthread_mutex_lock(&l.mu);
    cr_assert(strstr(l.first, "above its limit"), "log: %s", l.first);
    pthread_mutex_unlock(&l.mu);
    /* nesting deeper than the limit is refused with a message */
    char deep[128] = "";
    for (int k = 0; k < TERN_HS_JSON_DEPTH + 2; k++)
        strcat(deep, "[");
    for (int k = 0; k < TERN_HS_JSON_DEPTH + 2; k++)
        strcat(deep, "]");
    char *r = raw_frame(port, TERN_HS_METADATA, deep);
    cr_assert(r && strstr(r + 1, "reply_msg") && strstr(r + 1, "invalid JSON"), "%s",
              r ? r + 1 : "-");
    free(r);
    /* our own client refuses to send a request over its limit, and says why */
    snprintf(name, sizeof name, "127.0.0.1:%u", port);
    char *j = json_of(TERN_HS_LIMIT_CONNECTION), *reply = NULL;
    size_t rl = 0;
    cr_assert_eq(tern_hs_request(name, TERN_HS_CONNECTION, j, strlen(j), &reply, &rl, 0, 2000,
                                 2000, e2, sizeof e2),
                 TERN_ERR_INVAL);
    cr_assert(strstr(e2, "Connection request") && strstr(e2, "limit"), "%s", e2);
    free(j);
    tern_hs_server_stop(s);
}
