/* transports/tcp/tcp_auth.h: shared-secret authentication of TCP data
 * connections (issue 8; owner: hardening).  Used only when the host
 * services offer auth_mac and it works (the engine has auth_secret_file):
 * the plugin never sees the secret and does not link libcrypto.
 *
 * Right after connect, before any request (all integers little-endian):
 *   initiator -> target  HELLO     u32 "TNAU" 0x55414E54, u8 version 1, u8 0,
 *                                  u16 0, u8 nc[32]                  (40 bytes)
 *   target -> initiator  CHALLENGE u32 "TNAC", i32 status, u8 ns[32],
 *                                  u8 proof_t[32]                    (72 bytes)
 *   initiator -> target  PROOF     u32 "TNAP", u32 0, u8 proof_i[32] (40 bytes)
 *   target -> initiator  VERDICT   u32 "TNAV", i32 status            (8 bytes)
 * proof_t = auth_mac("tern-tcp-target" 0 nc ns), proof_i =
 * auth_mac("tern-tcp-initiator" 0 ns nc), compared in constant time; each
 * side checks the other's proof, so both prove the secret.  A target with a
 * secret that reads an ordinary request header first answers that request
 * with status TERN_ERR_AUTH and closes: a peer without the secret can
 * neither read nor write anything.  Nonces come from getrandom(2). */
#ifndef TERN_TCP_AUTH_H
#define TERN_TCP_AUTH_H

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "tcp_internal.h"
#include "tcp_wire.h"

#define TCP_AUTH_HELLO 0x55414E54u
#define TCP_AUTH_CHALLENGE 0x43414E54u
#define TCP_AUTH_PROOF 0x50414E54u
#define TCP_AUTH_VERDICT 0x56414E54u

/* Is authentication on?  Only an explicit TERN_ERR_NOT_SUPPORTED (no
 * secret configured) turns it off: a secret that fails to load must not
 * leave the data port open, its proofs just fail. */
static inline int tcp_auth_enabled(const tcp_ctx *ctx)
{
    uint8_t mac[32];
    return TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, auth_mac) &&
           ctx->host.auth_mac &&
           ctx->host.auth_mac(ctx->host.host, "", 0, mac) != TERN_ERR_NOT_SUPPORTED;
}

