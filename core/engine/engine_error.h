/* core/engine/engine_error.h: the per-engine, per-thread last error behind
 * tern_engine_last_error(). */
#ifndef TERN_CORE_ENGINE_ERROR_H
#define TERN_CORE_ENGINE_ERROR_H

#include "engine/engine_state.h"

int tern_engine_error_init(tern_engine *e);
void tern_engine_error_fini(tern_engine *e);
/* Store the message for this thread; returns code. */
int tern_engine_fail(const tern_engine *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tern_engine_clear_error(const tern_engine *e);

#endif
