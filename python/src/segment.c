/* python/src/segment.c: tern.Segment, a peer's segment opened by an Engine
 * (Engine.open_segment).  It holds its engine and the id libtern gave; the
 * engine keeps the segment's descriptor.  What is asked of a peer by its
 * segment is here too, for Segment's methods and the Engine's alike: its
 * buffers and whether it is alive (ternpy_probe). */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "segment.h"

#include "args.h"
#include "errors.h"
#include "results.h"

#include <stdlib.h>


PyObject *ternpy_segment_new(EngineObject *eo, tern_segment_id id, PyObject *name)
{
    SegmentObject *s = PyObject_New(SegmentObject, &TernPy_SegmentType);
    if (!s)
        return NULL;
    s->engine = (EngineObject *)Py_NewRef(eo);
    s->id = id;
    s->name = Py_NewRef(name);
    return (PyObject *)s;
}

int ternpy_segment_arg(EngineObject *eo, PyObject *arg, tern_segment_id *out)
{
    if (PyObject_TypeCheck(arg, &TernPy_SegmentType)) {
        SegmentObject *s = (SegmentObject *)arg;
        if (s->engine != eo) {
            ternpy_raise(TERN_ERR_INVAL, "segment: opened by another engine");
            return -1;
        }
        *out = s->id;
        return 0;
    }
    if (PyUnicode_Check(arg)) {
        const char *name = ternpy_name_arg(arg, "segment");
        if (!name)
            return -1;
        tern_segment_id id;
        TERNPY_ENTER(eo);
        id = tern_segment_open(eo->e, name);
        TERNPY_LEAVE(eo);
        if (id < 0) {
            ternpy_raise_engine(eo, id);
            return -1;
        }
        *out = id;
        return 0;
    }
    if (PyIndex_Check(arg)) {
        long v = PyLong_AsLong(arg);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0 || v > INT32_MAX) {
            ternpy_raise(TERN_ERR_INVAL, "segment: an id is >= 0");
            return -1;
        }
        *out = (tern_segment_id)v;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "segment: expected a Segment, its id or its name, not %.100s",
                 Py_TYPE(arg)->tp_name);
    return -1;
}

static void segment_dealloc(SegmentObject *s)
{
    Py_XDECREF(s->engine);
    Py_XDECREF(s->name);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *segment_repr(SegmentObject *s)
{
    return PyUnicode_FromFormat("<tern.Segment %U id=%d>", s->name, (int)s->id);
}

static PyObject *segment_index(SegmentObject *s)
{
    return PyLong_FromLong(s->id);
}

static PyObject *segment_descriptor(SegmentObject *s, PyObject *unused)
{
    (void)unused;
    EngineObject *eo = s->engine;
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    char *json = NULL;
    int rc = tern_segment_descriptor(eo->e, s->id, &json);
    if (rc < 0)
        return ternpy_raise_engine(eo, rc);
    PyObject *r = ternpy_json_loads(json);
    free(json);
    return r;
}

static PyObject *segment_close(SegmentObject *s, PyObject *unused)
{
    (void)unused;
    EngineObject *eo = s->engine;
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    int rc;
    TERNPY_ENTER(eo);
    rc = tern_segment_close(eo->e, s->id);
    TERNPY_LEAVE(eo);
    if (rc < 0)
        return ternpy_raise_engine(eo, rc);
    Py_RETURN_NONE;
}

#if TERNPY_V2
PyObject *ternpy_segment_buffers(EngineObject *eo, tern_segment_id id)
{
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    /* Room for a typical peer first: each call fetches the descriptor, so
     * one call is the common case; a second only when it has more (the
     * count may grow between the calls: the peer registers more). */
    size_t max = 64;
    tern_buffer_info *out = PyMem_Malloc(max * sizeof *out);
    if (!out)
        return PyErr_NoMemory();
    int n;
    for (;;) {
        TERNPY_ENTER(eo);
        n = tern_segment_buffers(eo->e, id, out, max);
        TERNPY_LEAVE(eo);
        if (n < 0 || (size_t)n <= max)
            break;
        max = (size_t)n + 8;
        tern_buffer_info *m = PyMem_Realloc(out, max * sizeof *m);
        if (!m) {
            PyMem_Free(out);
            return PyErr_NoMemory();
        }
        out = m;
    }
    if (n < 0) {
        PyMem_Free(out);
        return ternpy_raise_engine(eo, n);
    }
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *b = ternpy_buffer_info(&out[i]);
        if (!b)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, i, b);
    }
    PyMem_Free(out);
    return l;
}

PyObject *ternpy_segment_buffer(EngineObject *eo, tern_segment_id id, PyObject *name)
{
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    const char *s = ternpy_name_arg(name, "buffer");
    if (!s)
        return NULL;
    tern_buffer_info b;
    int rc;
    TERNPY_ENTER(eo);
    rc = tern_segment_buffer_find(eo->e, id, s, &b);
    TERNPY_LEAVE(eo);
    if (rc < 0)
        return ternpy_raise_engine(eo, rc);
    return ternpy_buffer_info(&b);
}

