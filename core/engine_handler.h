/* core/engine_handler.h: the handshake daemon's frame handler. */
#ifndef TERN_CORE_ENGINE_HANDLER_H
#define TERN_CORE_ENGINE_HANDLER_H

#include <stddef.h>

#include "engine/engine_state.h"

/* arg is the engine; see tern_hs_handler in control/server.h. */
int tern_engine_hs_handler(void *arg, int type, const char *json, size_t len, char **reply,
                           size_t *replylen);

#endif
