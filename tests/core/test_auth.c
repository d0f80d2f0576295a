/* tests/core/test_auth.c: shared-secret authentication (core/control/auth.c).
 *  - primitives: secret files, HMAC-SHA256 (RFC 4231 vector), proofs bound
 *    to label, direction and both nonces, constant-time compare, hex;
 *  - the handshake exchange over a real socket pair: the client function
 *    against the daemon's step function, right and wrong secrets, a peer
 *    without a secret, a daemon without one;
 *  - engines (tern.h) with auth_secret_file: same secret works (Probe,
 *    segment open, a tcp batch), a different or missing secret is refused on
 *    both sides, and a raw data connection without the proof can neither
 *    read nor write. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/auth.h"
#include "control/handshake.h"
#include "tern/errors.h"
#include "base/util.h"

static char err[1024];

static char *write_secret(const char *text)
{
    char *path = strdup("/tmp/tern-auth-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static tern_auth *auth_of(const char *secret)
{
    tern_auth *a = NULL;
    cr_assert_eq(tern_auth_from_secret(secret, strlen(secret), &a, err, sizeof err), 0, "%s",
                 err);
    return a;
}

Test(auth, hmac_sha256_matches_rfc4231_case_1)
{
    uint8_t key[20], mac[32];
    memset(key, 0x0b, sizeof key);
    tern_auth *a = NULL;
    cr_assert_eq(tern_auth_from_secret(key, sizeof key, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_auth_mac(a, "Hi There", 8, mac), 0);
    char hex[65];
    tern_auth_hex(mac, 32, hex);
    cr_assert_str_eq(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    tern_auth_free(a);
}

Test(auth, secret_files_are_checked_and_trailing_newline_ignored)
{
    tern_auth *a = NULL, *b = NULL;
    cr_assert_eq(tern_auth_load("/nonexistent/tern-secret", &a, err, sizeof err),
                 TERN_ERR_CONFIG);
    cr_assert(strstr(err, "/nonexistent/tern-secret"), "%s", err);
    char *shortf = write_secret("short\n");
    cr_assert_eq(tern_auth_load(shortf, &a, err, sizeof err), TERN_ERR_CONFIG);
    cr_assert(strstr(err, "5 bytes") && strstr(err, shortf), "%s", err);
    char *empty = write_secret("");
    cr_assert_eq(tern_auth_load(empty, &a, err, sizeof err), TERN_ERR_CONFIG);
    char *f1 = write_secret("correct horse battery staple\n");
    char *f2 = write_secret("correct horse battery staple");
    cr_assert_eq(tern_auth_load(f1, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tern_auth_load(f2, &b, err, sizeof err), 0, "%s", err);
    uint8_t m1[32], m2[32];
    tern_auth_mac(a, "x", 1, m1);
    tern_auth_mac(b, "x", 1, m2);
    cr_assert(tern_auth_equal(m1, m2, 32), "a newline must not change the secret");
    tern_auth_free(a);
    tern_auth_free(b);
    for (char **p = (char *[]){shortf, empty, f1, f2, NULL}; *p; p++) {
        unlink(*p);
        free(*p);
    }
}

Test(auth, proofs_bind_secret_label_direction_and_nonces)
{
    tern_auth *a = auth_of("0123456789abcdef-secret"), *b = auth_of("0123456789abcdef-other!");
    uint8_t n1[32], n2[32], p[32];
    cr_assert_eq(tern_auth_nonce(n1), 0);
    cr_assert_eq(tern_auth_nonce(n2), 0);
    cr_assert(!tern_auth_equal(n1, n2, 32), "two nonces must differ");
    cr_assert_eq(tern_auth_proof(a, "tern-hs-server", n1, n2, p), 0);
    cr_assert_eq(tern_auth_check(a, "tern-hs-server", n1, n2, p), 0);
    cr_assert_eq(tern_auth_check(b, "tern-hs-server", n1, n2, p), TERN_ERR_AUTH);
    cr_assert_eq(tern_auth_check(a, "tern-hs-client", n1, n2, p), TERN_ERR_AUTH);
    cr_assert_eq(tern_auth_check(a, "tern-hs-server", n2, n1, p), TERN_ERR_AUTH);
    for (int bit = 0; bit < 256; bit += 37) {
        p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        cr_assert_eq(tern_auth_check(a, "tern-hs-server", n1, n2, p), TERN_ERR_AUTH);
        p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    tern_auth_free(a);
    tern_auth_free(b);
}

Test(auth, hex_round_trip_and_refusals)
{
    uint8_t in[4] = {0x00, 0x7f, 0xa5, 0xff}, out[4];
    char hex[9];
    tern_auth_hex(in, 4, hex);
    cr_assert_str_eq(hex, "007fa5ff");
    cr_assert_eq(tern_auth_unhex(hex, 8, out, 4), 0);
    cr_assert_eq(memcmp(in, out, 4), 0);
    cr_assert_eq(tern_auth_unhex("007FA5FF", 8, out, 4), 0);
    cr_assert_eq(tern_auth_unhex("007fa5f", 7, out, 4), TERN_ERR_PROTOCOL);
    cr_assert_eq(tern_auth_unhex("007fa5fg", 8, out, 4), TERN_ERR_PROTOCOL);
    cr_assert_eq(tern_auth_unhex(NULL, 0, out, 4), TERN_ERR_PROTOCOL);
}

/* ---- the handshake exchange over a socket pair ------------------------------- */

