/* python/src/registration.c: tern.Registration, and an engine's table of
 * them, sorted by address (registration.h). */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "registration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- Registration -------------------------------------------------------- */

static void reg_dealloc(RegObject *r)
{
    if (r->has_view)
        PyBuffer_Release(&r->view);
    Py_XDECREF(r->owner);
    Py_XDECREF(r->name);
    Py_XDECREF(r->location);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *reg_repr(RegObject *r)
{
    return PyUnicode_FromFormat("<tern.Registration 0x%zx length=%zu name=%R location=%R>",
                                (size_t)r->addr, r->len, r->name, r->location);
}

static PyObject *reg_get_address(RegObject *r, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(r->addr);
}

static PyObject *reg_get_length(RegObject *r, void *c)
{
    (void)c;
    return PyLong_FromSize_t(r->len);
}

static PyObject *reg_get_obj(RegObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->owner);
}

static PyObject *reg_get_name(RegObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->name);
}

static PyObject *reg_get_location(RegObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->location);
}

static PyGetSetDef reg_getset[] = {
    {"address", (getter)reg_get_address, NULL, "first byte of the registered memory", NULL},
    {"length", (getter)reg_get_length, NULL, "bytes registered", NULL},
    {"obj", (getter)reg_get_obj, NULL,
     "the object kept alive by this registration (the buffer, or keep=), or None", NULL},
    {"name", (getter)reg_get_name, NULL, "the application's name for it, or None", NULL},
    {"location", (getter)reg_get_location, NULL,
     "the location given at registration ('cpu:0'), or None when detected", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject TernPy_RegType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern.Registration",
    .tp_basicsize = sizeof(RegObject),
    .tp_dealloc = (destructor)reg_dealloc,
    .tp_repr = (reprfunc)reg_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory registered with an Engine (Engine.registrations()).\n\n"
              "It keeps the registered object alive until Engine.unregister() and\n"
              "until no batch that used it can still touch it.",
    .tp_getset = reg_getset,
};

/* ---- the registration table: sorted by address ---------------------------- */

size_t ternpy_regs_upper_bound(EngineObject *eo, uintptr_t addr)
{
    size_t lo = 0, hi = eo->nregs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (eo->regs[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

RegObject *ternpy_engine_find_reg(EngineObject *eo, uintptr_t addr, uint64_t len)
{
    size_t i = ternpy_regs_upper_bound(eo, addr);
    if (i == 0)
        return NULL;
    RegObject *r = eo->regs[i - 1];
    if (addr - r->addr > r->len || len > r->len - (addr - r->addr))
        return NULL;
    return r;
}

int ternpy_regs_insert(EngineObject *eo, RegObject *r)
{
    if (eo->nregs == eo->capregs) {
        size_t cap = eo->capregs ? eo->capregs * 2 : 8;
        RegObject **n = PyMem_Realloc(eo->regs, cap * sizeof *n);
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        eo->regs = n;
        eo->capregs = cap;
    }
    size_t i = ternpy_regs_upper_bound(eo, r->addr);
    memmove(&eo->regs[i + 1], &eo->regs[i], (eo->nregs - i) * sizeof *eo->regs);
    eo->regs[i] = r; /* the table's reference */
    eo->nregs++;
    return 0;
}

RegObject *ternpy_regs_take(EngineObject *eo, size_t i)
{
    RegObject *r = eo->regs[i];
    memmove(&eo->regs[i], &eo->regs[i + 1], (eo->nregs - i - 1) * sizeof *eo->regs);
    eo->nregs--;
    return r;
}
