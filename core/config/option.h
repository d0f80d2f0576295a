/* core/config/option.h: the one validator of a value against a tern_option
 * (option.c), for the core's keys and every plugin's option table. */
#ifndef TERN_CORE_CONFIG_OPTION_H
#define TERN_CORE_CONFIG_OPTION_H

#include <stddef.h>

#include "config/config.h"

struct cfgctx;
struct cfg_key;
struct cfg_value;
struct ynode;

/* What `o` accepts, in words ("an integer in -1..255"); `k` (NULL for a
 * plugin's option) adds the core's own wording and aliases. */
void cfg_option_what(const tern_option *o, const struct cfg_key *k, char *buf, size_t len);
/* Check node v (the value of key `at`, reported at `at`) against o.  Scalars
 * only; STRING_LIST is checked by cfg_list_check. */
int cfg_option_check(struct cfgctx *c, const tern_option *o, const struct cfg_key *k,
                     const struct ynode *at, const struct ynode *v, const char *path,
                     struct cfg_value *out);
/* A list of scalars (null: empty), each passing k->valid. */
int cfg_list_check(struct cfgctx *c, const struct cfg_key *k, const struct ynode *at,
                   const struct ynode *v, const char *path);

/* Validate transports[idx]'s keys against a plugin's option table. */
int tern_config_check_options(const tern_config *cfg, size_t idx,
                              const tern_option *opts, char *err, size_t errlen);

/* Look up a transport key as text (NULL when absent). */
const tern_cfg_kv *tern_config_transport_key(const tern_config *cfg, size_t idx,
                                             const char *key);

#endif
