/* python/src/engine_memory.c: Engine.register, unregister and
 * registrations: a Registration keeps the registered object and its
 * buffer export alive (docs/python.md, "Threading and memory"). */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "engine_memory.h"

#include "args.h"
#include "errors.h"
#include "registration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- memory --------------------------------------------------------------- */

static int reg_fill_from_buffer(RegObject *r, PyObject *obj, PyObject *length)
{
    if (PyObject_GetBuffer(obj, &r->view, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) < 0) {
        /* BufferError says what is wrong with the object; say what works. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *why = ev ? PyObject_Str(ev) : NULL;
        char msg[512];
        snprintf(msg, sizeof msg,
                 "register: %s; the object must expose writable, contiguous memory "
                 "(bytearray, writable memoryview, contiguous numpy array)",
                 why && PyUnicode_AsUTF8(why) ? PyUnicode_AsUTF8(why) : "no buffer");
        PyErr_Clear();
        Py_XDECREF(why);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        ternpy_raise(TERN_ERR_INVAL, msg);
        return -1;
    }
    r->has_view = 1;
    r->addr = (uintptr_t)r->view.buf;
    r->len = (size_t)r->view.len;
    if (length != Py_None) {
        size_t n = PyLong_AsSize_t(length);
        if (n == (size_t)-1 && PyErr_Occurred())
            return -1;
        if (n > r->len) {
            PyErr_Clear();
            ternpy_raise(TERN_ERR_INVAL, "register: length is larger than the object's buffer");
            return -1;
        }
        r->len = n;
    }
    r->owner = Py_NewRef(obj);
    return 0;
}

static int reg_fill_from_address(RegObject *r, PyObject *obj, PyObject *length,
                                 PyObject *owner)
{
    unsigned long long a = PyLong_AsUnsignedLongLong(obj);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (length == Py_None) {
        ternpy_raise(TERN_ERR_INVAL, "register: an integer address needs length=");
        return -1;
    }
    size_t n = PyLong_AsSize_t(length);
    if (n == (size_t)-1 && PyErr_Occurred())
        return -1;
    r->addr = (uintptr_t)a;
    r->len = n;
    r->owner = Py_NewRef(owner);
    return 0;
}

PyObject *ternpy_engine_register(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"obj", "length", "name", "location", "keep", NULL};
    PyObject *obj, *length = Py_None, *name = Py_None, *location = Py_None, *owner = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOO$O:register", kwlist, &obj, &length,
                                     &name, &location, &owner))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    if ((name != Py_None && !PyUnicode_Check(name)) ||
        (location != Py_None && !PyUnicode_Check(location))) {
        PyErr_SetString(PyExc_TypeError, "register: name and location must be str or None");
        return NULL;
    }
#if !TERNPY_V2
    if (name != Py_None)
        return ternpy_raise(TERN_ERR_NOT_SUPPORTED,
                            "register: named buffers need a libtern with "
                            "tern_register_memory_named (application API v2)");
#endif
    RegObject *r = PyObject_New(RegObject, &TernPy_RegType);
    if (!r)
        return NULL;
    r->owner = NULL;
    r->has_view = 0;
    r->name = Py_NewRef(name);
    r->location = Py_NewRef(location);
    int rc = PyObject_CheckBuffer(obj) ? reg_fill_from_buffer(r, obj, length)
             : PyIndex_Check(obj)      ? reg_fill_from_address(r, obj, length, owner)
                                       : (PyErr_Format(PyExc_TypeError,
                                                       "register: expected an object with the "
                                                       "buffer protocol or an int address, "
                                                       "not %.100s",
                                                       Py_TYPE(obj)->tp_name),
                                          -1);
    if (rc == 0 && owner != Py_None && r->owner != owner) {
        Py_SETREF(r->owner, Py_NewRef(owner)); /* the buffer stays held by r->view */
    }
    const char *loc = rc == 0 && location != Py_None ? ternpy_name_arg(location, "register: location") : NULL;
    const char *nm = rc == 0 && name != Py_None ? ternpy_name_arg(name, "register: name") : NULL;
    if (rc < 0 || (location != Py_None && !loc) || (name != Py_None && !nm)) {
        Py_DECREF(r);
        return NULL;
    }
    TERNPY_ENTER(self);
#if TERNPY_V2
    rc = tern_register_memory_named(self->e, (void *)r->addr, r->len, loc, nm);
#else
    rc = tern_register_memory(self->e, (void *)r->addr, r->len, loc);
#endif
    TERNPY_LEAVE(self);
    if (rc < 0) {
        ternpy_raise_engine(self, rc);
        Py_DECREF(r);
        return NULL;
    }
    if (ternpy_regs_insert(self, r) < 0) {
        tern_unregister_memory(self->e, (void *)r->addr);
        Py_DECREF(r);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(r->addr);
}

/* The index of the registration for obj: the same object, else its address. */
static Py_ssize_t reg_index_of(EngineObject *self, PyObject *obj, uintptr_t *addr)
{
    for (size_t i = 0; i < self->nregs; i++)
        if (self->regs[i]->owner == obj && obj != Py_None) {
            *addr = self->regs[i]->addr;
            return (Py_ssize_t)i;
        }
    if (PyObject_CheckBuffer(obj)) {
        Py_buffer v;
        if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0)
            return -2;
        *addr = (uintptr_t)v.buf;
        PyBuffer_Release(&v);
    } else {
        unsigned long long a = PyLong_AsUnsignedLongLong(obj);
        if (a == (unsigned long long)-1 && PyErr_Occurred())
            return -2;
        *addr = (uintptr_t)a;
    }
    size_t i = ternpy_regs_upper_bound(self, *addr);
    return i > 0 && self->regs[i - 1]->addr == *addr ? (Py_ssize_t)(i - 1) : -1;
}

