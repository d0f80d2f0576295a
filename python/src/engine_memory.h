/* python/src/engine_memory.h: the Engine methods on memory (engine_memory.c);
 * engine.c's method table names them. */
#ifndef TERNPY_ENGINE_MEMORY_H
#define TERNPY_ENGINE_MEMORY_H

#include "engine_base.h"

PyObject *ternpy_engine_register(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_unregister(EngineObject *self, PyObject *obj);
PyObject *ternpy_engine_registrations(EngineObject *self, PyObject *unused);
#if TERNPY_V2
PyObject *ternpy_engine_register_many(EngineObject *self, PyObject *args, PyObject *kw);
#if TERNPY_ALLOC
PyObject *ternpy_engine_alloc_memory(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_free_memory(EngineObject *self, PyObject *addr);
#endif
#endif

#endif
