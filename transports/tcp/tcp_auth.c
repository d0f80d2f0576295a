/* transports/tcp/tcp_auth.c: shared-secret authentication of TCP data
 * connections; frames and proofs in docs/protocol.md, "TCP data frames". */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "tcp_auth.h"
#include "tcp_internal.h"
#include "tcp_wire.h"

int tcp_auth_enabled(const tcp_ctx *ctx)
{
    uint8_t mac[32];
    return TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, auth_mac) &&
           ctx->host.auth_mac &&
           ctx->host.auth_mac(ctx->host.host, "", 0, mac) != TERN_ERR_NOT_SUPPORTED;
}

/* Move exactly len bytes with poll() and a deadline (blocking or not). */
static int tcp_auth_io(const tcp_ctx *ctx, int fd, void *buf, size_t len, int out)
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
static int tcp_auth_proof(const tcp_ctx *ctx, const char *label, const uint8_t *first,
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

static int tcp_auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0; /* constant time: no early exit on the first difference */
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

static int tcp_auth_nonce(uint8_t out[32])
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

int tcp_auth_client(tcp_ctx *ctx, int fd, const char *peer, char *err,
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

/* Target, step 1: hello (40 bytes) -> challenge (72 bytes) and our nonce. */
int tcp_auth_challenge(const tcp_ctx *ctx, const uint8_t *hello, uint8_t *ch, uint8_t *ns)
{
    memset(ch, 0, 72);
    tcp_put32(ch, TCP_AUTH_CHALLENGE);
    int rc = tcp_auth_nonce(ns);
    memcpy(ch + 8, ns, 32);
    if (!rc)
        rc = tcp_auth_proof(ctx, "tern-tcp-target", hello + 8, ns, ch + 40);
    return rc;
}

/* Target, step 2: is proof (40 bytes) the initiator's proof for the nonces? */
int tcp_auth_verify(const tcp_ctx *ctx, const uint8_t *ns, const uint8_t *nc,
                    const uint8_t *proof)
{
    uint8_t want[32];
    if (tcp_get32(proof) != TCP_AUTH_PROOF)
        return TERN_ERR_PROTOCOL;
    if (tcp_auth_proof(ctx, "tern-tcp-initiator", ns, nc, want) != 0 ||
        !tcp_auth_equal(want, proof + 8, 32))
        return TERN_ERR_AUTH;
    return 0;
}