typedef struct client_run {
    const tern_auth *a;
    int fd, rc;
    char err[1024];
} client_run;

static void *client_main(void *arg)
{
    client_run *c = arg;
    c->rc = tern_auth_hs_client(c->a, c->fd, "127.0.0.1:9", 0, 2000, c->err, sizeof c->err);
    shutdown(c->fd, SHUT_WR);
    return NULL;
}

/* Read one frame's payload from fd; 0 bytes at EOF. */
static size_t read_payload(int fd, uint8_t *buf, size_t cap)
{
    uint8_t hdr[8];
    uint64_t n = 0;
    if (tern_io_read_all(fd, hdr, 8, 2000) != 0)
        return 0;
    cr_assert_eq(tern_hs_frame_header(hdr, cap, &n), 0);
    cr_assert_eq(tern_io_read_all(fd, buf, n, 2000), 0);
    return n;
}

/* The daemon's side driven by hand; returns the last step result. */
static int serve(const tern_auth *a, int fd, char *why, size_t whylen)
{
    tern_auth_session ss = {.step = 1};
    uint8_t buf[4096];
    int rc = 0;
    while (ss.step) {
        size_t n = read_payload(fd, buf, sizeof buf);
        if (!n)
            return TERN_ERR_CLOSED;
        uint8_t *out = NULL;
        size_t outlen = 0;
        rc = tern_auth_hs_server_step(a, &ss, buf, n, "127.0.0.1:4567", &out, &outlen, why,
                                      whylen);
        if (out)
            tern_io_write_all(fd, out, outlen, 2000);
        free(out);
        if (rc < 0)
            return rc;
    }
    return rc;
}

static int exchange(const tern_auth *client, const tern_auth *server, client_run *c,
                    char *why, size_t whylen)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    *c = (client_run){.a = client, .fd = sv[0]};
    pthread_t t;
    pthread_create(&t, NULL, client_main, c);
    int rc = serve(server, sv[1], why, whylen);
    pthread_join(t, NULL);
    close(sv[0]);
    close(sv[1]);
    return rc;
}

Test(auth_exchange, same_secret_both_sides_prove_it)
{
    tern_auth *a = auth_of("the-shared-secret-0001"), *b = auth_of("the-shared-secret-0001");
    client_run c;
    char why[512] = "";
    cr_assert_eq(exchange(a, b, &c, why, sizeof why), TERN_AUTH_STEP_DONE, "%s", why);
    cr_assert_eq(c.rc, 0, "%s", c.err);
    tern_auth_free(a);
    tern_auth_free(b);
}

