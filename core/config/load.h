/* core/config/load.h: building a tern_config (load.c) from the defaults,
 * a file or YAML text, and the environment. */
#ifndef TERN_CORE_CONFIG_LOAD_H
#define TERN_CORE_CONFIG_LOAD_H

#include <stddef.h>

#include "config/config.h"

/* Load from a file or from YAML text; NULL path = $TERN_CONFIG or embedded
 * default.  Environment overrides (TERN_LOG_LEVEL, TERN_PLUGIN_PATH) are
 * applied here.  On error returns TERN_ERR_CONFIG with the message in err. */
int tern_config_load_file(const char *path, tern_config **out, char *err, size_t errlen);
int tern_config_load_yaml(const char *yaml, const char *origin, tern_config **out,
                          char *err, size_t errlen);
void tern_config_free(tern_config *cfg);

/* Replace server_name (validated like the YAML key). */
int tern_config_set_server_name(tern_config *cfg, const char *name, char *err, size_t errlen);

/* The embedded default configuration (same text as config/tern.yaml). */
const char *tern_config_default_yaml(void);

struct cfgctx;
struct cfg_key;
struct ynode;
/* Apply the root mapping of a tree to cfg. */
int cfg_apply_tree(struct cfgctx *c, tern_config *cfg, const struct ynode *root);
/* Store a checked value of key k (from a tree or the environment). */
int cfg_key_set(struct cfgctx *c, tern_config *cfg, const struct cfg_key *k,
                const struct ynode *kn, const struct ynode *v);

#endif
