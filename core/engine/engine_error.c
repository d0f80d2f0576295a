/* core/engine/engine_error.c: the last error, one buffer per (engine, thread);
 * the engine frees every buffer when it goes (see engine_error.h). */
#include "engine/engine_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct tern_errbuf {
    char msg[TERN_ERRMSG_MAX];
    struct tern_errbuf *next;
} tern_errbuf;

int tern_engine_error_init(tern_engine *e)
{
    if (pthread_key_create(&e->errkey, NULL) != 0)
        return TERN_ERR_NOMEM;
    pthread_mutex_init(&e->errlock, NULL);
    return 0;
}

void tern_engine_error_fini(tern_engine *e)
{
    pthread_key_delete(e->errkey);
    for (tern_errbuf *b = e->errbufs, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    pthread_mutex_destroy(&e->errlock);
}

static tern_errbuf *errbuf_get(const tern_engine *ce, int create)
{
    tern_engine *e = (tern_engine *)ce;
    tern_errbuf *b = pthread_getspecific(e->errkey);
    if (b || !create)
        return b;
    b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    pthread_mutex_lock(&e->errlock); /* destroy frees every buffer */
    b->next = e->errbufs;
    e->errbufs = b;
    pthread_mutex_unlock(&e->errlock);
    pthread_setspecific(e->errkey, b);
    return b;
}

int tern_engine_fail(const tern_engine *e, int code, const char *fmt, ...)
{
    tern_errbuf *b = e ? errbuf_get(e, 1) : NULL;
    if (!b)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    return code;
}

void tern_engine_clear_error(const tern_engine *e)
{
    tern_errbuf *b = e ? errbuf_get(e, 0) : NULL;
    if (b)
        b->msg[0] = '\0';
}

TERN_EXPORT const char *tern_engine_last_error(const tern_engine *e)
{
    tern_errbuf *b = e ? errbuf_get(e, 0) : NULL;
    return b ? b->msg : "";
}
