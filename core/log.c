/* core/log.c: see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

#include "config.h"
#include "tern/transport.h"

void tern_log(void *arg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tern_logv(arg, level, fmt, ap);
    va_end(ap);
}

void tern_logv(const void *arg, int level, const char *fmt, va_list ap)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const tern_config *cfg = arg;
    int max = cfg ? cfg->log_level : TERN_LOG_INFO;
    if (level > max)
        return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    int l = level < 0 ? 0 : level > 3 ? 3 : level;
    fprintf(stderr, "tern[%s] %s\n", names[l], msg);
}
