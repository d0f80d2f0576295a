/* tests/test_auth.c: shared-secret authentication (core/auth.c).
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
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "handshake.h"
#include "tern/errors.h"
#include "util.h"

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
