/* core/desc/desc_json.h: strict reading of descriptor JSON, shared by the
 * segment and handshake descriptors.  Every function refuses a wrong type,
 * a missing mandatory key, an out-of-range number or an oversized string
 * with TERN_ERR_PROTOCOL and a message naming the key by its path
 * ("buffers[3].length"); ppath is the parent's path ("" for the root). */
#ifndef TERN_CORE_DESC_JSON_H
#define TERN_CORE_DESC_JSON_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

/* A JSON integer that fits a uint64 (json-c keeps large ones as uint64). */
int tern_json_to_u64(json_object *v, uint64_t *out);
/* Short text form of a JSON value for messages, cut to len with "...". */
const char *tern_json_text(json_object *v, char *buf, size_t len);
/* "<path>: expected <expected>, got <value>". */
int tern_json_bad(char *err, size_t errlen, const char *path, const char *expected,
                  json_object *got);
/* Member key of obj with the given type; *out NULL when absent and not
 * mandatory. */
int tern_json_member(json_object *obj, const char *ppath, const char *key, json_type type,
                     int mandatory, json_object **out, char *err, size_t errlen);
/* v as an unsigned integer no larger than max. */
int tern_json_as_uint(json_object *v, const char *path, uint64_t max, uint64_t *out, char *err,
                      size_t errlen);
/* Member key as an unsigned integer no larger than max (0 when absent). */
int tern_json_get_uint(json_object *obj, const char *ppath, const char *key, uint64_t max,
                       int mandatory, uint64_t *out, char *err, size_t errlen);
/* Member key as a string that fits dst (size includes the NUL). */
int tern_json_get_str(json_object *obj, const char *ppath, const char *key, int mandatory,
                      char *dst, size_t size, char *err, size_t errlen);
/* Member key as a GID: empty, or 16 bytes as colon-separated hex. */
int tern_json_get_gid(json_object *obj, const char *ppath, const char *key, char *dst,
                      size_t size, char *err, size_t errlen);
/* Member key as an array of unsigned integers (each <= max) into out64 or
 * out32 (cap entries); *n its length. */
int tern_json_get_uint_array(json_object *obj, const char *ppath, const char *key, uint64_t max,
                             uint64_t *out64, uint32_t *out32, size_t cap, size_t *n,
                             char *err, size_t errlen);
/* Parse text into an object; refuses trailing garbage and non-objects. */
int tern_json_parse_object(const char *json, size_t len, json_object **out, char *err,
                           size_t errlen);

#endif
