/* core/base/log.h: the engine's log lines.
 *
 * Each engine owns one tern_logger (engine_state.h): the configured level
 * and format (log_level, log_format), the application's hook if it gave one
 * (tern_engine_create_with) and the engine's name.  Every object logs
 * through a pointer to it; NULL logs like an engine without a name (info
 * and above, text, stderr), for code that runs before an engine exists.
 *
 * A line is "2026-12-03T18:00:00.123Z warn tern[127.0.0.1:12001] tid=1234:
 * message" (UTC, milliseconds), or with log_format json one object
 * {"time", "level", "engine", "thread", "msg"} per line.  With a hook set,
 * the hook receives (level, engine name, message) and the line goes to
 * stderr only when the hook returns nonzero (docs/api.md, Logging). */
#ifndef TERN_CORE_LOG_H
#define TERN_CORE_LOG_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>

#include "tern/tern.h"
#include "tern/transport.h"

enum { TERN_LOG_FORMAT_TEXT = 0, TERN_LOG_FORMAT_JSON = 1 };

typedef struct tern_logger {
    int level;            /* highest level written (TERN_LOG_*) */
    int format;           /* TERN_LOG_FORMAT_* */
    tern_log_hook hook;   /* NULL: stderr */
    void *user;           /* the hook's argument */
    pthread_mutex_t lock; /* name: rewritten once the daemon's port is known */
    char name[300];
} tern_logger;

/* Set every field; name NULL is "". */
void tern_logger_init(tern_logger *lg, int level, int format, tern_log_hook hook, void *user,
                      const char *name);
void tern_logger_fini(tern_logger *lg);
/* Rename (the real port replaces port 0); lines after it carry the new name. */
void tern_logger_set_name(tern_logger *lg, const char *name);
/* Whether a line of this level would be written: lets a caller skip building
 * a costly message. */
int tern_log_enabled(const tern_logger *lg, int level);

void tern_log(const tern_logger *lg, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tern_logv(const tern_logger *lg, int level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* The same behind the untyped callback the plugin loader and the handshake
 * daemon take (arg: the tern_logger). */
void tern_log_cb(void *lg, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
