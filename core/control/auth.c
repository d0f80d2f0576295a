/* core/control/auth.c: shared-secret authentication (see auth.h for the protocol).
 * HMAC-SHA256 and random nonces come from OpenSSL's libcrypto; the secret
 * lives only in the tern_auth object (wiped on free). */
#include "control/auth.h"

#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "control/frames.h"
#include "tern/errors.h"
#include "base/util.h"

#define HS_SERVER_LABEL "tern-hs-server"
#define HS_CLIENT_LABEL "tern-hs-client"
/* A secret file larger than this is refused unread (the secret itself is at
 * most TERN_AUTH_SECRET_MAX bytes; the rest allows trailing whitespace). */
#define TERN_AUTH_FILE_MAX (64u << 10)
#define AUTH_HINT "check auth_secret_file on both sides: the same secret, readable"

struct tern_auth {
    size_t len;
    uint8_t secret[TERN_AUTH_SECRET_MAX];
};

/* ---- secret ------------------------------------------------------------------ */

int tern_auth_from_secret(const void *secret, size_t len, tern_auth **out, char *err,
                          size_t errlen)
{
    if (!secret || !out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "auth: no secret");
    if (len < TERN_AUTH_SECRET_MIN || len > TERN_AUTH_SECRET_MAX)
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "auth: the shared secret is %zu bytes; it must be %d..%d bytes "
                         "(e.g. head -c 32 /dev/urandom | base64 > secret)",
                         len, TERN_AUTH_SECRET_MIN, TERN_AUTH_SECRET_MAX);
    tern_auth *a = calloc(1, sizeof *a);
    if (!a)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "auth: out of memory");
    memcpy(a->secret, secret, len);
    a->len = len;
    *out = a;
    return 0;
}

int tern_auth_load(const char *path, tern_auth **out, char *err, size_t errlen)
{
    if (!path || !*path || !out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "auth_secret_file: no file name");
    char *data = NULL, msg[512];
    size_t len = 0;
    if (tern_file_read_capped(path, TERN_AUTH_FILE_MAX, &data, &len, msg, sizeof msg) != 0)
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "auth_secret_file %s: cannot read the shared secret: %s", path, msg);
    while (len && strchr(" \t\r\n", data[len - 1]))
        len--; /* "echo secret > file" adds a newline the peer may not have */
    int rc = tern_auth_from_secret(data, len, out, msg, sizeof msg);
    OPENSSL_cleanse(data, len);
    free(data);
    if (rc)
        return tern_errf(err, errlen, rc, "auth_secret_file %s: %s", path, msg);
    return 0;
}

void tern_auth_free(tern_auth *a)
{
    if (!a)
        return;
    OPENSSL_cleanse(a, sizeof *a);
    free(a);
}

/* ---- primitives ---------------------------------------------------------------- */

int tern_auth_mac(const tern_auth *a, const void *msg, size_t len, uint8_t out[TERN_AUTH_MAC])
{
    if (!a || (!msg && len))
        return TERN_ERR_INVAL;
    unsigned int n = 0;
    static const uint8_t empty[1];
    if (!HMAC(EVP_sha256(), a->secret, (int)a->len, msg ? msg : empty, len, out, &n) ||
        n != TERN_AUTH_MAC)
        return TERN_ERR_IO;
    return 0;
}

int tern_auth_nonce(uint8_t out[TERN_AUTH_NONCE])
{
    return RAND_bytes(out, TERN_AUTH_NONCE) == 1 ? 0 : TERN_ERR_IO;
}

int tern_auth_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int tern_auth_proof(const tern_auth *a, const char *label, const uint8_t first[TERN_AUTH_NONCE],
                    const uint8_t second[TERN_AUTH_NONCE], uint8_t out[TERN_AUTH_MAC])
{
    uint8_t msg[64 + 1 + 2 * TERN_AUTH_NONCE];
    size_t l = strlen(label);
    if (l > 64)
        return TERN_ERR_INVAL;
    memcpy(msg, label, l);
    msg[l] = 0;
    memcpy(msg + l + 1, first, TERN_AUTH_NONCE);
    memcpy(msg + l + 1 + TERN_AUTH_NONCE, second, TERN_AUTH_NONCE);
    return tern_auth_mac(a, msg, l + 1 + 2 * TERN_AUTH_NONCE, out);
}

