/* core/control/server.h: the handshake daemon (server.c): one epoll
 * thread that reads frames, a pool of workers that run the handler, and
 * the budgets that keep strangers cheap (docs/protocol.md, "Handshake
 * frames").  The daemon knows frames and authentication, not the engine:
 * the engine passes its handler (core/engine_handler.c). */
#ifndef TERN_CORE_CONTROL_SERVER_H
#define TERN_CORE_CONTROL_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "control/frames.h"

/* Handle one request; *reply is malloc()ed JSON (may be NULL for none). */
typedef int (*tern_hs_handler)(void *arg, int type, const char *json, size_t len,
                               char **reply, size_t *replylen);

typedef struct tern_hs_server tern_hs_server;
typedef struct tern_hs_options {
    const char *bind_host;     /* "127.0.0.1", "::1", "0.0.0.0" */
    uint16_t port;             /* 0: ephemeral */
    uint64_t max_frame;
    int io_timeout_ms;
    int max_connections;       /* concurrent clients kept (default 1024) */
    tern_hs_handler handler;
    void *arg;
    /* with a secret (auth.h), every connection must
     * prove it before its request is read; refusals are logged with log(arg,
     * TERN_LOG_WARN, ...) (NULL: stderr). */
    const struct tern_auth *auth;
    void (*log)(void *arg, int level, const char *fmt, ...);
    /* bit (1u << type) for each request type whose handler returns
     * without blocking; those are answered on the daemon's epoll thread,
     * without a hand-off to a worker (0: every request goes to a worker). */
    unsigned inline_types;
    /* bind_host is one NIC's address: answer on the same port on every
     * other address of its family this host holds (up, not loopback) too,
     * so the daemon stays reachable while any NIC is. */
    int every_address;
} tern_hs_options;


int tern_hs_server_start(const tern_hs_options *opt, tern_hs_server **out,
                         char *err, size_t errlen);
uint16_t tern_hs_server_port(const tern_hs_server *s);
/* The addresses ("host:port", "[v6]:port") answered on besides bind_host's
 * (every_address); returns how many were written, at most max. */
size_t tern_hs_server_addrs(const tern_hs_server *s, char out[][TERN_HS_ADDR_MAX], size_t max);
void tern_hs_server_stop(tern_hs_server *s);

#endif
