/* core/desc/desc_json.c: strict reading of descriptor JSON (see desc_json.h).
 * Decoding walks the JSON with a key path ("buffers[3].length") so every
 * refusal names exactly what was wrong. */
#include "desc/desc_json.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tern/errors.h"
#include "base/util.h"

/* A JSON integer that fits a uint64 (json-c keeps large ones as uint64). */
int tern_json_to_u64(json_object *v, uint64_t *out)
{
    if (!json_object_is_type(v, json_type_int))
        return TERN_ERR_PROTOCOL;
    errno = 0;
    int64_t s = json_object_get_int64(v);
    if (s < 0)
        return TERN_ERR_PROTOCOL;
    if (s == INT64_MAX) { /* saturated: read the unsigned form */
        uint64_t u = json_object_get_uint64(v);
        *out = u;
        return 0;
    }
    *out = (uint64_t)s;
    return 0;
}

/* Short text form of a JSON value for messages. */
const char *tern_json_text(json_object *v, char *buf, size_t len)
{
    const char *s = v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "nothing";
    if (strlen(s) < len) {
        tern_strlcpy(buf, s, len);
    } else {
        memcpy(buf, s, len - 4);
        memcpy(buf + len - 4, "...", 4);
    }
    return buf;
}

int tern_json_bad(char *err, size_t errlen, const char *path, const char *expected,
                  json_object *got)
{
    char t[48];
    return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: expected %s, got %s", path,
                     expected, tern_json_text(got, t, sizeof t));
}

/* Member `key` of obj with the given type; *out NULL when absent and not
 * mandatory.  path is the parent's path ("" for the root). */
int tern_json_member(json_object *obj, const char *ppath, const char *key, json_type type,
                     int mandatory, json_object **out, char *err, size_t errlen)
{
    char path[128];
    snprintf(path, sizeof path, "%s%s%s", ppath, *ppath ? "." : "", key);
    *out = NULL;
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v) {
        if (mandatory)
            return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: missing mandatory key", path);
        return 0;
    }
    if (!json_object_is_type(v, type)) {
        static const char *const names[] = {
            [json_type_null] = "null", [json_type_boolean] = "a boolean",
            [json_type_double] = "a number", [json_type_int] = "an integer",
            [json_type_object] = "an object", [json_type_array] = "an array",
            [json_type_string] = "a string"};
        return tern_json_bad(err, errlen, path, names[type], v);
    }
    *out = v;
    return 0;
}

/* An unsigned integer no larger than max. */
int tern_json_as_uint(json_object *v, const char *path, uint64_t max, uint64_t *out, char *err,
                      size_t errlen)
{
    const char *what = max == UINT64_MAX   ? "an unsigned 64-bit integer"
                       : max == UINT32_MAX ? "an unsigned 32-bit integer"
                       : max == UINT16_MAX ? "an unsigned 16-bit integer"
                                           : "an unsigned integer in range";
    if (!v || tern_json_to_u64(v, out) != 0 || *out > max)
        return tern_json_bad(err, errlen, path, what, v);
    return 0;
}

int tern_json_get_uint(json_object *obj, const char *ppath, const char *key, uint64_t max,
                       int mandatory, uint64_t *out, char *err, size_t errlen)
{
    json_object *v;
    int rc = tern_json_member(obj, ppath, key, json_type_int, mandatory, &v, err, errlen);
    if (rc)
        return rc;
    if (!v) {
        *out = 0;
        return 0;
    }
    char path[128];
    snprintf(path, sizeof path, "%s%s%s", ppath, *ppath ? "." : "", key);
    return tern_json_as_uint(v, path, max, out, err, errlen);
}

