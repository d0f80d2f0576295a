/* core/desc/desc.c: the generic descriptor (tern_desc, a json_object) and the
 * accessors plugins reach through the host services.  They validate types
 * strictly and never abort on a peer's malformed input.  The typed
 * descriptors are in segment_desc.c and handshake_desc.c. */
#include "desc/desc.h"

#include <json-c/json.h>
#include <stdint.h>
#include <string.h>

#include "desc/desc_json.h"
#include "tern/errors.h"

#define AS_JSON(d) ((json_object *)(d))

tern_desc *tern_desc_new(void) { return (tern_desc *)json_object_new_object(); }

void tern_desc_free(tern_desc *d)
{
    if (d)
        json_object_put(AS_JSON(d));
}

int tern_desc_set_str(tern_desc *d, const char *key, const char *value)
{
    if (!d || !key || !value)
        return TERN_ERR_INVAL;
    json_object *v = json_object_new_string(value);
    if (!v)
        return TERN_ERR_NOMEM;
    return json_object_object_add(AS_JSON(d), key, v) == 0 ? 0 : TERN_ERR_NOMEM;
}

int tern_desc_set_u64(tern_desc *d, const char *key, uint64_t value)
{
    if (!d || !key)
        return TERN_ERR_INVAL;
    json_object *v = json_object_new_uint64(value);
    if (!v)
        return TERN_ERR_NOMEM;
    return json_object_object_add(AS_JSON(d), key, v) == 0 ? 0 : TERN_ERR_NOMEM;
}

int tern_desc_set_u32_array(tern_desc *d, const char *key, const uint32_t *v, size_t n)
{
    if (!d || !key || (n && !v))
        return TERN_ERR_INVAL;
    json_object *arr = json_object_new_array_ext((int)n);
    if (!arr)
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        json_object_array_add(arr, json_object_new_uint64(v[i]));
    return json_object_object_add(AS_JSON(d), key, arr) == 0 ? 0 : TERN_ERR_NOMEM;
}

const char *tern_desc_get_str(const tern_desc *d, const char *key)
{
    json_object *v;
    if (!d || !key || !json_object_object_get_ex(AS_JSON(d), key, &v))
        return NULL;
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

int tern_desc_get_u64(const tern_desc *d, const char *key, uint64_t *value)
{
    json_object *v;
    if (!d || !key || !value)
        return TERN_ERR_INVAL;
    if (!json_object_object_get_ex(AS_JSON(d), key, &v))
        return TERN_ERR_NOT_FOUND;
    return tern_json_to_u64(v, value);
}

int tern_desc_get_u32_array(const tern_desc *d, const char *key, uint32_t *out, size_t max)
{
    json_object *arr;
    if (!d || !key)
        return TERN_ERR_INVAL;
    if (!json_object_object_get_ex(AS_JSON(d), key, &arr))
        return TERN_ERR_NOT_FOUND;
    if (!json_object_is_type(arr, json_type_array))
        return TERN_ERR_PROTOCOL;
    size_t n = json_object_array_length(arr);
    if (n > 1u << 20)
        return TERN_ERR_PROTOCOL;
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        if (tern_json_to_u64(json_object_array_get_idx(arr, i), &u) || u > UINT32_MAX)
            return TERN_ERR_PROTOCOL;
        if (i < max && out)
            out[i] = (uint32_t)u;
    }
    return (int)n;
}
