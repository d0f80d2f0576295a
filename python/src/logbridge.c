/* python/src/logbridge.c: tern._tern._LogQueue, the engine's log lines on
 * their way to Python's `logging` (Engine(..., logger=...); docs/python.md,
 * Logging).
 *
 * The engine's log hook runs on whichever thread logs: engine threads
 * (data path workers, the handshake daemon, transport threads) and
 * application threads inside a call, often with engine locks held.  It
 * never touches Python: it copies the line into this bounded queue and
 * returns.  A Python thread (tern/_logbridge.py) takes the lines with get(),
 * which waits with the GIL released, and hands them to the logger.  So no
 * engine thread ever waits for the GIL, and a Python thread that holds the
 * GIL while it waits for the engine (close() joining its threads) cannot
 * deadlock with a line being logged.  A full queue drops lines and says how
 * many, rather than stall the engine on a slow handler. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "logbridge.h"
#include "tern/transport.h" /* TERN_LOG_* */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if TERNPY_LOG_HOOK

#define LOGQ_CAP 4096 /* lines waiting for the Python thread */

typedef struct logline {
    int level;
    long tid;
    double time; /* seconds since the epoch, when it was logged */
    char *engine, *msg;
} logline;

struct ternpy_logq {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    logline ring[LOGQ_CAP];
    size_t head, n;
    unsigned long dropped; /* since the last get() */
    int closed;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int ternpy_log_hook(void *user, int level, const char *engine, const char *msg)
{
    ternpy_logq *q = user;
    logline l = {level, (long)syscall(SYS_gettid), now_s(), strdup(engine), strdup(msg)};
    pthread_mutex_lock(&q->lock);
    if (q->n == LOGQ_CAP || q->closed || !l.engine || !l.msg) {
        q->dropped++;
    } else {
        q->ring[(q->head + q->n) % LOGQ_CAP] = l;
        q->n++;
        l.engine = l.msg = NULL; /* the queue owns them */
        pthread_cond_signal(&q->cond);
    }
    pthread_mutex_unlock(&q->lock);
    free(l.engine);
    free(l.msg);
    return 0; /* logging decides where it goes */
}

/* ---- the Python object ------------------------------------------------------- */

static PyObject *logq_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    LogQueueObject *self = (LogQueueObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->q = calloc(1, sizeof *self->q);
    if (!self->q) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    pthread_mutex_init(&self->q->lock, NULL);
    pthread_cond_init(&self->q->cond, NULL);
    return (PyObject *)self;
}

static void logq_dealloc(LogQueueObject *self)
{
    ternpy_logq *q = self->q;
    if (q) { /* the engine that logged into it is gone (Engine.close) */
        for (size_t i = 0; i < q->n; i++) {
            free(q->ring[(q->head + i) % LOGQ_CAP].engine);
            free(q->ring[(q->head + i) % LOGQ_CAP].msg);
        }
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->cond);
        free(q);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Up to 256 lines taken under the lock, converted after it. */
#define LOGQ_BATCH 256

static PyObject *lines_to_list(logline *v, size_t n, unsigned long dropped)
{
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *t = Py_BuildValue("(issld)", v[i].level, v[i].engine, v[i].msg, v[i].tid,
                                    v[i].time);
        if (!t || PyList_Append(list, t) < 0)
            Py_CLEAR(list);
        Py_XDECREF(t);
    }
    if (list && dropped) {
        char msg[160];
        snprintf(msg, sizeof msg, "%lu log line(s) dropped: the queue to Python's logging was "
                 "full (a slow handler?)", dropped);
        PyObject *t = Py_BuildValue("(issld)", TERN_LOG_WARN, "", msg, 0L, now_s());
        if (!t || PyList_Append(list, t) < 0)
            Py_CLEAR(list);
        Py_XDECREF(t);
    }
    for (size_t i = 0; i < n; i++) {
        free(v[i].engine);
        free(v[i].msg);
    }
    return list;
}

static PyObject *logq_get(LogQueueObject *self, PyObject *args)
{
    double timeout = -1;
    if (!PyArg_ParseTuple(args, "|d:get", &timeout))
        return NULL;
    ternpy_logq *q = self->q;
    logline *v = PyMem_Malloc(LOGQ_BATCH * sizeof *v);
    if (!v)
        return PyErr_NoMemory();
    size_t n = 0;
    unsigned long dropped = 0;
    int closed;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout >= 0) {
        until.tv_sec += (time_t)timeout;
        until.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&q->lock);
    while (!q->n && !q->dropped && !q->closed) {
        if (timeout < 0)
            pthread_cond_wait(&q->cond, &q->lock);
        else if (pthread_cond_timedwait(&q->cond, &q->lock, &until) != 0)
            break;
    }
    for (; n < LOGQ_BATCH && q->n; n++) {
        v[n] = q->ring[q->head];
        q->head = (q->head + 1) % LOGQ_CAP;
        q->n--;
    }
    dropped = q->dropped;
    q->dropped = 0;
    closed = q->closed && !q->n;
    pthread_mutex_unlock(&q->lock);
    Py_END_ALLOW_THREADS
    PyObject *list = NULL;
    if (!n && !dropped && closed)
        list = Py_NewRef(Py_None); /* drained and closed: the reader stops */
    else
        list = lines_to_list(v, n, dropped);
    PyMem_Free(v);
    return list;
}

static PyObject *logq_close(LogQueueObject *self, PyObject *unused)
{
    (void)unused;
    pthread_mutex_lock(&self->q->lock);
    self->q->closed = 1;
    pthread_cond_broadcast(&self->q->cond);
    pthread_mutex_unlock(&self->q->lock);
    Py_RETURN_NONE;
}

static PyMethodDef logq_methods[] = {
    {"get", (PyCFunction)logq_get, METH_VARARGS,
     "get(timeout=-1) -> list | None\n\nThe lines logged since the last call, as (level, engine, msg, tid,\n"
     "time) tuples, waiting (GIL released) up to timeout seconds (negative:\n"
     "until there is one); [] on timeout; None once closed and drained."},
    {"close", (PyCFunction)logq_close, METH_NOARGS,
     "close()\n\nNo more lines come: get() returns what is left, then None."},
    {NULL, NULL, 0, NULL}};

PyTypeObject TernPy_LogQueueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._tern._LogQueue",
    .tp_basicsize = sizeof(LogQueueObject),
    .tp_dealloc = (destructor)logq_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The queue between an engine's log hook and tern._logbridge (internal).",
    .tp_methods = logq_methods,
    .tp_new = logq_new,
};

#endif
