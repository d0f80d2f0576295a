/* core/config/json.h: the resolved configuration and the key table as
 * JSON (json.c), for tern-info and tern_config_describe(). */
#ifndef TERN_CORE_CONFIG_JSON_H
#define TERN_CORE_CONFIG_JSON_H

#include "config/config.h"

/* The resolved configuration as JSON text (malloc()ed), for tern-info. */
char *tern_config_to_json(const tern_config *cfg);

/* The same as a json-c object, and the key table (key, type, accepts, min,
 * max, choices, default, env, help per key) as a json-c array; the caller
 * owns both (json_object_put). */
struct json_object;
struct json_object *tern_config_json(const tern_config *cfg);
struct json_object *tern_config_schema_json(void);

/* o as indented text (malloc()ed, NULL on failure); o is put either way.
 * The one JSON text the configuration and tern_describe give out. */
char *tern_json_to_text(struct json_object *o);

#endif