PyObject *ternpy_engine_unregister(EngineObject *self, PyObject *obj)
{
    if (ternpy_engine_check(self) < 0)
        return NULL;
    uintptr_t addr = 0;
    Py_ssize_t i = reg_index_of(self, obj, &addr);
    if (i == -2)
        return NULL;
    int rc;
    TERNPY_ENTER(self);
    rc = tern_unregister_memory(self->e, (void *)addr);
    TERNPY_LEAVE(self);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    /* The table may have changed while the GIL was released. */
    size_t j = ternpy_regs_upper_bound(self, addr);
    if (j > 0 && self->regs[j - 1]->addr == addr)
        Py_DECREF(ternpy_regs_take(self, j - 1));
    Py_RETURN_NONE;
}

PyObject *ternpy_engine_registrations(EngineObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = PyList_New((Py_ssize_t)self->nregs);
    for (size_t i = 0; l && i < self->nregs; i++)
        PyList_SET_ITEM(l, (Py_ssize_t)i, Py_NewRef(self->regs[i]));
    return l;
}

#if TERNPY_V2
/* Engine.register_many: int addresses and lengths (and names), registered
 * with one descriptor publish (tern_register_memory_batch), all or
 * nothing; each becomes a Registration as register() makes. */
static int many_fill(EngineObject *self, PyObject *a, PyObject *l, PyObject *n, PyObject *loc,
                     RegObject **out, tern_memory_region *reg)
{
    (void)self;
    if (n != Py_None && !PyUnicode_Check(n)) {
        PyErr_SetString(PyExc_TypeError, "register_many: names must be str or None");
        return -1;
    }
    RegObject *r = PyObject_New(RegObject, &TernPy_RegType);
    if (!r)
        return -1;
    r->owner = NULL;
    r->has_view = 0;
    r->name = Py_NewRef(n);
    r->location = Py_NewRef(loc);
    *out = r;
    if (reg_fill_from_address(r, a, l, Py_None) < 0)
        return -1;
    reg->addr = (void *)r->addr;
    reg->length = r->len;
    reg->location = loc != Py_None ? PyUnicode_AsUTF8(loc) : NULL;
    reg->name = n != Py_None ? PyUnicode_AsUTF8(n) : NULL;
    return (loc != Py_None && !reg->location) || (n != Py_None && !reg->name) ? -1 : 0;
}

