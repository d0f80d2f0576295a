/* python/src/engine_peers.c: what an Engine says to other engines:
 * segments opened by name, its own descriptor and named buffers, and
 * notifications sent and received. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "engine_peers.h"

#include "args.h"
#include "errors.h"
#include "results.h"
#include "segment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- segments and notifications ------------------------------------------- */

PyObject *ternpy_engine_open_segment(EngineObject *self, PyObject *name)
{
    if (ternpy_engine_check(self) < 0)
        return NULL;
    const char *s = ternpy_name_arg(name, "open_segment");
    if (!s)
        return NULL;
    tern_segment_id id;
    TERNPY_ENTER(self);
    id = tern_segment_open(self->e, s);
    TERNPY_LEAVE(self);
    if (id < 0)
        return ternpy_raise_engine(self, id);
    return ternpy_segment_new(self, id, name);
}

PyObject *ternpy_engine_descriptor(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    char *json = NULL;
    int rc = tern_segment_descriptor(self->e, TERN_LOCAL_SEGMENT, &json);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    PyObject *r = ternpy_json_loads(json);
    free(json);
    return r;
}

PyObject *ternpy_engine_notify_send(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "name", "msg", NULL};
    PyObject *seg, *msg;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsO:notify_send", kwlist, &seg, &name, &msg))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_segment_id id;
    if (ternpy_segment_arg(self, seg, &id) < 0)
        return NULL;
    PyObject *bytes = PyUnicode_Check(msg) ? PyUnicode_AsUTF8String(msg) : Py_XNewRef(msg);
    if (!bytes || !PyBytes_Check(bytes)) {
        if (bytes)
            PyErr_SetString(PyExc_TypeError, "notify_send: msg must be str or bytes");
        Py_XDECREF(bytes);
        return NULL;
    }
    if (strlen(PyBytes_AS_STRING(bytes)) != (size_t)PyBytes_GET_SIZE(bytes)) {
        Py_DECREF(bytes);
        return ternpy_raise(TERN_ERR_INVAL, "notify_send: msg contains a NUL byte");
    }
    int rc;
    TERNPY_ENTER(self);
    rc = tern_notify_send(self->e, id, name, PyBytes_AS_STRING(bytes));
    TERNPY_LEAVE(self);
    Py_DECREF(bytes);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    Py_RETURN_NONE;
}

PyObject *ternpy_engine_notify_recv(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = NULL;
    int ms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:notify_recv", kwlist, &timeout))
        return NULL;
    if (timeout && ternpy_timeout_ms(timeout, &ms) < 0)
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    char from[256], name[256];
    char *msg = PyMem_Malloc(TERN_NOTIFY_MAX + 1);
    if (!msg)
        return PyErr_NoMemory();
    int rc;
    if (ms == 0) {
        rc = tern_notify_recv(self->e, from, sizeof from, name, sizeof name, msg,
                              TERN_NOTIFY_MAX + 1);
    } else {
#if TERNPY_V2
        TERNPY_ENTER(self);
        rc = tern_notify_recv_wait(self->e, from, sizeof from, name, sizeof name, msg,
                                   TERN_NOTIFY_MAX + 1, ms);
        TERNPY_LEAVE(self);
#else
        PyMem_Free(msg);
        return ternpy_raise(TERN_ERR_NOT_SUPPORTED,
                            "notify_recv: waiting needs tern_notify_recv_wait "
                            "(application API v2)");
#endif
    }
    PyObject *r = rc < 0    ? ternpy_raise_engine(self, rc)
                  : rc == 0 ? Py_NewRef(Py_None)
                            : ternpy_notification(from, name, msg);
    PyMem_Free(msg);
    return r;
}

#if TERNPY_V2
PyObject *ternpy_engine_notify_fileno(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    int fd = tern_notify_fd(self->e);
    if (fd < 0)
        return ternpy_raise_engine(self, fd);
    return PyLong_FromLong(fd);
}

PyObject *ternpy_engine_notify_stats(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_notify_stats st;
    int rc = tern_notify_stats_get(self->e, &st);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "received",
                         (unsigned long long)st.received, "delivered",
                         (unsigned long long)st.delivered, "refused",
                         (unsigned long long)st.refused, "queued",
                         (unsigned long long)st.queued, "sent", (unsigned long long)st.sent,
                         "send_failed", (unsigned long long)st.send_failed);
}

PyObject *ternpy_engine_notify_recv_async(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:notify_recv_async", kwlist, &timeout))
        return NULL;
    PyObject *a = PyTuple_Pack(2, (PyObject *)self, timeout);
    if (!a)
        return NULL;
    PyObject *r = ternpy_aio("notify_recv", a);
    Py_DECREF(a);
    return r;
}

PyObject *ternpy_engine_buffers(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", NULL};
    PyObject *seg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:buffers", kwlist, &seg))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_segment_id id = TERN_LOCAL_SEGMENT;
    if (seg != Py_None && ternpy_segment_arg(self, seg, &id) < 0)
        return NULL;
    return ternpy_segment_buffers(self, id);
}

PyObject *ternpy_engine_buffer(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "name", NULL};
    PyObject *seg, *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OU:buffer", kwlist, &seg, &name))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_segment_id id = TERN_LOCAL_SEGMENT;
    if (seg != Py_None && ternpy_segment_arg(self, seg, &id) < 0)
        return NULL;
    return ternpy_segment_buffer(self, id, name);
}
#endif