int tern_auth_check(const tern_auth *a, const char *label, const uint8_t first[TERN_AUTH_NONCE],
                    const uint8_t second[TERN_AUTH_NONCE], const uint8_t proof[TERN_AUTH_MAC])
{
    uint8_t want[TERN_AUTH_MAC];
    if (tern_auth_proof(a, label, first, second, want) != 0)
        return TERN_ERR_AUTH;
    int ok = tern_auth_equal(want, proof, TERN_AUTH_MAC);
    OPENSSL_cleanse(want, sizeof want);
    return ok ? 0 : TERN_ERR_AUTH;
}

void tern_auth_hex(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int tern_auth_unhex(const char *hex, size_t hexlen, uint8_t *out, size_t n)
{
    if (!hex || hexlen != 2 * n)
        return TERN_ERR_PROTOCOL;
    for (size_t i = 0; i < n; i++) {
        int h = hexval(hex[2 * i]), l = hexval(hex[2 * i + 1]);
        if (h < 0 || l < 0)
            return TERN_ERR_PROTOCOL;
        out[i] = (uint8_t)(h << 4 | l);
    }
    return 0;
}

/* ---- JSON helpers --------------------------------------------------------------- */

static json_object *parse(const char *json, size_t len)
{
    if (len > 64 * 1024)
        return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, json, (int)len);
    if (json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    if (o && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

static const char *get_str(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* A 32-byte hex member. */
static int get_bytes(json_object *o, const char *key, uint8_t out[32])
{
    const char *s = get_str(o, key);
    return s ? tern_auth_unhex(s, strlen(s), out, 32) : TERN_ERR_PROTOCOL;
}

static int refusal_frame(int type, const char *msg, int required, uint8_t **out, size_t *outlen)
{
    json_object *o = tern_hs_refusal_object(msg);
    if (o && required)
        json_object_object_add(o, "auth_required", json_object_new_boolean(1));
    int rc = tern_hs_frame_of(type, o, out, outlen);
    json_object_put(o);
    return rc;
}

/* ---- the daemon's side ----------------------------------------------------------- */

static int server_hello(const tern_auth *a, tern_auth_session *ss, json_object *o,
                        uint8_t **out, size_t *outlen)
{
    const char *alg = get_str(o, "auth");
    if (!alg || strcmp(alg, "hmac-sha256") || get_bytes(o, "nonce", ss->nc) != 0)
        return TERN_ERR_PROTOCOL;
    uint8_t proof[TERN_AUTH_MAC];
    char hex[2 * TERN_AUTH_NONCE + 1];
    if (tern_auth_nonce(ss->ns) != 0 ||
        tern_auth_proof(a, HS_SERVER_LABEL, ss->nc, ss->ns, proof) != 0)
        return TERN_ERR_IO;
    json_object *r = json_object_new_object();
    tern_auth_hex(ss->ns, TERN_AUTH_NONCE, hex);
    json_object_object_add(r, "nonce", json_object_new_string(hex));
    tern_auth_hex(proof, TERN_AUTH_MAC, hex);
    json_object_object_add(r, "proof", json_object_new_string(hex));
    int rc = tern_hs_frame_of(TERN_HS_AUTH, r, out, outlen);
    json_object_put(r);
    ss->step = 2;
    return rc ? rc : TERN_AUTH_STEP_REPLY;
}

/* A hello or proof frame that is not what docs/protocol.md ("Handshake
 * frames", Auth) describes: say so, rather than blame the secret. */
static int malformed(int step, const char *peer, uint8_t **out, size_t *outlen, char *err,
                     size_t errlen)
{
    const char *want = step == 1 ? "hello {\"auth\":\"hmac-sha256\",\"nonce\":<64 hex digits>}"
                                 : "proof {\"proof\":<64 hex digits>}";
    char msg[256];
    snprintf(msg, sizeof msg, "authentication failed: malformed authentication %s expected",
             want);
    refusal_frame(TERN_HS_AUTH, msg, 0, out, outlen);
    return tern_errf(err, errlen, TERN_ERR_AUTH,
                     "authentication failed: peer %s sent a malformed authentication frame "
                     "(a %s was expected)", peer, want);
}

int tern_auth_hs_server_step(const tern_auth *a, tern_auth_session *ss, const uint8_t *payload,
                             size_t len, const char *peer, uint8_t **out, size_t *outlen,
                             char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    peer = peer ? peer : "?";
    if (!len || payload[0] != TERN_HS_AUTH) {
        /* An unauthenticated request: answer in its own type (old protocol
         * included) so that a peer without the secret gets a clear message. */
        int type = len && payload[0] <= TERN_HS_PROBE ? payload[0] : -1;
        refusal_frame(type,
                      "authentication required: this engine only serves peers that prove "
                      "the shared secret (set auth_secret_file to the same secret)",
                      1, out, outlen);
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "authentication failed: peer %s did not prove the shared secret "
                         "(it sent no authentication; check auth_secret_file)", peer);
    }
    json_object *o = parse((const char *)payload + 1, len - 1);
    int rc = TERN_ERR_PROTOCOL, step = ss->step;
    if (o && ss->step == 1) {
        rc = server_hello(a, ss, o, out, outlen);
    } else if (o && ss->step == 2) {
        uint8_t proof[TERN_AUTH_MAC];
        rc = get_bytes(o, "proof", proof);
        if (rc == 0)
            rc = tern_auth_check(a, HS_CLIENT_LABEL, ss->ns, ss->nc, proof);
        if (rc == 0) {
            ss->step = 0;
            rc = TERN_AUTH_STEP_DONE;
        }
    }
    json_object_put(o);
    if (rc >= 0)
        return rc;
    if (rc == TERN_ERR_PROTOCOL) /* not a proof that failed: a frame we cannot read */
        return malformed(step, peer, out, outlen, err, errlen);
    refusal_frame(TERN_HS_AUTH,
                  "authentication failed: the proof of the shared secret did not match "
                  "(check auth_secret_file on both sides)", 0, out, outlen);
    return tern_errf(err, errlen, TERN_ERR_AUTH,
                     "authentication failed: peer %s did not prove the shared secret "
                     "(check auth_secret_file)", peer);
}

/* ---- the client's side ------------------------------------------------------------ */

static int send_json(int fd, json_object *o, int io_ms)
{
    const char *js = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    return js ? tern_hs_frame_send(fd, TERN_HS_AUTH, js, strlen(js), io_ms) : TERN_ERR_NOMEM;
}

static int client_fail(const char *server, const char *why, char *err, size_t errlen)
{
    return tern_errf(err, errlen, TERN_ERR_AUTH,
                     "authentication failed: peer %s did not prove the shared secret (%s; "
                     AUTH_HINT ")", server, why);
}

/* Check the daemon's challenge and answer it. */
static int client_answer(const tern_auth *a, int fd, const char *server, const uint8_t nc[32],
                         const char *p, size_t plen, int io_ms, char *err, size_t errlen)
{
    size_t off = plen && (uint8_t)p[0] <= TERN_HS_AUTH ? 1 : 0; /* old-protocol reply: none */
    json_object *o = parse(p + off, plen - off);
    uint8_t ns[32], proof[32];
    char why[400];
    int rc = TERN_ERR_AUTH;
    const char *msg = get_str(o, "reply_msg");
    if (!o) {
        snprintf(why, sizeof why, "it did not answer the authentication request");
    } else if (off && (uint8_t)p[0] != TERN_HS_AUTH) {
        snprintf(why, sizeof why, "it answered with frame type %d", (uint8_t)p[0]);
    } else if (!off) { /* an old-protocol reply: the daemon has no secret (or is older) */
        snprintf(why, sizeof why, "it answered without authenticating: it has no "
                 "auth_secret_file or is an older tern (%.200s)", msg ? msg : "no reply_msg");
    } else if (msg && *msg) {
        snprintf(why, sizeof why, "it answered: %.300s", msg);
    } else if (get_bytes(o, "nonce", ns) || get_bytes(o, "proof", proof)) {
        snprintf(why, sizeof why, "its answer has no nonce and proof");
    } else if (tern_auth_check(a, HS_SERVER_LABEL, nc, ns, proof) != 0) {
        snprintf(why, sizeof why, "its proof does not match our secret");
    } else {
        rc = 0;
    }
    json_object_put(o);
    if (rc)
        return client_fail(server, why, err, errlen);
    char hex[65];
    if (tern_auth_proof(a, HS_CLIENT_LABEL, ns, nc, proof) != 0)
        return tern_errf(err, errlen, TERN_ERR_IO, "auth: HMAC failed");
    tern_auth_hex(proof, 32, hex);
    json_object *r = json_object_new_object();
    json_object_object_add(r, "proof", json_object_new_string(hex));
    rc = send_json(fd, r, io_ms);
    json_object_put(r);
    if (rc)
        return tern_errf(err, errlen, rc, "handshake with %s: sending the authentication "
                         "proof failed: %s", server, tern_strerror(rc));
    return 0;
}

int tern_auth_hs_client(const tern_auth *a, int fd, const char *server, uint64_t max_frame,
                        int io_timeout_ms, char *err, size_t errlen)
{
    uint8_t nc[32];
    char hex[65];
    if (tern_auth_nonce(nc) != 0)
        return tern_errf(err, errlen, TERN_ERR_IO, "auth: no random nonce (RAND_bytes failed)");
    tern_auth_hex(nc, 32, hex);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "auth", json_object_new_string("hmac-sha256"));
    json_object_object_add(o, "nonce", json_object_new_string(hex));
    int rc = send_json(fd, o, io_timeout_ms);
    json_object_put(o);
    uint8_t *p = NULL;
    uint64_t plen = 0;
    int stage;
    if (!rc)
        rc = tern_hs_frame_recv(fd, max_frame ? max_frame : TERN_HS_DEFAULT_MAX_FRAME,
                                io_timeout_ms, &p, &plen, &stage);
    if (rc == TERN_ERR_CLOSED || rc == TERN_ERR_PROTOCOL)
        return client_fail(server, rc == TERN_ERR_CLOSED
                                       ? "it closed the connection during authentication"
                                       : "it answered with a malformed frame",
                           err, errlen);
    if (rc)
        return tern_errf(err, errlen, rc, "handshake with %s: authentication exchange: %s",
                         server, tern_strerror(rc));
    rc = client_answer(a, fd, server, nc, (const char *)p, (size_t)plen, io_timeout_ms, err,
                       errlen);
    free(p);
    return rc;
}

int tern_auth_hs_refused(const char *reply, size_t len, const char *server, char *err,
                         size_t errlen)
{
    if (!reply || !len || !memmem(reply, len, "authentication", 14))
        return 0; /* cheap test first: most replies are not refusals */
    size_t off = (uint8_t)reply[0] == TERN_HS_AUTH ? 1 : 0;
    json_object *o = parse(reply + off, len - off);
    json_object *req = NULL;
    const char *msg = get_str(o, "reply_msg");
    int required = o && json_object_object_get_ex(o, "auth_required", &req) &&
                   json_object_get_boolean(req);
    int rc = 0;
    if (msg && (required || off))
        rc = tern_errf(err, errlen, TERN_ERR_AUTH, "%s refused us: %s", server ? server : "peer",
                       msg);
    json_object_put(o);
    return rc;
}