Test(auth_exchange, different_secret_is_refused_by_the_client_first)
{
    tern_auth *a = auth_of("the-shared-secret-0001"), *b = auth_of("the-shared-secret-0002");
    client_run c;
    char why[512] = "";
    /* The daemon's proof does not match: the client stops before proving. */
    cr_assert_eq(exchange(a, b, &c, why, sizeof why), TERN_ERR_CLOSED);
    cr_assert_eq(c.rc, TERN_ERR_AUTH);
    cr_assert(strstr(c.err, "authentication failed: peer 127.0.0.1:9 did not prove the "
                            "shared secret") && strstr(c.err, "auth_secret_file"),
              "%s", c.err);
    tern_auth_free(a);
    tern_auth_free(b);
}

Test(auth_exchange, wrong_client_proof_is_refused_by_the_daemon)
{
    tern_auth *a = auth_of("the-shared-secret-0001");
    tern_auth_session ss = {.step = 1};
    char why[512] = "";
    uint8_t *out = NULL;
    size_t outlen;
    const char hello[] = "\x04{\"auth\":\"hmac-sha256\",\"nonce\":\"000102030405060708090a0b0c0d"
                         "0e0f101112131415161718191a1b1c1d1e1f\"}";
    cr_assert_eq(tern_auth_hs_server_step(a, &ss, (const uint8_t *)hello, sizeof hello - 1,
                                          "127.0.0.1:4567", &out, &outlen, why, sizeof why),
                 TERN_AUTH_STEP_REPLY, "%s", why);
    cr_assert_not_null(out);
    free(out);
    char proof[100] = "\x04{\"proof\":\"";
    for (int i = 0; i < 64; i++)
        strcat(proof, "0");
    strcat(proof, "\"}");
    int rc = tern_auth_hs_server_step(a, &ss, (const uint8_t *)proof, strlen(proof),
                                      "127.0.0.1:4567", &out, &outlen, why, sizeof why);
    cr_assert_eq(rc, TERN_ERR_AUTH);
    cr_assert_str_eq(why, "authentication failed: peer 127.0.0.1:4567 did not prove the shared "
                          "secret (check auth_secret_file)");
    cr_assert_eq(out[8], TERN_HS_AUTH, "the refusal is an Auth frame");
    cr_assert_eq(tern_auth_hs_refused((char *)out + 8, outlen - 8, "peer", err, sizeof err),
                 TERN_ERR_AUTH);
    free(out);
    /* Garbage in place of the hello: refused as well, never a crash. */
    tern_auth_session s2 = {.step = 1};
    cr_assert_eq(tern_auth_hs_server_step(a, &s2, (const uint8_t *)"\x04{", 2, "x", &out,
                                          &outlen, why, sizeof why),
                 TERN_ERR_AUTH);
    free(out);
    tern_auth_free(a);
}

Test(auth_exchange, peer_without_secret_gets_a_clear_refusal_in_its_frame_type)
{
    tern_auth *a = auth_of("the-shared-secret-0001");
    char why[512] = "";
    uint8_t *out = NULL;
    size_t outlen;
    for (int type = 0; type <= 4; type++) {
        tern_auth_session ss = {.step = 1};
        uint8_t probe[3] = {(uint8_t)type, '{', '}'};
        const uint8_t *p = type == 4 ? (const uint8_t *)"{}" : probe; /* 4: old protocol */
        size_t n = type == 4 ? 2 : 3;
        int rc = tern_auth_hs_server_step(a, &ss, p, n, "127.0.0.1:4567", &out, &outlen, why,
                                          sizeof why);
        cr_assert_eq(rc, TERN_ERR_AUTH);
        cr_assert(strstr(why, "127.0.0.1:4567") && strstr(why, "auth_secret_file"), "%s", why);
        size_t off = type == 4 ? 8 : 9;
        if (type < 4)
            cr_assert_eq(out[8], type, "answered in the request's type");
        else
            cr_assert_eq(out[8], '{', "old protocol answered without a type byte");
        cr_assert_eq(tern_auth_hs_refused((char *)out + off, outlen - off, "10.0.0.1:1", err,
                                          sizeof err),
                     TERN_ERR_AUTH);
        cr_assert(strstr(err, "authentication required"), "%s", err);
        free(out);
    }
    /* An ordinary reply is not a refusal. */
    cr_assert_eq(tern_auth_hs_refused("{\"ok\":true}", 11, "x", err, sizeof err), 0);
    tern_auth_free(a);
}

