/* python/src/engine_peers.h: the Engine methods on other engines
 * (engine_peers.c): segments, descriptors, named buffers, notifications,
 * statistics and probes; engine.c's method table names them. */
#ifndef TERNPY_ENGINE_PEERS_H
#define TERNPY_ENGINE_PEERS_H

#include "engine_base.h"

PyObject *ternpy_engine_open_segment(EngineObject *self, PyObject *name);
PyObject *ternpy_engine_descriptor(EngineObject *self, PyObject *unused);
PyObject *ternpy_engine_notify_send(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_notify_recv(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_notify_fileno(EngineObject *self, PyObject *unused);
PyObject *ternpy_engine_notify_stats(EngineObject *self, PyObject *unused);
#if TERNPY_STATS
PyObject *ternpy_engine_stats(EngineObject *self, PyObject *unused);
#endif
PyObject *ternpy_engine_notify_recv_async(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_buffers(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_buffer(EngineObject *self, PyObject *args, PyObject *kw);
#if TERNPY_CLOSE_PROBE
PyObject *ternpy_engine_probe(EngineObject *self, PyObject *args, PyObject *kw);
#endif

#endif
