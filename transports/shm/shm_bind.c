/* transports/shm/shm_bind.c: the value a proof slot holds, bound to the
 * handshake's nonce, its direction and both ends' segment names
 * (docs/protocol.md, "Identity proof").  A process that relays a
 * handshake to a third engine cannot make that engine's slot match: the
 * engine binds its own name, the initiator checks the name it asked for.
 *
 * With auth_secret_file the binding is HMAC-SHA256 with the shared secret
 * (host service auth_mac); without it, SipHash-2-4 keyed by the fresh nonce
 * itself: the names are fixed before the nonce is drawn, so no chosen name
 * collides with another for it except by chance (2^-128). */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "shm_internal.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                            \
    do {                                                                                    \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                           \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                              \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                              \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                           \
    } while (0)

/* SipHash-2-4 (Aumasson and Bernstein) of msg with the 128-bit key k. */
static uint64_t siphash24(const uint64_t k[2], const uint8_t *msg, size_t len)
{
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t m = 0;
        for (int j = 0; j < 8; j++)
            m |= (uint64_t)msg[i + j] << (8 * j);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (int j = 0; i + (size_t)j < len; j++)
        b |= (uint64_t)msg[i + j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* label 0 nonce initiator 0 target 0 into buf; its length, 0 if too long. */
static size_t bind_msg(const char *label, const uint64_t nonce[2], const char *initiator,
                       const char *target, uint8_t *buf, size_t cap)
{
    size_t l = strlen(label), il = strlen(initiator), tl = strlen(target);
    size_t n = l + 1 + 16 + il + 1 + tl + 1;
    if (n > cap)
        return 0;
    memcpy(buf, label, l + 1);
    for (int i = 0; i < 16; i++)
        buf[l + 1 + i] = (uint8_t)(nonce[i / 8] >> (8 * (i % 8)));
    memcpy(buf + l + 17, initiator, il + 1);
    memcpy(buf + l + 18 + il, target, tl + 1);
    return n;
}

int shm_bind(const tern_host_services *h, int to_target, const uint64_t nonce[2],
             const char *initiator, const char *target, uint64_t out[2])
{
    uint8_t msg[64 + 16 + 2 * 512], mac[32];
    size_t n = bind_msg(to_target ? "tern-shm-target" : "tern-shm-initiator", nonce,
                        initiator ? initiator : "", target ? target : "", msg, sizeof msg);
    if (!n)
        return TERN_ERR_INVAL;
    int rc = TERN_HAS_MEMBER(h->struct_size, tern_host_services, auth_mac) && h->auth_mac
                 ? h->auth_mac(h->host, msg, n, mac)
                 : TERN_ERR_NOT_SUPPORTED;
    if (rc == 0) {
        memcpy(out, mac, 16);
        return 0;
    }
    if (rc != TERN_ERR_NOT_SUPPORTED)
        return rc; /* a secret that does not work: the proof must fail */
    msg[0] ^= 1; /* two outputs from one key: differ in the first byte */
    out[0] = siphash24(nonce, msg, n);
    msg[0] ^= 3;
    out[1] = siphash24(nonce, msg, n);
    return 0;
}
