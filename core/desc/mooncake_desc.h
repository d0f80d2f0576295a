/* core/desc/mooncake_desc.h: Mooncake-shaped segment descriptors rewritten
 * into tern's shape before decoding (mooncake_desc.c; docs/protocol.md,
 * "Mooncake compatibility").  Depends on nothing else in core/. */
#ifndef TERN_CORE_MOONCAKE_DESC_H
#define TERN_CORE_MOONCAKE_DESC_H

#include <stddef.h>

struct json_object;

/* 1 when the parsed descriptor is in Mooncake's shape (no "transports"). */
int tern_mooncake_desc_is(const struct json_object *root);
/* Rewrite a Mooncake-shaped descriptor in place (no-op otherwise); buffer
 * names of location_max bytes or more become "*". */
void tern_mooncake_desc_normalize(struct json_object *root, size_t location_max);

#endif
