/* transports/tcp/tcp_server.h: a target-side data connection, shared by
 * its three files: tcp_server.c (the request state machine), tcp_budget.c
 * (strangers and the connection budgets), tcp_accept.c (the listening
 * socket, admitting and evicting connections).  Calls go one way:
 * accept -> server -> budget, accept -> budget. */
#ifndef TERN_TCP_SERVER_H
#define TERN_TCP_SERVER_H

#include <netinet/in.h>

#include "tcp_auth.h"
#include "tcp_internal.h"
#include "tcp_wire.h"

enum { S_HELLO, S_PROOF, S_HDR, S_WPAY, S_DRAIN, S_RPAY, S_CLOSING };

struct tcp_srv_conn {
    tcp_io io;
    tcp_ctx *ctx;
    char peer[64], src[INET6_ADDRSTRLEN];
    int state, proven, stranger;
    atomic_int evict;
    tcp_srv_conn *sprev, *snext;     /* ctx->strangers, under srv_mu */
    uint8_t in[TCP_AUTH_HELLO_SIZE];
    size_t have;
    uint8_t hello[TCP_AUTH_HELLO_SIZE]; /* the initiator's, kept for its proof */
    uint8_t ns[32];
    tcp_req q;
    int status;                      /* of a refused request being drained */
    tcp_mr *mr;
    uint64_t off;
    uint8_t *out;
    size_t outlen, outoff, outcap;
    uint32_t events;                 /* armed epoll events */
    int starved;                     /* the last read or write would block */
    int dry;                         /* the last read emptied the socket (until EPOLLIN) */
    int lowat;                       /* the socket's SO_RCVLOWAT (tcp_rcvlowat) */
    uint8_t ra[1024];                /* read ahead: a small request and its data in one read */
    size_t ra_off, ra_len;
    uint64_t born_ms, win_start, win_bytes, last_bytes_ms;
    uint64_t moved;                /* bytes through the socket, either way (srv_pump) */
    uint8_t *drain;
    uint8_t *bounce;                 /* GPU memory: TCP_GPU_CHUNK bytes */
    int bounce_pinned;               /* from the host service pinned_alloc */
    uint64_t bounce_at;              /* READ: offset of the chunk in it, UINT64_MAX none */
    int gpu_status;                  /* WRITE: a failed copy to the GPU, replied at the end */
};

#define TCP_GPU_CHUNK (1u << 20)

/* tcp_budget.c (callers hold no lock) */
/* Count c in and make room for it as a stranger from c->src: 0, or -1
 * when the port is full of established connections (c is not counted). */
int tcp_budget_admit(tcp_ctx *ctx, tcp_srv_conn *c);
/* c proved itself (authenticated, or a request inside registered memory). */
void tcp_budget_prove(tcp_srv_conn *c);
/* c is closing: it no longer counts. */
void tcp_budget_forget(tcp_srv_conn *c);

/* tcp_server.c */
/* Set up an admitted connection's state machine (before it is attached). */
void tcp_srv_begin(tcp_srv_conn *c);
/* Close on the connection's worker; the memory goes after the batch. */
void tcp_srv_close(tcp_srv_conn *c, int level, const char *why);
int tcp_srv_is_conn(const tcp_io *io);

#endif
