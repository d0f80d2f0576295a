/* transports/tcp/tcp_auth.c: shared-secret authentication of TCP data
 * connections; frames and proofs in docs/protocol.md, "TCP data frames". */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
    uint64_t deadline = tern_kit_now_ms() + (uint64_t)ctx->io_timeout_ms;
    while (done < len) {
        uint64_t now = tern_kit_now_ms();
        if (now >= deadline)
            return TERN_ERR_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
        int n = ctx->sys.poll(&p, 1, (int)(deadline - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? TERN_ERR_TIMEOUT : TERN_ERR_IO;
        ssize_t r = out ? ctx->sys.send(fd, (char *)buf + done, len - done,
                                        MSG_NOSIGNAL | MSG_DONTWAIT)
                        : ctx->sys.recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
        if (r > 0)
            done += (size_t)r;
        else if (r == 0)
            return TERN_ERR_CLOSED;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return errno == ECONNRESET || errno == EPIPE ? TERN_ERR_CLOSED : TERN_ERR_IO;
    }
    return 0;
}

/* auth_mac(label 0 first second initiator 0 target 0): the proof covers
 * both nonces and both ends' segment names, so that an engine that was not
 * the one asked for (another engine's address in a descriptor, a relay)
 * cannot answer for it. */
static int tcp_auth_proof(const tcp_ctx *ctx, const char *label, const uint8_t *first,
                          const uint8_t *second, const char *initiator, const char *target,
                          uint8_t out[32])
{
    uint8_t msg[32 + 1 + 64 + 2 * TCP_AUTH_NAME_MAX];
    size_t l = strlen(label), il = strnlen(initiator, TCP_AUTH_NAME_MAX - 1),
           tl = strnlen(target, TCP_AUTH_NAME_MAX - 1);
    memcpy(msg, label, l);
    msg[l] = 0;
    memcpy(msg + l + 1, first, 32);
    memcpy(msg + l + 33, second, 32);
    size_t at = l + 65;
    memcpy(msg + at, initiator, il);
    msg[at + il] = 0;
    at += il + 1;
    memcpy(msg + at, target, tl);
    msg[at + tl] = 0;
    return ctx->host.auth_mac(ctx->host.host, msg, at + tl + 1, out);
}

/* Our own segment name (the engine's server name). */
static const char *tcp_auth_self(const tcp_ctx *ctx)
{
    return ctx->host.server_name ? ctx->host.server_name : "";
}

/* A NUL-padded name field of a HELLO as a C string ("" when unterminated). */
static void tcp_auth_name(const uint8_t *field, char out[TCP_AUTH_NAME_MAX])
{
    memcpy(out, field, TCP_AUTH_NAME_MAX);
    if (out[TCP_AUTH_NAME_MAX - 1])
        out[0] = 0;
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

/* The HELLO: version 2, our nonce, our segment name and the one we ask for. */
static int tcp_auth_hello(const tcp_ctx *ctx, const char *segment, uint8_t *hello,
                          uint8_t nc[32])
{
    memset(hello, 0, TCP_AUTH_HELLO_SIZE);
    tcp_put32(hello, TCP_AUTH_HELLO);
    hello[4] = 2;
    if (tcp_auth_nonce(nc) != 0)
        return TERN_ERR_IO;
    memcpy(hello + 8, nc, 32);
    snprintf((char *)hello + 40, TCP_AUTH_NAME_MAX, "%s", tcp_auth_self(ctx));
    snprintf((char *)hello + 40 + TCP_AUTH_NAME_MAX, TCP_AUTH_NAME_MAX, "%s", segment);
    return 0;
}

int tcp_auth_client(tcp_ctx *ctx, int fd, const char *peer, const char *segment, char *err,
                    size_t errlen)
{
    if (!tcp_auth_enabled(ctx))
        return 0;
    uint8_t hello[TCP_AUTH_HELLO_SIZE], ch[72], pr[40] = {0}, v[8], nc[32], want[32];
    const char *self = tcp_auth_self(ctx);
    segment = segment ? segment : "";
    if (strlen(self) >= TCP_AUTH_NAME_MAX || strlen(segment) >= TCP_AUTH_NAME_MAX)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "tcp: segment name longer than %d bytes",
                             TCP_AUTH_NAME_MAX - 1);
    if (tcp_auth_hello(ctx, segment, hello, nc) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_IO, "tcp: no random nonce for authentication");
    int rc = tcp_auth_io(ctx, fd, hello, sizeof hello, 1);
    if (!rc)
        rc = tcp_auth_io(ctx, fd, ch, sizeof ch, 0);
    if (rc || tcp_get32(ch) != TCP_AUTH_CHALLENGE)
        return tern_kit_errf(err, errlen, TERN_ERR_AUTH,
                             "authentication failed: peer %s did not prove the shared secret (its "
                             "data port %s; is auth_secret_file set on the peer?)",
                             peer,
                             rc ? "closed or did not answer the authentication request"
                                : "answered something else than a challenge");
    if ((int32_t)tcp_get32(ch + 4) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_AUTH,
                             "authentication failed: the engine at data port %s is not segment %s "
                             "(it refused to answer for that name: the descriptor of %s points at "
                             "another engine, or the peer is an older tern)",
                             peer, segment, segment);
    if (tcp_auth_proof(ctx, "tern-tcp-target", nc, ch + 8, self, segment, want) != 0 ||
        !tcp_auth_equal(want, ch + 40, 32))
        return tern_kit_errf(err, errlen, TERN_ERR_AUTH,
                             "authentication failed: peer %s did not prove the shared secret as "
                             "segment %s (check auth_secret_file on both sides, and that the "
                             "descriptor of %s is its own)",
                             peer, segment, segment);
    tcp_put32(pr, TCP_AUTH_PROOF);
    if (tcp_auth_proof(ctx, "tern-tcp-initiator", ch + 8, nc, self, segment, pr + 8) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_IO, "tcp: auth_mac failed");
    rc = tcp_auth_io(ctx, fd, pr, sizeof pr, 1);
    if (!rc)
        rc = tcp_auth_io(ctx, fd, v, sizeof v, 0);
    if (rc || tcp_get32(v) != TCP_AUTH_VERDICT || (int32_t)tcp_get32(v + 4) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_AUTH,
                             "authentication failed: peer %s refused our proof of the shared "
                             "secret (check auth_secret_file on both sides)",
                             peer);
    return 0;
}

/* Target, step 1: hello -> challenge (72 bytes) and our nonce.  A hello
 * of another version, or asking for another segment than ours, gets a
 * challenge with status TERN_ERR_AUTH and no proof. */
int tcp_auth_challenge(const tcp_ctx *ctx, const uint8_t *hello, uint8_t *ch, uint8_t *ns)
{
    char initiator[TCP_AUTH_NAME_MAX], asked[TCP_AUTH_NAME_MAX];
    memset(ch, 0, 72);
    tcp_put32(ch, TCP_AUTH_CHALLENGE);
    tcp_auth_name(hello + 40, initiator);
    tcp_auth_name(hello + 40 + TCP_AUTH_NAME_MAX, asked);
    if (hello[4] != 2 || strcmp(asked, tcp_auth_self(ctx)) != 0) {
        tcp_put32(ch + 4, (uint32_t)TERN_ERR_AUTH);
        return TERN_ERR_AUTH;
    }
    int rc = tcp_auth_nonce(ns);
    memcpy(ch + 8, ns, 32);
    if (!rc)
        rc = tcp_auth_proof(ctx, "tern-tcp-target", hello + 8, ns, initiator,
                            tcp_auth_self(ctx), ch + 40);
    return rc;
}

/* Target, step 2: is proof (40 bytes) the initiator's proof for the nonces
 * and names of its hello? */
int tcp_auth_verify(const tcp_ctx *ctx, const uint8_t *hello, const uint8_t *ns,
                    const uint8_t *proof)
{
    uint8_t want[32];
    char initiator[TCP_AUTH_NAME_MAX];
    if (tcp_get32(proof) != TCP_AUTH_PROOF)
        return TERN_ERR_PROTOCOL;
    tcp_auth_name(hello + 40, initiator);
    if (tcp_auth_proof(ctx, "tern-tcp-initiator", ns, hello + 8, initiator,
                       tcp_auth_self(ctx), want) != 0 ||
        !tcp_auth_equal(want, proof + 8, 32))
        return TERN_ERR_AUTH;
    return 0;
}
