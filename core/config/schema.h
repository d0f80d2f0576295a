/* core/config/schema.h: the core's configuration keys, one table
 * (schema.c; the entry's type, cfg_key, is in cfg_internal.h). */
#ifndef TERN_CORE_CONFIG_SCHEMA_H
#define TERN_CORE_CONFIG_SCHEMA_H

#include <stddef.h>

#include "config/cfg_internal.h"

extern const cfg_key cfg_keys[];
extern const size_t cfg_nkeys;
const cfg_key *cfg_key_find(const char *name);

#endif
