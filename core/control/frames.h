/* core/control/frames.h: the handshake frames, every type (authentication
 * included): codec, limits, the one refusal builder, and blocking frame
 * I/O with a deadline.  The wire format and its limits are in
 * docs/protocol.md, "Handshake frames".  Frame (both directions):
 *   u64 length (little-endian; counts the type byte plus the JSON bytes)
 *   u8  type   (0 Connection, 1 Metadata, 2 Notify, 3 Probe, 4 Auth)
 *   JSON       length-1 bytes
 * Old protocol: a first payload byte > 3 means no type byte; all JSON,
 * treated as Connection (4, Auth, is read only while a connection
 * authenticates; a daemon without a secret takes it for old JSON).  Lengths over max_frame are refused before any
 * allocation.
 *
 * The control plane, bottom up (docs/architecture.md): frames <- auth <-
 * server, client.  Nothing here knows the engine. */
#ifndef TERN_CORE_CONTROL_FRAMES_H
#define TERN_CORE_CONTROL_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "tern/metastore.h"

enum {
    TERN_HS_CONNECTION = 0,
    TERN_HS_METADATA = 1,
    TERN_HS_NOTIFY = 2,
    TERN_HS_PROBE = 3,
    TERN_HS_AUTH = 4, /* a first byte of 4 was never valid old-protocol JSON */
};

#define TERN_HS_DEFAULT_PORT 12001
#define TERN_HS_DEFAULT_MAX_FRAME TERN_METASTORE_MAX_VALUE /* one bound for every fetch */
#define TERN_HS_DEFAULT_IO_TIMEOUT_MS 5000
/* A daemon answers on at most TERN_HS_MAX_LISTEN addresses, each written
 * "host:port" or "[v6]:port" in TERN_HS_ADDR_MAX bytes. */
#define TERN_HS_MAX_LISTEN 16
#define TERN_HS_ADDR_MAX 64

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

/* ---- codec (pure; fuzzed) ---- */
/* "Connection", "Metadata", "Notify", "Probe", "Auth", else "unknown". */
const char *tern_hs_type_name(int type);
/* Encode a frame of type 0..3 into a malloc()ed buffer. */
int tern_hs_frame_encode(int type, const char *json, size_t len, uint8_t **out,
                         size_t *outlen);
/* The same for any type 0..4, or type < 0: an old-protocol frame (no type
 * byte), used to answer old-protocol peers. */
int tern_hs_frame_build(int type, const char *json, size_t len, uint8_t **out, size_t *outlen);
/* Check the 8-byte header; writes the payload length.  TERN_ERR_PROTOCOL
 * when 0 or above max_frame. */
int tern_hs_frame_header(const uint8_t hdr[8], uint64_t max_frame, uint64_t *len);
/* The request limit for a payload whose first byte is `first` (a type
 * byte; above 4 an old-protocol Connection). */
size_t tern_hs_request_limit(uint8_t first);
/* Split a payload into type and JSON (old protocol -> Connection). */
int tern_hs_frame_payload(const uint8_t *payload, size_t len, int *type,
                          const char **json, size_t *jsonlen, char *err, size_t errlen);
/* The whole text is one JSON value (nesting <= TERN_HS_JSON_DEPTH, nothing
 * but whitespace after it); else TERN_ERR_PROTOCOL naming the byte. */
int tern_hs_json_check(const char *json, size_t len, char *err, size_t errlen);

/* ---- refusals ---- */
/* The refusal every handshake reply uses: {"reply_msg": msg}, a new
 * json-c object the caller may add members to (busy, auth_required). */
struct json_object;
struct json_object *tern_hs_refusal_object(const char *msg);
/* The same as malloc()ed JSON text (NULL when out of memory). */
char *tern_hs_refusal(const char *msg);
/* A json-c object as a whole frame of `type` (see tern_hs_frame_build). */
int tern_hs_frame_of(int type, struct json_object *o, uint8_t **out, size_t *outlen);

/* ---- blocking I/O on a connected socket, each call within io_ms ---- */
/* Encode and write one frame (type as tern_hs_frame_build). */
int tern_hs_frame_send(int fd, int type, const char *json, size_t len, int io_ms);
/* Read one frame: the header, then the payload (type byte included) into
 * *payload, malloc()ed and NUL-terminated.  TERN_ERR_PROTOCOL for a length
 * of 0 or above max_frame (*len says which); TERN_ERR_TIMEOUT,
 * TERN_ERR_CLOSED or TERN_ERR_IO from the socket, with *stage 0 while
 * reading the header and 1 after it. */
int tern_hs_frame_recv(int fd, uint64_t max_frame, int io_ms, uint8_t **payload, uint64_t *len,
                       int *stage);

#endif
