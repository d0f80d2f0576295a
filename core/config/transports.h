/* core/config/transports.h: the `transports:` list (transports.c). */
#ifndef TERN_CORE_CONFIG_TRANSPORTS_H
#define TERN_CORE_CONFIG_TRANSPORTS_H

#include "config/cfg_internal.h"

int cfg_transports_parse(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v);
void cfg_transports_free(tern_config *cfg);

#endif