#if TERNPY_CLOSE_PROBE
PyObject *ternpy_engine_probe(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "timeout", NULL};
    PyObject *seg, *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:probe", kwlist, &seg, &timeout))
        return NULL;
    if (PyObject_TypeCheck(seg, &TernPy_SegmentType)) {
        SegmentObject *so = (SegmentObject *)seg;
        if (so->engine != self)
            return ternpy_raise(TERN_ERR_INVAL, "probe: a segment opened by another engine");
        seg = so->name;
    }
    if (!PyUnicode_Check(seg)) {
        PyErr_SetString(PyExc_TypeError, "probe: segment must be a Segment or a str 'host:port'");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(seg);
    return name ? ternpy_probe(self, name, timeout) : NULL;
}
#endif

/* ---- statistics ------------------------------------------------------------------ */

#if TERNPY_STATS
static int stats_put(PyObject *d, const char *k, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *by_op(const uint64_t v[2])
{
    return Py_BuildValue("{s:K,s:K}", "read", (unsigned long long)v[TERN_READ], "write",
                         (unsigned long long)v[TERN_WRITE]);
}

/* {"timeout": 3, ...}: the non-zero failure counts by error name. */
static PyObject *errors_dict(const tern_stats *st)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < TERN_STATS_ERRORS; i++) {
        if (!st->errors[i])
            continue;
        const char *n = i ? tern_strerror(-i) : "other";
        char name[48];
        size_t k = 0;
        if (!strncmp(n, "TERN_ERR_", 9))
            n += 9;
        for (; n[k] && k + 1 < sizeof name; k++)
            name[k] = (char)(n[k] >= 'A' && n[k] <= 'Z' ? n[k] - 'A' + 'a' : n[k]);
        name[k] = 0;
        if (stats_put(d, name, PyLong_FromUnsignedLongLong(st->errors[i])) < 0)
            Py_CLEAR(d);
    }
    return d;
}

/* {"count", "sum", "buckets": [(le seconds, count), ...]} per op. */
static PyObject *latency_dict(const tern_stats *st)
{
    PyObject *d = PyDict_New();
    for (int op = 0; d && op < 2; op++) {
        PyObject *b = PyList_New(TERN_STATS_BUCKETS);
        for (int k = 0; b && k < TERN_STATS_BUCKETS; k++) {
            PyObject *t = Py_BuildValue("(dK)", tern_stats_bucket_le(k),
                                        (unsigned long long)st->latency[op][k]);
            if (!t) {
                Py_CLEAR(b);
                break;
            }
            PyList_SET_ITEM(b, k, t);
        }
        PyObject *h = b ? Py_BuildValue("{s:K,s:d,s:N}", "count",
                                        (unsigned long long)st->latency_count[op], "sum",
                                        (double)st->latency_sum_ns[op] * 1e-9, "buckets", b)
                        : NULL;
        if (stats_put(d, op == TERN_READ ? "read" : "write", h) < 0)
            Py_CLEAR(d);
    }
    return d;
}

static PyObject *set_dict(const tern_stats *st)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (stats_put(d, "ops", by_op(st->ops)) < 0 || stats_put(d, "bytes", by_op(st->bytes)) < 0 ||
        stats_put(d, "failures", by_op(st->failures)) < 0 ||
        stats_put(d, "errors", errors_dict(st)) < 0 ||
        stats_put(d, "retries", PyLong_FromUnsignedLongLong(st->retries)) < 0 ||
        stats_put(d, "refetches", PyLong_FromUnsignedLongLong(st->refetches)) < 0 ||
        stats_put(d, "fallbacks", PyLong_FromUnsignedLongLong(st->fallbacks)) < 0 ||
        stats_put(d, "heals", PyLong_FromUnsignedLongLong(st->heals)) < 0 ||
        stats_put(d, "in_flight", PyLong_FromLongLong(st->in_flight)) < 0 ||
        stats_put(d, "latency", latency_dict(st)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static int stats_one(const tern_stats *st, void *arg)
{
    PyObject *out = arg; /* {"engine": ..., "transports": {...}, "peers": {...}} */
    PyObject *d = set_dict(st);
    if (!d)
        return -1;
    int rc;
    if (st->kind == TERN_STATS_ENGINE) {
        rc = PyDict_SetItemString(out, "engine", d);
    } else {
        PyObject *m = PyDict_GetItemString(out, st->kind == TERN_STATS_PEER ? "peers"
                                                                            : "transports");
        rc = m ? PyDict_SetItemString(m, st->name, d) : -1;
    }
    Py_DECREF(d);
    return rc < 0 ? -1 : 0;
}

PyObject *ternpy_engine_stats(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    PyObject *out = Py_BuildValue("{s:N,s:N}", "transports", PyDict_New(), "peers",
                                  PyDict_New());
    if (!out)
        return NULL;
    int rc = tern_engine_stats(self->e, stats_one, out); /* short: the GIL stays held */
    if (rc == -1 && PyErr_Occurred()) {
        Py_DECREF(out);
        return NULL;
    }
    if (rc < 0) {
        Py_DECREF(out);
        return ternpy_raise_engine(self, rc);
    }
    return out;
}
#endif
