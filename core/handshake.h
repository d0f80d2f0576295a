/* core/handshake.h: the control-plane wire protocol and daemon (handshake.c);
 * the wire format and its limits are in docs/protocol.md, "Handshake
 * frames".  Frame (both directions):
 *   u64 length (little-endian; counts the type byte plus the JSON bytes)
 *   u8  type   (0 Connection, 1 Metadata, 2 Notify, 3 Probe)
 *   JSON       length-1 bytes
 * Old protocol: a first payload byte > 3 means no type byte; all JSON,
 * treated as Connection.  Lengths over max_frame are refused before any
 * allocation.  The daemon serves connections concurrently. */
#ifndef TERN_CORE_HANDSHAKE_H
#define TERN_CORE_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

enum {
    TERN_HS_CONNECTION = 0,
    TERN_HS_METADATA = 1,
    TERN_HS_NOTIFY = 2,
    TERN_HS_PROBE = 3,
};

#define TERN_HS_DEFAULT_PORT 12001
#define TERN_HS_DEFAULT_MAX_FRAME (1u << 20)

/* Request limits, payload bytes (type byte + JSON), per frame type: far
 * below max_frame (which bounds replies: a segment descriptor), so that a
 * stranger's request costs the daemon little (docs/protocol.md). */
#define TERN_HS_LIMIT_CONNECTION (16u << 10)
#define TERN_HS_LIMIT_METADATA 4096u
/* A Notify request carries msg (<= TERN_NOTIFY_MAX = 64 KiB) JSON-escaped
 * (at most 6 bytes per byte: \u00XX), name (<= 255, same) and from. */
#define TERN_HS_LIMIT_NOTIFY (6u * 65536u + 6u * 256u + 2048u)
#define TERN_HS_LIMIT_PROBE 4096u
#define TERN_HS_LIMIT_AUTH 1024u
#define TERN_HS_LIMIT_REQUEST TERN_HS_LIMIT_NOTIFY /* the largest of them */
#define TERN_HS_LIMIT_PROBE_REPLY 4096u
#define TERN_HS_JSON_DEPTH 16 /* nesting of any request's JSON */
#define TERN_HS_CONN_WORKERS 56 /* Connection handlers at once: the rest of
                                   the pool stays free for Metadata/Probe/Notify */

/* ---- pure codec (fuzzed) ---- */
/* Encode a frame into a malloc()ed buffer. */
int tern_hs_frame_encode(int type, const char *json, size_t len, uint8_t **out,
                         size_t *outlen);
/* Check the 8-byte header; writes the payload length.  TERN_ERR_PROTOCOL
 * when 0 or above max_frame. */
int tern_hs_frame_header(const uint8_t hdr[8], uint64_t max_frame, uint64_t *len);
/* The request limit for a payload whose first byte is `first` (a type
 * byte; 4 is Auth; above 4 an old-protocol Connection). */
size_t tern_hs_request_limit(uint8_t first);
/* Split a payload into type and JSON (old protocol -> Connection). */
int tern_hs_frame_payload(const uint8_t *payload, size_t len, int *type,
                          const char **json, size_t *jsonlen, char *err, size_t errlen);

/* ---- daemon ---- */
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
    /* appended (auth.h): with a secret, every connection must
     * prove it before its request is read; refusals are logged with log(arg,
     * TERN_LOG_WARN, ...) (NULL: stderr). */
    const struct tern_auth *auth;
    void (*log)(void *arg, int level, const char *fmt, ...);
    /* appended: bit (1u << type) for each request type whose handler returns
     * without blocking; those are answered on the daemon's epoll thread,
     * without a hand-off to a worker (0: every request goes to a worker). */
    unsigned inline_types;
} tern_hs_options;

int tern_hs_server_start(const tern_hs_options *opt, tern_hs_server **out,
                         char *err, size_t errlen);
uint16_t tern_hs_server_port(const tern_hs_server *s);
void tern_hs_server_stop(tern_hs_server *s);

/* ---- client ---- */
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