Test(auth_exchange, daemon_without_secret_makes_the_client_fail_clearly)
{
    tern_auth *a = auth_of("the-shared-secret-0001");
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    client_run c = {.a = a, .fd = sv[0]};
    pthread_t t;
    pthread_create(&t, NULL, client_main, &c);
    uint8_t buf[4096];
    cr_assert_gt(read_payload(sv[1], buf, sizeof buf), 0);
    cr_assert_eq(buf[0], TERN_HS_AUTH);
    /* What a daemon without a secret answers: byte 4 is old-protocol JSON to it. */
    const char js[] = "{\"reply_msg\":\"invalid JSON at byte 0: unexpected character\"}";
    uint8_t out[8 + sizeof js - 1];
    for (int k = 0; k < 8; k++)
        out[k] = (uint8_t)((sizeof js - 1) >> (8 * k));
    memcpy(out + 8, js, sizeof js - 1);
    tern_io_write_all(sv[1], out, sizeof out, 2000);
    pthread_join(t, NULL);
    cr_assert_eq(c.rc, TERN_ERR_AUTH);
    cr_assert(strstr(c.err, "did not prove the shared secret") &&
                  strstr(c.err, "no auth_secret_file or is an older tern"), "%s", c.err);
    close(sv[0]);
    close(sv[1]);
    tern_auth_free(a);
}

/* ---- engines with auth_secret_file ------------------------------------------------ */

#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>

#include "../transports/tcp/tcp_wire.h"
#include "desc/segment_desc.h"
#include "tern/tern.h"

static char *yaml_with(const char *secret_file)
{
    char *y = NULL;
    cr_assert_geq(asprintf(&y,
                           "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: tcp\n"
                           "io_timeout_ms: 2000\nconnect_timeout_ms: 2000\nretries: 0\n"
                           "log_level: error\n%s%s%s",
                           secret_file ? "auth_secret_file: \"" : "",
                           secret_file ? secret_file : "", secret_file ? "\"\n" : ""),
                  0);
    return y;
}

static tern_engine *engine_with(const char *secret_file)
{
    char *y = yaml_with(secret_file);
    char e[1024] = "";
    tern_engine *eng = tern_engine_create_from_yaml(y, "auth-test", e, sizeof e);
    cr_assert_not_null(eng, "%s", e);
    free(y);
    return eng;
}

Test(auth_engine, missing_secret_file_stops_the_engine_with_its_name)
{
    char *y = yaml_with("/nonexistent/tern.secret");
    char e[1024] = "";
    tern_engine *eng = tern_engine_create_from_yaml(y, "auth-test", e, sizeof e);
    cr_assert_null(eng);
    cr_assert(strstr(e, "/nonexistent/tern.secret"), "%s", e);
    free(y);
}

/* Write then read 64 KiB through a real tcp batch from A to B's buffer. */
static int batch_roundtrip(tern_engine *A, tern_segment_id s, uint8_t *local, uint64_t remote)
{
    for (int i = 0; i < 65536; i++)
        local[i] = (uint8_t)(i * 13 + 1);
    tern_request w = {.opcode = TERN_WRITE, .local = local, .segment = s, .remote = remote,
                      .length = 65536};
    tern_request r = w;
    r.opcode = TERN_READ;
    r.local = local + 65536;
    tern_batch *b = tern_batch_alloc(A, 2);
    int rc = tern_batch_submit(b, &w, 1) == 1 ? tern_batch_wait(b, 10000) : -1;
    if (rc == 0)
        rc = tern_batch_submit(b, &r, 1) == 1 ? tern_batch_wait(b, 10000) : -1;
    if (rc)
        snprintf(err, sizeof err, "%s | %s", tern_batch_error(b, 0), tern_batch_error(b, 1));
    tern_batch_free(b);
    return rc ? rc : memcmp(local, local + 65536, 65536) ? -100 : 0;
}

