/* core/control/client.h: the blocking handshake client (client.c): one
 * request and its reply per connection, or a kept connection for Notify
 * frames; proves the shared secret first when given one (auth.h). */
#ifndef TERN_CORE_CONTROL_CLIENT_H
#define TERN_CORE_CONTROL_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "control/frames.h"

/* Send one frame to "host:port" (getaddrinfo, every address tried) and read
 * the reply (*reply malloc()ed, NUL-terminated). */
int tern_hs_request(const char *server_name, int type, const char *json, size_t len,
                    char **reply, size_t *replylen, uint64_t max_frame,
                    int connect_timeout_ms, int io_timeout_ms, char *err, size_t errlen);

/* The same, proving the shared secret first when auth is not NULL (auth.h).
 * A daemon's "authentication required" refusal becomes TERN_ERR_AUTH with
 * its message, with or without auth. */
struct tern_auth;
int tern_hs_request_auth(const struct tern_auth *auth, const char *server_name, int type,
                         const char *json, size_t len, char **reply, size_t *replylen,
                         uint64_t max_frame, int connect_timeout_ms, int io_timeout_ms,
                         char *err, size_t errlen);

/* The same, connecting to addrs[0], addrs[1], ... in turn until one
 * answers (server_name's own address and the other addresses its daemon
 * answers on, a descriptor's "handshake_addrs"; naddrs 0: server_name);
 * *used (may be NULL): the index that connected.  The request is sent
 * once; what it proves and asks is for server_name. */
int tern_hs_request_via(const struct tern_auth *auth, const char *server_name,
                        const char (*addrs)[TERN_HS_ADDR_MAX], size_t naddrs, size_t *used,
                        int type, const char *json, size_t len, char **reply, size_t *replylen,
                        uint64_t max_frame, int connect_timeout_ms, int io_timeout_ms,
                        char *err, size_t errlen);

/* A kept connection (Notify frames only: the daemon keeps a connection
 * open after answering one, docs/protocol.md, Notify).  open: connect and
 * prove the secret (auth may be NULL); returns the fd or an error.
 * request: one frame and its reply on it; on any error the caller closes
 * the fd (a closed kept connection reads as TERN_ERR_CLOSED). */
int tern_hs_session_open(const struct tern_auth *auth, const char *server_name,
                         int connect_timeout_ms, int io_timeout_ms, uint64_t max_frame,
                         char *err, size_t errlen);
int tern_hs_session_request(int fd, const char *server_name, int type, const char *json,
                            size_t len, char **reply, size_t *replylen, uint64_t max_frame,
                            int io_timeout_ms, char *err, size_t errlen);

/* Split "host:port" / "[v6]:port"; port 0 if missing. */
int tern_split_host_port(const char *name, char *host, size_t hostlen, uint16_t *port);

#endif
