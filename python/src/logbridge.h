/* python/src/logbridge.h: tern._tern._LogQueue, the engine's log lines on
 * their way to Python's logging (logbridge.c). */
#ifndef TERNPY_LOGBRIDGE_H
#define TERNPY_LOGBRIDGE_H

#include "ternpy.h"

typedef struct ternpy_logq ternpy_logq;

typedef struct LogQueueObject {
    PyObject_HEAD
    ternpy_logq *q;
} LogQueueObject;

#if TERNPY_LOG_HOOK
extern PyTypeObject TernPy_LogQueueType;
/* The engine's log hook: user is a LogQueueObject's q. */
int ternpy_log_hook(void *user, int level, const char *engine, const char *msg);
#endif

#endif
