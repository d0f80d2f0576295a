/* transports/tcp/tcp_mooncake.h: Mooncake Transfer Engine's TCP data
 * format, both sides (docs/protocol.md, "Mooncake compatibility").
 *
 * Request (both versions), 24 bytes little-endian:
 *   u64 size, u64 addr, u8 opcode (0 READ, 1 WRITE; | 0x80 = version 2),
 *   7 bytes padding; then the WRITE payload, or the READ data comes back.
 * Version 2 adds 8-byte little-endian status frames: the magic "MCTV" in
 * the high 32 bits, 0 (ok) or 1 (address refused) in the low 32.  A READ's
 * frame precedes its data; a WRITE's follows the applied payload; a refusal
 * is sent in place of either and the connection closes.  Version 1 has no
 * reply at all: a refused request only closes the connection.
 *
 * The module is independent of the rest of the transport: it reaches the
 * registration table and the completion path through tcp_mc_hooks, so the
 * transport wires it with a few lines (tcp.c). */
#ifndef TERN_TCP_MOONCAKE_H
#define TERN_TCP_MOONCAKE_H

#include <stddef.h>
#include <stdint.h>

#include "tern/transport.h"

#define TCP_MC_HDR_SIZE 24
#define TCP_MC_OP_READ 0
#define TCP_MC_OP_WRITE 1
#define TCP_MC_OP_V2 0x80
#define TCP_MC_PROTO_VERSION 2 /* what the target side serves */
#define TCP_MC_STATUS_MAGIC (UINT64_C(0x4D435456) << 32) /* "MCTV" */
#define TCP_MC_STATUS_OK (TCP_MC_STATUS_MAGIC | 0)
#define TCP_MC_STATUS_REFUSED (TCP_MC_STATUS_MAGIC | 1)

/* ---- pure codec ---- */
void tcp_mc_hdr_encode(uint8_t out[TCP_MC_HDR_SIZE], uint64_t size, uint64_t addr,
                       uint8_t opcode);
void tcp_mc_hdr_decode(const uint8_t in[TCP_MC_HDR_SIZE], uint64_t *size, uint64_t *addr,
                       uint8_t *opcode);
void tcp_mc_status_encode(uint8_t out[8], uint64_t status);
uint64_t tcp_mc_status_decode(const uint8_t in[8]);

/* What the module needs from the transport. */
typedef struct tcp_mc_hooks {
    void *arg;
    /* Pin the registered range covering [addr, addr+len) for the time of
     * one request (overflow-safe); NULL when no single range covers it. */
    void *(*pin)(void *arg, uint64_t addr, uint64_t len);
    void (*unpin)(void *arg, void *pin);
    /* Around each system call that touches pinned memory (may be NULL):
     * io_begin returns non-zero when the range was revoked meanwhile (the
     * request then stops and its connection closes). */
    int (*io_begin)(void *pin);
    void (*io_end)(void *pin);
    /* Hand a finished slice back (status and transferred already set). */
    void (*complete)(void *arg, tern_slice *s);
    void (*log)(void *arg, int level, const char *msg);
    void (*tune)(void *arg, int fd);  /* socket options; may be NULL */
    int io_timeout_ms;                /* a stalled peer is cut after this */
    int max_conns;                    /* target side: connections served at once */
    /* target side, appended (docs/protocol.md, Target budgets): a new
     * connection's first header byte within unproven_idle_ms; a request's
     * payload or data at min_rate bytes/s averaged over window_ms */
    int unproven_idle_ms;
    uint64_t min_rate;
    int window_ms;
} tcp_mc_hooks;

/* ---- target side: a listener serving Mooncake initiators ---- */
typedef struct tcp_mc_server tcp_mc_server;
int tcp_mc_server_start(const tcp_mc_hooks *h, const char *bind_host, int port,
                        tcp_mc_server **out, char *err, size_t errlen);
int tcp_mc_server_port(const tcp_mc_server *s);
void tcp_mc_server_stop(tcp_mc_server *s); /* closes every connection, joins */

/* ---- initiator side: an endpoint to a Mooncake target ---- */
typedef struct tcp_mc_ep tcp_mc_ep;
/* version: the peer's advertised tcp_proto_version (>= 2: acknowledged
 * format 2; else format 1).  nconn: connections (one thread each). */
int tcp_mc_ep_open(const tcp_mc_hooks *h, const char *host, uint16_t port, int version,
                   int nconn, tcp_mc_ep **out, char *err, size_t errlen);
/* Queues all n; returns n (or an error, none taken). */
int tcp_mc_ep_submit(tcp_mc_ep *ep, tern_slice *const *slices, int n);
void tcp_mc_ep_close(tcp_mc_ep *ep); /* queued slices complete with an error */

#endif
