/* core/control/auth.h: optional shared-secret authentication (config key
 * auth_secret_file).
 *
 * Both directions prove knowledge of the secret with HMAC-SHA256 over two
 * fresh random nonces (challenge/response), compared in constant time.  A
 * proof is HMAC(secret, label || 0x00 || nonce_a || nonce_b), with a label
 * per protocol and direction so that no proof can be replayed elsewhere.
 *
 * Handshake (frame type TERN_HS_AUTH = 4; a first byte of 4 was never valid
 * old-protocol JSON, so peers without authentication see it as garbage):
 *   client -> daemon  Auth {"auth":"hmac-sha256","nonce":<Nc hex>}
 *   daemon -> client  Auth {"nonce":<Ns hex>,"proof":<HMAC("tern-hs-server",Nc,Ns) hex>}
 *   client -> daemon  Auth {"proof":<HMAC("tern-hs-client",Ns,Nc) hex>}
 *                     then its request frame, answered as usual.
 * A daemon with a secret refuses any other first frame with a reply of the
 * request's type {"reply_msg":"authentication required: ...",
 * "auth_required":true}; a bad proof gets an Auth frame {"reply_msg":...}
 * and the connection is closed.  Without a secret nothing changes on the
 * wire (old-protocol peers keep working); such a daemon answers an Auth
 * frame like any byte > 3, as old-protocol JSON ("invalid JSON"), which the
 * client reports as "it has no auth_secret_file or is an older tern".
 *
 * TCP data connections use the same exchange in binary (tcp_auth.h) through
 * the host services' auth_mac, so plugins do not link libcrypto. */
#ifndef TERN_CORE_CONTROL_AUTH_H
#define TERN_CORE_CONTROL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "control/frames.h"

#define TERN_AUTH_NONCE 32
#define TERN_AUTH_MAC 32
#define TERN_AUTH_SECRET_MIN 16
#define TERN_AUTH_SECRET_MAX 4096

typedef struct tern_auth tern_auth;

/* Read the secret from a file (trailing whitespace stripped); refuses a
 * missing, empty, too short (< 16 bytes) or too long file with a message
 * that names the file and what to do. */
int tern_auth_load(const char *path, tern_auth **out, char *err, size_t errlen);
/* The same from bytes held in memory (tests). */
int tern_auth_from_secret(const void *secret, size_t len, tern_auth **out, char *err,
                          size_t errlen);
void tern_auth_free(tern_auth *a);

/* HMAC-SHA256(secret, msg). */
int tern_auth_mac(const tern_auth *a, const void *msg, size_t len, uint8_t out[TERN_AUTH_MAC]);
/* Cryptographically random bytes (OpenSSL RAND_bytes). */
int tern_auth_nonce(uint8_t out[TERN_AUTH_NONCE]);
/* Constant-time comparison: 1 when equal. */
int tern_auth_equal(const void *a, const void *b, size_t n);
/* HMAC(secret, label || 0 || first || second). */
int tern_auth_proof(const tern_auth *a, const char *label, const uint8_t first[TERN_AUTH_NONCE],
                    const uint8_t second[TERN_AUTH_NONCE], uint8_t out[TERN_AUTH_MAC]);
/* 0 when proof is right, else TERN_ERR_AUTH. */
int tern_auth_check(const tern_auth *a, const char *label, const uint8_t first[TERN_AUTH_NONCE],
                    const uint8_t second[TERN_AUTH_NONCE], const uint8_t proof[TERN_AUTH_MAC]);

/* Lower-case hex of n bytes into out (2n+1 bytes); and back (exactly 2n
 * hex digits, else TERN_ERR_PROTOCOL). */
void tern_auth_hex(const uint8_t *in, size_t n, char *out);
int tern_auth_unhex(const char *hex, size_t hexlen, uint8_t *out, size_t n);

/* ---- handshake: the daemon's side ---------------------------------------- */

/* Per-connection state of the daemon's exchange. */
typedef struct tern_auth_session {
    int step;                       /* 1: expect hello, 2: expect proof, 0: done */
    uint8_t nc[TERN_AUTH_NONCE];    /* the client's nonce */
    uint8_t ns[TERN_AUTH_NONCE];    /* ours */
} tern_auth_session;

enum {
    TERN_AUTH_STEP_REPLY = 0,   /* send *out, then read the next frame */
    TERN_AUTH_STEP_DONE = 1,    /* authenticated: read the request frame */
    /* < 0: refused; send *out (if any), then close; err holds the log line */
};

/* Feed one complete frame payload (type byte included) read by the daemon
 * from `peer` ("ip:port", for messages) while ss->step != 0.  *out is a
 * whole encoded frame (malloc()ed) or NULL.  `self` names this engine. */
int tern_auth_hs_server_step(const tern_auth *a, tern_auth_session *ss, const uint8_t *payload,
                             size_t len, const char *peer, uint8_t **out, size_t *outlen,
                             char *err, size_t errlen);

/* ---- handshake: the client's side ------------------------------------------ */

/* Run the client's exchange on a connected socket (before the request
 * frame): hello, check the daemon's proof, send ours.  TERN_ERR_AUTH with
 * "authentication failed: peer <server> did not prove the shared secret
 * (check auth_secret_file ...)" when the daemon cannot prove it. */
int tern_auth_hs_client(const tern_auth *a, int fd, const char *server, uint64_t max_frame,
                        int io_timeout_ms, char *err, size_t errlen);
/* A reply that is the daemon's "authentication required" refusal (or an
 * Auth-frame refusal after our proof): TERN_ERR_AUTH with the message in
 * err; otherwise 0. */
int tern_auth_hs_refused(const char *reply, size_t len, const char *server, char *err,
                         size_t errlen);

#endif
