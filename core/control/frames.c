/* core/control/frames.c: handshake frames (frames.h; docs/protocol.md,
 * "Handshake frames"): the codec, the refusal builder and blocking frame
 * I/O.  Every encoder and reader of a frame in the control plane is here. */
#include "control/frames.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "tern/errors.h"
#include "base/util.h"

const char *tern_hs_type_name(int type)
{
    static const char *const n[] = {"Connection", "Metadata", "Notify", "Probe", "Auth"};
    return type >= 0 && type <= TERN_HS_AUTH ? n[type] : "unknown";
}

/* ---------------------------------------------------------------- codec */

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int tern_hs_frame_build(int type, const char *json, size_t len, uint8_t **out, size_t *outlen)
{
    size_t tb = type >= 0 ? 1 : 0;
    if (len > SIZE_MAX - 9 || type > TERN_HS_AUTH)
        return TERN_ERR_INVAL;
    uint8_t *buf = malloc(8 + tb + len);
    if (!buf)
        return TERN_ERR_NOMEM;
    put_le64(buf, len + tb);
    if (tb)
        buf[8] = (uint8_t)type;
    if (len)
        memcpy(buf + 8 + tb, json, len);
    *out = buf;
    *outlen = 8 + tb + len;
    return 0;
}

int tern_hs_frame_encode(int type, const char *json, size_t len, uint8_t **out, size_t *outlen)
{
    if (type < 0 || type > 3 || !out || !outlen || (len && !json))
        return TERN_ERR_INVAL;
    return tern_hs_frame_build(type, json, len, out, outlen);
}

size_t tern_hs_request_limit(uint8_t first)
{
    switch (first) {
    case TERN_HS_METADATA: return TERN_HS_LIMIT_METADATA;
    case TERN_HS_NOTIFY: return TERN_HS_LIMIT_NOTIFY;
    case TERN_HS_PROBE: return TERN_HS_LIMIT_PROBE;
    case TERN_HS_AUTH: return TERN_HS_LIMIT_AUTH;
    default: return TERN_HS_LIMIT_CONNECTION; /* 0, or old-protocol JSON */
    }
}

int tern_hs_frame_header(const uint8_t hdr[8], uint64_t max_frame, uint64_t *len)
{
    uint64_t n = get_le64(hdr);
    if (len)
        *len = n;
    if (n == 0 || n > max_frame)
        return TERN_ERR_PROTOCOL;
    return 0;
}

int tern_hs_frame_payload(const uint8_t *payload, size_t len, int *type, const char **json,
                          size_t *jsonlen, char *err, size_t errlen)
{
    if (!payload || len == 0)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "handshake frame: empty payload");
    if (payload[0] <= TERN_HS_PROBE) {
        *type = payload[0];
        *json = (const char *)payload + 1;
        *jsonlen = len - 1;
    } else { /* old protocol: all JSON, a Connection request */
        *type = TERN_HS_CONNECTION;
        *json = (const char *)payload;
        *jsonlen = len;
    }
    return 0;
}

int tern_hs_json_check(const char *json, size_t len, char *err, size_t errlen)
{
    if (len == 0)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "invalid JSON: empty");
    if (len > INT32_MAX)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "invalid JSON: too large");
    json_tokener *tok = json_tokener_new_ex(TERN_HS_JSON_DEPTH);
    if (!tok)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    json_object *o = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    json_object_put(o);
    if (je != json_tokener_success)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "invalid JSON at byte %zu: %s", end,
                         je == json_tokener_continue ? "unexpected end"
                                                     : json_tokener_error_desc(je));
    while (end < len && strchr(" \t\r\n", json[end]) && json[end])
        end++;
    if (end < len)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "invalid JSON: trailing data at byte %zu", end);
    return 0;
}

/* ------------------------------------------------------------- refusals */

json_object *tern_hs_refusal_object(const char *msg)
{
    json_object *o = json_object_new_object();
    if (o)
        json_object_object_add(o, "reply_msg", json_object_new_string(msg ? msg : ""));
    return o;
}

char *tern_hs_refusal(const char *msg)
{
    json_object *o = tern_hs_refusal_object(msg);
    char *s = o ? tern_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)) : NULL;
    json_object_put(o);
    return s;
}

int tern_hs_frame_of(int type, json_object *o, uint8_t **out, size_t *outlen)
{
    const char *js = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
    if (!js)
        return TERN_ERR_NOMEM;
    return tern_hs_frame_build(type, js, strlen(js), out, outlen);
}

/* ------------------------------------------------------------ blocking I/O */

int tern_hs_frame_send(int fd, int type, const char *json, size_t len, int io_ms)
{
    uint8_t *f;
    size_t fl;
    int rc = tern_hs_frame_build(type, json, len, &f, &fl);
    if (rc)
        return rc;
    rc = tern_io_write_all(fd, f, fl, io_ms);
    free(f);
    return rc;
}

int tern_hs_frame_recv(int fd, uint64_t max_frame, int io_ms, uint8_t **payload, uint64_t *len,
                       int *stage)
{
    uint8_t hdr[8];
    *stage = 0;
    *len = 0;
    int rc = tern_io_read_all(fd, hdr, 8, io_ms);
    if (rc)
        return rc;
    if (tern_hs_frame_header(hdr, max_frame, len) != 0)
        return TERN_ERR_PROTOCOL;
    *stage = 1;
    uint8_t *p = malloc(*len + 1);
    if (!p)
        return TERN_ERR_NOMEM;
    rc = tern_io_read_all(fd, p, *len, io_ms);
    if (rc) {
        free(p);
        return rc;
    }
    p[*len] = 0;
    *payload = p;
    return 0;
}