Test(auth_engine, same_secret_serves_probe_metadata_notify_and_batches)
{
    char *f = write_secret("a-good-shared-secret-for-tern\n");
    tern_engine *A = engine_with(f), *B = engine_with(f);
    uint8_t *la = malloc(1 << 17), *bb = calloc(1, 1 << 17);
    cr_assert_eq(tern_register_memory(A, la, 1 << 17, NULL), 0);
    cr_assert_eq(tern_register_memory(B, bb, 1 << 17, NULL), 0);
    tern_segment_id s = tern_segment_open(A, tern_engine_server_name(B));
    cr_assert_geq(s, 0, "%s", tern_engine_last_error(A));
    cr_assert_eq(batch_roundtrip(A, s, la, (uint64_t)(uintptr_t)bb), 0, "%s", err);
    cr_assert_eq(memcmp(la, bb, 65536), 0);
    cr_assert_eq(tern_notify_send(A, s, "n", "hello"), 0, "%s", tern_engine_last_error(A));
    /* A Probe with the secret is answered; without it, refused clearly. */
    tern_auth *a = NULL;
    cr_assert_eq(tern_auth_load(f, &a, err, sizeof err), 0);
    char *reply = NULL;
    size_t rl = 0;
    cr_assert_eq(tern_hs_request_auth(a, tern_engine_server_name(B), TERN_HS_PROBE, "", 0,
                                      &reply, &rl, 0, 2000, 2000, err, sizeof err),
                 0, "%s", err);
    cr_assert(strstr(reply, "\"ok\":true"), "%s", reply);
    free(reply);
    cr_assert_eq(tern_hs_request(tern_engine_server_name(B), TERN_HS_PROBE, "", 0, &reply, &rl,
                                 0, 2000, 2000, err, sizeof err),
                 TERN_ERR_AUTH);
    cr_assert(strstr(err, "authentication required"), "%s", err);
    cr_assert_null(reply);
    tern_auth_free(a);
    tern_engine_destroy(A);
    tern_engine_destroy(B);
    free(la);
    free(bb);
    unlink(f);
    free(f);
}

