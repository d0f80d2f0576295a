/* core/desc/desc.h: tern_desc, the descriptors' JSON objects (desc.c), and
 * the limits the descriptors share.  The descriptors themselves, with the
 * reference's exact JSON keys so the two stay readable to each other:
 * segment_desc.h, handshake_desc.h (strict reading: desc_json.h).  Decoders
 * refuse wrong types, missing mandatory keys, out-of-range numbers and
 * absurd sizes with a message naming the key.
 */
#ifndef TERN_CORE_DESC_H
#define TERN_CORE_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "control/frames.h"
#include "tern/transport.h"

struct json_object;

#define TERN_LOCATION_MAX 32
#define TERN_DESC_MAX_HS_ADDRS TERN_HS_MAX_LISTEN
#define TERN_DESC_HS_ADDR_MAX TERN_HS_ADDR_MAX
#define TERN_DESC_MAX_BUFFERS 65536
#define TERN_DESC_MAX_TRANSPORTS 16

/* tern_desc (transport.h) is a json_object; these are the host services'
 * implementations, handed to plugins by the loader. */
int tern_desc_set_str(tern_desc *d, const char *key, const char *value);
int tern_desc_set_u64(tern_desc *d, const char *key, uint64_t value);
int tern_desc_set_u32_array(tern_desc *d, const char *key, const uint32_t *v, size_t n);
const char *tern_desc_get_str(const tern_desc *d, const char *key);
int tern_desc_get_u64(const tern_desc *d, const char *key, uint64_t *value);
int tern_desc_get_u32_array(const tern_desc *d, const char *key, uint32_t *v, size_t max);
tern_desc *tern_desc_new(void);              /* empty object */
void tern_desc_free(tern_desc *d);

#endif