/* Move exactly len bytes with poll() and a deadline (blocking or not). */
static inline int tcp_auth_io(const tcp_ctx *ctx, int fd, void *buf, size_t len, int out)
{
    size_t done = 0;
    uint64_t deadline = tcp_now_ms() + (uint64_t)ctx->io_timeout_ms;
    while (done < len) {
        uint64_t now = tcp_now_ms();
        if (now >= deadline)
            return TERN_ERR_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
        int n = poll(&p, 1, (int)(deadline - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? TERN_ERR_TIMEOUT : TERN_ERR_IO;
        ssize_t r = out ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
        if (r > 0)
            done += (size_t)r;
        else if (r == 0)
            return TERN_ERR_CLOSED;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return errno == ECONNRESET || errno == EPIPE ? TERN_ERR_CLOSED : TERN_ERR_IO;
    }
    return 0;
}

/* auth_mac(label 0 first second). */
static inline int tcp_auth_proof(const tcp_ctx *ctx, const char *label, const uint8_t *first,
                                 const uint8_t *second, uint8_t out[32])
{
    uint8_t msg[32 + 1 + 64];
    size_t l = strlen(label);
    memcpy(msg, label, l);
    msg[l] = 0;
    memcpy(msg + l + 1, first, 32);
    memcpy(msg + l + 33, second, 32);
    return ctx->host.auth_mac(ctx->host.host, msg, l + 65, out);
}

static inline int tcp_auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0; /* constant time: no early exit on the first difference */
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

static inline int tcp_auth_nonce(uint8_t out[32])
{
    size_t got = 0;
    while (got < 32) {
        ssize_t r = getrandom(out + got, 32 - got, 0);
        if (r < 0 && errno != EINTR)
            return TERN_ERR_IO;
        if (r > 0)
            got += (size_t)r;
    }
    return 0;
}

/* Initiator: prove the secret and check the target's proof, right after
 * connect.  0, or TERN_ERR_AUTH with the reason in err. */
static inline int tcp_auth_client(tcp_ctx *ctx, int fd, const char *peer, char *err,
                                  size_t errlen)
{
    if (!tcp_auth_enabled(ctx))
        return 0;
    uint8_t hello[40] = {0}, ch[72], pr[40] = {0}, v[8], nc[32], want[32];
    tcp_put32(hello, TCP_AUTH_HELLO);
    hello[4] = 1;
    if (tcp_auth_nonce(nc) != 0)
        return tcp_errf(err, errlen, TERN_ERR_IO, "tcp: no random nonce for authentication");
    memcpy(hello + 8, nc, 32);
    int rc = tcp_auth_io(ctx, fd, hello, sizeof hello, 1);
    if (!rc)
        rc = tcp_auth_io(ctx, fd, ch, sizeof ch, 0);
    if (rc || tcp_get32(ch) != TCP_AUTH_CHALLENGE)
        return tcp_errf(err, errlen, TERN_ERR_AUTH,
                        "authentication failed: peer %s did not prove the shared secret (its "
                        "data port %s; is auth_secret_file set on the peer?)", peer,
                        rc ? "closed or did not answer the authentication request"
                           : "answered something else than a challenge");
    if ((int32_t)tcp_get32(ch + 4) != 0 ||
        tcp_auth_proof(ctx, "tern-tcp-target", nc, ch + 8, want) != 0 ||
        !tcp_auth_equal(want, ch + 40, 32))
        return tcp_errf(err, errlen, TERN_ERR_AUTH,
                        "authentication failed: peer %s did not prove the shared secret "
                        "(check auth_secret_file on both sides)", peer);
    tcp_put32(pr, TCP_AUTH_PROOF);
    if (tcp_auth_proof(ctx, "tern-tcp-initiator", ch + 8, nc, pr + 8) != 0)
        return tcp_errf(err, errlen, TERN_ERR_IO, "tcp: auth_mac failed");
    rc = tcp_auth_io(ctx, fd, pr, sizeof pr, 1);
    if (!rc)
        rc = tcp_auth_io(ctx, fd, v, sizeof v, 0);
    if (rc || tcp_get32(v) != TCP_AUTH_VERDICT || (int32_t)tcp_get32(v + 4) != 0)
        return tcp_errf(err, errlen, TERN_ERR_AUTH,
                        "authentication failed: peer %s refused our proof of the shared "
                        "secret (check auth_secret_file on both sides)", peer);
    return 0;
}

/* Target: before serving a connection.  0 when authenticated (or when
 * authentication is off); else the connection must be closed.  A peer that
 * sends an ordinary request gets that request refused with TERN_ERR_AUTH. */
static inline int tcp_auth_server(tcp_ctx *ctx, int fd, const char *peer)
{
    if (!tcp_auth_enabled(ctx))
        return 0;
    uint8_t hello[40], ch[72] = {0}, pr[40], v[8] = {0}, ns[32], want[32];
    int rc = tcp_auth_io(ctx, fd, hello, TCP_REQ_SIZE, 0);
    if (rc == 0 && tcp_get32(hello) != TCP_AUTH_HELLO) {
        if (tcp_get32(hello) == TCP_REQ_MAGIC) { /* a peer without the secret */
            tcp_req q;
            tcp_req_decode(hello, &q);
            tcp_rep r = {.magic = TCP_REP_MAGIC, .version = TCP_WIRE_VERSION,
                         .opcode = q.opcode, .status = TERN_ERR_AUTH, .id = q.id};
            uint8_t rep[TCP_REP_SIZE];
            tcp_rep_encode(rep, &r);
            tcp_auth_io(ctx, fd, rep, sizeof rep, 1);
        }
        rc = TERN_ERR_AUTH;
    }
    if (rc == 0)
        rc = tcp_auth_io(ctx, fd, hello + TCP_REQ_SIZE, sizeof hello - TCP_REQ_SIZE, 0);
    if (rc == 0) {
        tcp_put32(ch, TCP_AUTH_CHALLENGE);
        rc = tcp_auth_nonce(ns);
        memcpy(ch + 8, ns, 32);
        if (!rc)
            rc = tcp_auth_proof(ctx, "tern-tcp-target", hello + 8, ns, ch + 40);
        if (!rc)
            rc = tcp_auth_io(ctx, fd, ch, sizeof ch, 1);
        if (!rc)
            rc = tcp_auth_io(ctx, fd, pr, sizeof pr, 0);
        if (!rc && (tcp_get32(pr) != TCP_AUTH_PROOF ||
                    tcp_auth_proof(ctx, "tern-tcp-initiator", ns, hello + 8, want) != 0 ||
                    !tcp_auth_equal(want, pr + 8, 32)))
            rc = TERN_ERR_AUTH;
        tcp_put32(v, TCP_AUTH_VERDICT);
        tcp_put32(v + 4, (uint32_t)(rc == 0 ? 0 : TERN_ERR_AUTH));
        if (rc == 0 || rc == TERN_ERR_AUTH)
            tcp_auth_io(ctx, fd, v, sizeof v, 1);
    }
    if (rc)
        tcp_log(ctx, TERN_LOG_WARN,
                "authentication failed: peer %s did not prove the shared secret on the data "
                "port (check auth_secret_file): %s", peer, tcp_errname(rc));
    return rc;
}

#endif
