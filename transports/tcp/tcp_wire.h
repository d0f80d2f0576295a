/* transports/tcp/tcp_wire.h: encoding of the TCP transport's frames.  The
 * format and the rules both sides follow are in docs/protocol.md, "TCP data
 * frames": a 32-byte little-endian request header (+ WRITE data), a 24-byte
 * reply header per request (+ READ data), replies in request order. */
#ifndef TERN_TCP_WIRE_H
#define TERN_TCP_WIRE_H

#include <stdint.h>
#include <string.h>

#define TCP_REQ_MAGIC 0x51524E54u
#define TCP_REP_MAGIC 0x50524E54u
#define TCP_WIRE_VERSION 1
#define TCP_REQ_SIZE 32
#define TCP_REP_SIZE 24
#define TCP_DRAIN_MAX (64ull << 20)

typedef struct tcp_req {
    uint32_t magic;
    uint8_t version, opcode;
    uint16_t flags;
    uint64_t id, addr, length;
} tcp_req;

typedef struct tcp_rep {
    uint32_t magic;
    uint8_t version, opcode;
    uint16_t reserved;
    int32_t status;
    uint32_t reserved2;
    uint64_t id;
} tcp_rep;

static inline void tcp_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void tcp_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void tcp_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t tcp_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t tcp_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static inline uint64_t tcp_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void tcp_req_encode(uint8_t *p, const tcp_req *r)
{
    tcp_put32(p, r->magic);
    p[4] = r->version;
    p[5] = r->opcode;
    tcp_put16(p + 6, r->flags);
    tcp_put64(p + 8, r->id);
    tcp_put64(p + 16, r->addr);
    tcp_put64(p + 24, r->length);
}

static inline void tcp_req_decode(const uint8_t *p, tcp_req *r)
{
    r->magic = tcp_get32(p);
    r->version = p[4];
    r->opcode = p[5];
    r->flags = tcp_get16(p + 6);
    r->id = tcp_get64(p + 8);
    r->addr = tcp_get64(p + 16);
    r->length = tcp_get64(p + 24);
}

static inline void tcp_rep_encode(uint8_t *p, const tcp_rep *r)
{
    tcp_put32(p, r->magic);
    p[4] = r->version;
    p[5] = r->opcode;
    tcp_put16(p + 6, r->reserved);
    tcp_put32(p + 8, (uint32_t)r->status);
    tcp_put32(p + 12, r->reserved2);
    tcp_put64(p + 16, r->id);
}

static inline void tcp_rep_decode(const uint8_t *p, tcp_rep *r)
{
    r->magic = tcp_get32(p);
    r->version = p[4];
    r->opcode = p[5];
    r->reserved = tcp_get16(p + 6);
    r->status = (int32_t)tcp_get32(p + 8);
    r->reserved2 = tcp_get32(p + 12);
    r->id = tcp_get64(p + 16);
}

#endif
