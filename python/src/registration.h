/* python/src/registration.h: tern.Registration and an engine's table of
 * them, sorted by address (registration.c). */
#ifndef TERNPY_REGISTRATION_H
#define TERNPY_REGISTRATION_H

#include "engine_base.h"

struct RegObject {
    PyObject_HEAD
    uintptr_t addr;
    size_t len;
    PyObject *owner;    /* the registered object, or keep=, or None */
    Py_buffer view;     /* held while registered: the object cannot resize */
    int has_view;
    PyObject *name;     /* str or None */
    PyObject *location; /* str or None (detected) */
};

extern PyTypeObject TernPy_RegType;

/* The registration covering [addr, addr+len), borrowed, or NULL. */
RegObject *ternpy_engine_find_reg(EngineObject *eo, uintptr_t addr, uint64_t len);
size_t ternpy_regs_upper_bound(EngineObject *eo, uintptr_t addr);
int ternpy_regs_insert(EngineObject *eo, RegObject *r);
RegObject *ternpy_regs_take(EngineObject *eo, size_t i);

#endif