PyObject *ternpy_engine_register_many(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"addresses", "lengths", "names", "location", NULL};
    PyObject *addrs, *lens, *names = Py_None, *loc = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO:register_many", kwlist, &addrs, &lens,
                                     &names, &loc))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    if (loc != Py_None && !PyUnicode_Check(loc)) {
        PyErr_SetString(PyExc_TypeError, "register_many: location must be str or None");
        return NULL;
    }
    PyObject *fa = PySequence_Fast(addrs, "register_many: addresses must be a sequence");
    PyObject *fl = fa ? PySequence_Fast(lens, "register_many: lengths must be a sequence") : NULL;
    PyObject *fn = fl && names != Py_None
                       ? PySequence_Fast(names, "register_many: names must be a sequence")
                       : NULL;
    PyObject *res = NULL;
    RegObject **rs = NULL;
    tern_memory_region *regs = NULL;
    Py_ssize_t n = fa && fl ? PySequence_Fast_GET_SIZE(fa) : 0;
    if (!fa || !fl || (names != Py_None && !fn))
        goto out;
    if (PySequence_Fast_GET_SIZE(fl) != n || (fn && PySequence_Fast_GET_SIZE(fn) != n)) {
        ternpy_raise(TERN_ERR_INVAL, "register_many: addresses, lengths and names differ in "
                                     "length");
        goto out;
    }
    rs = PyMem_Calloc((size_t)n + 1, sizeof *rs);
    regs = PyMem_Calloc((size_t)n + 1, sizeof *regs);
    if (!rs || !regs) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (many_fill(self, PySequence_Fast_GET_ITEM(fa, i), PySequence_Fast_GET_ITEM(fl, i),
                      fn ? PySequence_Fast_GET_ITEM(fn, i) : Py_None, loc, &rs[i],
                      &regs[i]) < 0)
            goto out;
    int rc = 0;
    if (n > 0) {
        TERNPY_ENTER(self);
        rc = tern_register_memory_batch(self->e, regs, (size_t)n);
        TERNPY_LEAVE(self);
    }
    if (rc < 0) {
        ternpy_raise_engine(self, rc);
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        RegObject *r = rs[i];
        rs[i] = NULL;
        if (ternpy_regs_insert(self, r) < 0) { /* out of memory: drop it again */
            tern_unregister_memory(self->e, (void *)r->addr);
            Py_DECREF(r);
        }
    }
    res = PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
out:
    for (Py_ssize_t i = 0; rs && i < n; i++)
        Py_XDECREF(rs[i]);
    PyMem_Free(rs);
    PyMem_Free(regs);
    Py_XDECREF(fa);
    Py_XDECREF(fl);
    Py_XDECREF(fn);
    return res;
}
#endif

#if TERNPY_ALLOC
/* Engine.alloc_memory / free_memory: memory tern allocates and registers
 * (tern_alloc_memory), addressed by int as a registration of an int
 * address is; the engine frees what is left when it closes. */
PyObject *ternpy_engine_alloc_memory(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", "name", "location", NULL};
    Py_ssize_t len;
    PyObject *name = Py_None, *location = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|OO:alloc_memory", kwlist, &len, &name,
                                     &location))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    if (len <= 0)
        return ternpy_raise(TERN_ERR_INVAL, "alloc_memory: length must be positive");
    if ((name != Py_None && !PyUnicode_Check(name)) ||
        (location != Py_None && !PyUnicode_Check(location))) {
        PyErr_SetString(PyExc_TypeError, "alloc_memory: name and location must be str or None");
        return NULL;
    }
    const char *nm = name != Py_None ? ternpy_name_arg(name, "alloc_memory: name") : NULL;
    const char *loc =
        location != Py_None ? ternpy_name_arg(location, "alloc_memory: location") : NULL;
    if ((name != Py_None && !nm) || (location != Py_None && !loc))
        return NULL;
    void *p = NULL;
    int rc;
    TERNPY_ENTER(self);
    rc = tern_alloc_memory(self->e, (size_t)len, loc, nm, &p);
    TERNPY_LEAVE(self);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    return PyLong_FromUnsignedLongLong((uintptr_t)p);
}

PyObject *ternpy_engine_free_memory(EngineObject *self, PyObject *addr)
{
    if (ternpy_engine_check(self) < 0)
        return NULL;
    unsigned long long a = PyLong_AsUnsignedLongLong(addr);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int rc;
    TERNPY_ENTER(self);
    rc = tern_free_memory(self->e, (void *)(uintptr_t)a);
    TERNPY_LEAVE(self);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    Py_RETURN_NONE;
}
#endif