/* B in its own process (stderr captured): A's attempt to open it. */
static void open_against_peer(const char *a_secret, const char *b_secret, char *a_err,
                              size_t a_errlen, char *b_log, size_t b_loglen)
{
    int out[2], errp[2], in[2];
    cr_assert_eq(pipe(out), 0);
    cr_assert_eq(pipe(errp), 0);
    cr_assert_eq(pipe(in), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(errp[1], 2);
        close(out[0]);
        close(errp[0]);
        dup2(in[0], 0); /* it runs until we close the other end */
        close(in[1]);
        execl(TERN_FAULT_PEER, TERN_FAULT_PEER, b_secret, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(errp[1]);
    close(in[0]);
    FILE *o = fdopen(out[0], "r");
    char line[512] = "", name[128] = "";
    cr_assert_not_null(fgets(line, sizeof line, o));
    cr_assert_eq(sscanf(line, "READY %127s", name), 1, "%s", line);
    tern_engine *A = engine_with(a_secret);
    tern_segment_id s = tern_segment_open(A, name);
    cr_assert_lt(s, 0, "a peer with another or no secret was opened");
    snprintf(a_err, a_errlen, "%s", tern_engine_last_error(A));
    tern_engine_destroy(A);
    /* The peer's daemon logs the failed proof when it sees our connection
     * end, on its own thread: read its log until that line is there (at
     * most 5 s) before asking it to exit, or a loaded machine stops it
     * first. */
    size_t got = 0;
    b_log[0] = 0;
    for (int i = 0; i < 500 && !strstr(b_log, "authentication failed") && got < b_loglen - 1; i++) {
        struct pollfd pfd = {.fd = errp[0], .events = POLLIN};
        if (poll(&pfd, 1, 10) == 1) {
            ssize_t n = read(errp[0], b_log + got, b_loglen - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            b_log[got] = 0;
        }
    }
    close(in[1]); /* the peer exits cleanly */
    waitpid(pid, NULL, 0);
    ssize_t n = got < b_loglen - 1 ? read(errp[0], b_log + got, b_loglen - 1 - got) : 0;
    b_log[got + (n > 0 ? (size_t)n : 0)] = 0;
    fclose(o);
    close(errp[0]);
}

Test(auth_engine, different_secret_is_refused_on_both_sides)
{
    char *f1 = write_secret("first-shared-secret-xxxxx"), *f2 = write_secret("second-secret-yyyyyyyyy");
    char a_err[1024], b_log[8192];
    open_against_peer(f1, f2, a_err, sizeof a_err, b_log, sizeof b_log);
    cr_log_info("initiator: %s", a_err);
    cr_log_info("target's log: %s", b_log);
    cr_assert(strstr(a_err, "authentication failed: peer 127.0.0.1:") &&
                  strstr(a_err, "did not prove the shared secret") &&
                  strstr(a_err, "auth_secret_file"), "%s", a_err);
    /* The initiator stopped at the target's wrong proof: the target logs
     * that the peer never proved the secret. */
    cr_assert(strstr(b_log, "authentication failed: peer 127.0.0.1:") &&
                  strstr(b_log, "did not prove the shared secret"), "%s", b_log);
    unlink(f1);
    unlink(f2);
    free(f1);
    free(f2);
}

Test(auth_engine, peer_without_secret_is_refused_on_both_sides)
{
    char *f = write_secret("only-the-target-has-this-one");
    char a_err[1024], b_log[8192];
    open_against_peer(NULL, f, a_err, sizeof a_err, b_log, sizeof b_log);
    cr_log_info("initiator: %s", a_err);
    cr_log_info("target's log: %s", b_log);
    cr_assert(strstr(a_err, "authentication required"), "%s", a_err);
    cr_assert(strstr(b_log, "authentication failed: peer 127.0.0.1:") &&
                  strstr(b_log, "auth_secret_file"), "%s", b_log);
    unlink(f);
    free(f);
}

Test(auth_engine, target_without_secret_is_refused_by_an_initiator_with_one)
{
    tern_engine *B = engine_with(NULL);
    char *f = write_secret("only-the-initiator-has-it");
    tern_engine *A = engine_with(f);
    tern_segment_id s = tern_segment_open(A, tern_engine_server_name(B));
    cr_assert_lt(s, 0);
    cr_assert(strstr(tern_engine_last_error(A), "did not prove the shared secret"), "%s",
              tern_engine_last_error(A));
    tern_engine_destroy(A);
    tern_engine_destroy(B);
    unlink(f);
    free(f);
}

static int dial_port(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

Test(auth_engine, data_port_without_proof_can_neither_read_nor_write)
{
    char *f = write_secret("data-port-shared-secret-zz");
    tern_engine *B = engine_with(f);
    uint8_t *bb = malloc(1 << 16);
    memset(bb, 0x77, 1 << 16);
    cr_assert_eq(tern_register_memory(B, bb, 1 << 16, NULL), 0);
    char *json = NULL;
    cr_assert_eq(tern_segment_descriptor(B, TERN_LOCAL_SEGMENT, &json), 0);
    tern_segment_desc *d = NULL;
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &d, err, sizeof err), 0, "%s", err);
    uint16_t port = d->tcp_data_port;
    tern_segment_desc_free(d);
    free(json);
    cr_assert_gt(port, 0);
    for (int op = TERN_READ; op <= TERN_WRITE; op++) {
        int fd = dial_port(port);
        tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION, .opcode = (uint8_t)op,
                     .id = 42, .addr = (uint64_t)(uintptr_t)bb, .length = 4096};
        uint8_t h[TCP_REQ_SIZE + 4096];
        tcp_req_encode(h, &q);
        memset(h + TCP_REQ_SIZE, 0xEE, 4096);
        size_t n = op == TERN_WRITE ? sizeof h : TCP_REQ_SIZE;
        cr_assert_eq(tern_io_write_all(fd, h, n, 2000), 0);
        uint8_t rep[TCP_REP_SIZE];
        cr_assert_eq(tern_io_read_all(fd, rep, sizeof rep, 3000), 0, "no refusal");
        tcp_rep r;
        tcp_rep_decode(rep, &r);
        cr_assert_eq(r.status, TERN_ERR_AUTH, "status %d", r.status);
        cr_assert_eq(r.id, 42);
        uint8_t more;
        cr_assert_eq(recv(fd, &more, 1, 0), 0, "the connection must be closed, not served");
        close(fd);
    }
    /* A hello (version 2: nonce, our name, the segment asked for) followed
     * by a wrong proof: refused, memory untouched. */
    int fd = dial_port(port);
    uint8_t hello[40 + 512] = {0x54, 0x4E, 0x41, 0x55, 2}, ch[72],
            pr[40] = {0x54, 0x4E, 0x41, 0x50};
    snprintf((char *)hello + 40, 256, "127.0.0.1:1");
    snprintf((char *)hello + 296, 256, "%s", tern_engine_server_name(B));
    cr_assert_eq(tern_io_write_all(fd, hello, sizeof hello, 2000), 0);
    cr_assert_eq(tern_io_read_all(fd, ch, sizeof ch, 2000), 0);
    cr_assert_eq(ch[4] | ch[5] | ch[6] | ch[7], 0, "a hello asking for this segment is "
                 "challenged");
    cr_assert_eq(tern_io_write_all(fd, pr, sizeof pr, 2000), 0);
    uint8_t v[8];
    cr_assert_eq(tern_io_read_all(fd, v, sizeof v, 2000), 0);
    cr_assert_eq((int32_t)(v[4] | v[5] << 8 | v[6] << 16 | (uint32_t)v[7] << 24), TERN_ERR_AUTH);
    /* The step after the refusal: a WRITE on the refused connection is
     * never served (no reply, the connection ends) and writes nothing. */
    tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION, .opcode = TERN_WRITE,
                 .id = 43, .addr = (uint64_t)(uintptr_t)bb, .length = 4096};
    uint8_t wr[TCP_REQ_SIZE + 4096];
    tcp_req_encode(wr, &q);
    memset(wr + TCP_REQ_SIZE, 0xEE, 4096);
    if (send(fd, wr, sizeof wr, MSG_NOSIGNAL) < 0) { /* already closed: as it should be */
    }
    uint8_t rep[TCP_REP_SIZE];
    size_t got = 0;
    for (;;) { /* read until the connection ends (or 3 s pass) */
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 3000) <= 0)
            break;
        ssize_t n = recv(fd, rep + (got < sizeof rep ? got : 0),
                         got < sizeof rep ? sizeof rep - got : sizeof rep, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    cr_assert_eq(got, 0, "the refused connection answered a request (%zu bytes)", got);
    close(fd);
    /* A hello asking for another segment: no challenge (status
     * TERN_ERR_AUTH, no proof), closed. */
    fd = dial_port(port);
    snprintf((char *)hello + 296, 256, "127.0.0.1:2");
    cr_assert_eq(tern_io_write_all(fd, hello, sizeof hello, 2000), 0);
    cr_assert_eq(tern_io_read_all(fd, ch, sizeof ch, 2000), 0);
    cr_assert_eq((int32_t)(ch[4] | ch[5] << 8 | ch[6] << 16 | (uint32_t)ch[7] << 24),
                 TERN_ERR_AUTH, "a hello for another segment was challenged");
    for (int i = 40; i < 72; i++)
        cr_assert_eq(ch[i], 0, "a proof was given for another segment");
    cr_assert_eq(recv(fd, v, 1, 0), 0, "the connection must be closed");
    close(fd);
    for (int i = 0; i < (1 << 16); i++)
        cr_assert_eq(bb[i], 0x77, "memory written by an unauthenticated peer at %d", i);
    tern_engine_destroy(B);
    free(bb);
    unlink(f);
    free(f);
}