static PyObject *segment_buffers(SegmentObject *s, PyObject *unused)
{
    (void)unused;
    return ternpy_segment_buffers(s->engine, s->id);
}

static PyObject *segment_buffer(SegmentObject *s, PyObject *name)
{
    return ternpy_segment_buffer(s->engine, s->id, name);
}
#endif

static PyObject *segment_get_transport(SegmentObject *s, void *c)
{
    (void)c;
    EngineObject *eo = s->engine;
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    char name[64] = "";
    int rc;
    TERNPY_ENTER(eo);
    rc = tern_segment_transport(eo->e, s->id, name, sizeof name);
    TERNPY_LEAVE(eo);
    if (rc < 0)
        return ternpy_raise_engine(eo, rc);
    return PyUnicode_FromString(name);
}

static PyObject *segment_get_id(SegmentObject *s, void *c)
{
    (void)c;
    return PyLong_FromLong(s->id);
}

static PyObject *segment_get_name(SegmentObject *s, void *c)
{
    (void)c;
    return Py_NewRef(s->name);
}

static PyObject *segment_get_engine(SegmentObject *s, void *c)
{
    (void)c;
    return Py_NewRef(s->engine);
}

#if TERNPY_CLOSE_PROBE
PyObject *ternpy_probe(EngineObject *eo, const char *name, PyObject *timeout)
{
    int ms = 0;
    if (timeout && timeout != Py_None && ternpy_timeout_ms(timeout, &ms) < 0)
        return NULL;
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    int rc;
    TERNPY_ENTER(eo);
    rc = tern_segment_probe(eo->e, name, ms > 0 ? ms : (timeout && timeout != Py_None ? 1 : 0));
    TERNPY_LEAVE(eo);
    if (rc == 0)
        Py_RETURN_TRUE;
    if (rc == TERN_ERR_TIMEOUT || rc == TERN_ERR_CONNECT || rc == TERN_ERR_CLOSED ||
        rc == TERN_ERR_IO)
        Py_RETURN_FALSE; /* no answer: the reason is in last_error */
    return ternpy_raise_engine(eo, rc);
}

static PyObject *segment_probe(SegmentObject *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:probe", kwlist, &timeout))
        return NULL;
    const char *name = PyUnicode_AsUTF8(s->name);
    return name ? ternpy_probe(s->engine, name, timeout) : NULL;
}
#endif

static PyMethodDef segment_methods[] = {
    {"descriptor", (PyCFunction)segment_descriptor, METH_NOARGS,
     "descriptor() -> dict\n\nThe peer's segment descriptor as this engine holds it: name, buffers\n"
     "(name = location, addr, length), devices, transports..."},
#if TERNPY_V2
    {"buffers", (PyCFunction)segment_buffers, METH_NOARGS,
     "buffers() -> list[BufferInfo]\n\nThe peer's registered buffers (name, address, length, location), by\n"
     "address, from its descriptor fetched again (the cached one when the\n"
     "peer cannot be reached)."},
    {"buffer", (PyCFunction)segment_buffer, METH_O,
     "buffer(name) -> BufferInfo\n\nThe peer's buffer registered under `name` (NotFoundError if none)."},
#endif
#if TERNPY_CLOSE_PROBE
    {"probe", (PyCFunction)(void (*)(void))segment_probe, METH_VARARGS | METH_KEYWORDS,
     "probe(timeout=None) -> bool\n\nIs the peer alive (Engine.probe)?  True when its daemon answered\n"
     "within `timeout` seconds (None: io_timeout_ms), False when not."},
#endif
    {"close", (PyCFunction)segment_close, METH_NOARGS,
     "close()\n\nForget the segment and close its connections."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef segment_getset[] = {
    {"id", (getter)segment_get_id, NULL, "libtern's id for the segment", NULL},
    {"name", (getter)segment_get_name, NULL, "the peer's server name", NULL},
    {"engine", (getter)segment_get_engine, NULL, "the Engine that opened it", NULL},
    {"transport", (getter)segment_get_transport, NULL,
     "name of the transport that reaches the peer ('tcp', 'shm', ...)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyNumberMethods segment_as_number = {
    .nb_index = (unaryfunc)segment_index,
};

PyTypeObject TernPy_SegmentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern.Segment",
    .tp_basicsize = sizeof(SegmentObject),
    .tp_dealloc = (destructor)segment_dealloc,
    .tp_repr = (reprfunc)segment_repr,
    .tp_as_number = &segment_as_number,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A peer's segment, from Engine.open_segment(name).\n\n"
              "Pass it (or its id, or its name) as the segment of a request.\n"
              "operator.index(segment) is its id.",
    .tp_methods = segment_methods,
    .tp_getset = segment_getset,
};
