/* core/log.h: the engine's log line on stderr, filtered by the configured
 * level.  The argument is the engine's tern_config (NULL: info and above),
 * so every object can log without knowing the engine. */
#ifndef TERN_CORE_LOG_H
#define TERN_CORE_LOG_H

#include <stdarg.h>

void tern_log(void *cfg, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tern_logv(const void *cfg, int level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