/* A string that fits dst (size includes the NUL). */
int tern_json_get_str(json_object *obj, const char *ppath, const char *key, int mandatory,
                      char *dst, size_t size, char *err, size_t errlen)
{
    json_object *v;
    int rc = tern_json_member(obj, ppath, key, json_type_string, mandatory, &v, err, errlen);
    if (rc)
        return rc;
    dst[0] = '\0';
    if (!v)
        return 0;
    size_t n = (size_t)json_object_get_string_len(v);
    if (n >= size || strlen(json_object_get_string(v)) != n)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "%s%s%s: string of %zu bytes, at most %zu allowed (no NUL)", ppath,
                         *ppath ? "." : "", key, n, size - 1);
    memcpy(dst, json_object_get_string(v), n + 1);
    return 0;
}

/* A GID: empty, or 16 bytes as two hex digits each, colon separated. */
static int gid_valid(const char *g)
{
    if (!*g)
        return 1;
    if (strlen(g) != 47)
        return 0;
    for (int i = 0; i < 47; i++) {
        int hex = (g[i] >= '0' && g[i] <= '9') || (g[i] >= 'a' && g[i] <= 'f') ||
                  (g[i] >= 'A' && g[i] <= 'F');
        if (i % 3 == 2 ? g[i] != ':' : !hex)
            return 0;
    }
    return 1;
}

int tern_json_get_gid(json_object *obj, const char *ppath, const char *key, char *dst,
                      size_t size, char *err, size_t errlen)
{
    int rc = tern_json_get_str(obj, ppath, key, 0, dst, size, err, errlen);
    if (rc)
        return rc;
    if (!gid_valid(dst))
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "%s%s%s: expected 16 bytes as colon-separated hex "
                         "(\"fe:80:00:...\"), got \"%s\"",
                         ppath, *ppath ? "." : "", key, dst);
    return 0;
}

/* An array of unsigned integers (each <= max) into out[cap]; *n its length. */
int tern_json_get_uint_array(json_object *obj, const char *ppath, const char *key, uint64_t max,
                             uint64_t *out64, uint32_t *out32, size_t cap, size_t *n,
                             char *err, size_t errlen)
{
    json_object *arr;
    int rc = tern_json_member(obj, ppath, key, json_type_array, 0, &arr, err, errlen);
    *n = 0;
    if (rc || !arr)
        return rc;
    char path[160];
    size_t len = json_object_array_length(arr);
    if (len > cap)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "%s%s%s: %zu entries, at most %zu",
                         ppath, *ppath ? "." : "", key, len, cap);
    for (size_t i = 0; i < len; i++) {
        uint64_t u;
        snprintf(path, sizeof path, "%s%s%s[%zu]", ppath, *ppath ? "." : "", key, i);
        rc = tern_json_as_uint(json_object_array_get_idx(arr, i), path, max, &u, err, errlen);
        if (rc)
            return rc;
        if (out64)
            out64[i] = u;
        if (out32)
            out32[i] = (uint32_t)u;
    }
    *n = len;
    return 0;
}

/* Parse text into an object; refuses trailing garbage and non-objects. */
int tern_json_parse_object(const char *json, size_t len, json_object **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    if (!json || len == 0)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "empty descriptor");
    if (len > INT32_MAX)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "descriptor of %zu bytes is too large",
                         len);
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    json_object *o = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!o || je != json_tokener_success) {
        json_object_put(o);
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "invalid JSON at byte %zu: %s", used,
                         je == json_tokener_continue ? "unexpected end of input"
                                                     : json_tokener_error_desc(je));
    }
    while (used < len && (json[used] == ' ' || json[used] == '\n' || json[used] == '\r' ||
                          json[used] == '\t' || json[used] == '\0'))
        used++;
    if (used < len) {
        json_object_put(o);
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "invalid JSON: trailing data at byte %zu",
                         used);
    }
    if (!json_object_is_type(o, json_type_object)) {
        char t[48];
        tern_errf(err, errlen, TERN_ERR_PROTOCOL, "expected a JSON object, got %s",
                  tern_json_text(o, t, sizeof t));
        json_object_put(o);
        return TERN_ERR_PROTOCOL;
    }
    *out = o;
    return 0;
}
