/* python/src/segment.h: tern.Segment, a peer's segment opened by an
 * Engine, and what is asked of a peer by its segment: its buffers, whether
 * it is alive (segment.c). */
#ifndef TERNPY_SEGMENT_H
#define TERNPY_SEGMENT_H

#include "engine_base.h"

typedef struct SegmentObject {
    PyObject_HEAD
    EngineObject *engine; /* strong */
    tern_segment_id id;
    PyObject *name;       /* str */
} SegmentObject;

extern PyTypeObject TernPy_SegmentType;

/* A new Segment for an id the engine already opened. */
PyObject *ternpy_segment_new(EngineObject *eo, tern_segment_id id, PyObject *name);
/* Segment, int id or str name (opened on the way) -> id; -1 with an
 * exception set on failure. */
int ternpy_segment_arg(EngineObject *eo, PyObject *arg, tern_segment_id *out);
#if TERNPY_V2
/* Segment id's buffers as a list of BufferInfo; the named one. */
PyObject *ternpy_segment_buffers(EngineObject *eo, tern_segment_id id);
PyObject *ternpy_segment_buffer(EngineObject *eo, tern_segment_id id, PyObject *name);
#endif
#if TERNPY_CLOSE_PROBE
/* tern_segment_probe of `name`: True alive, False no answer, NULL raised. */
PyObject *ternpy_probe(EngineObject *eo, const char *name, PyObject *timeout);
#endif

#endif
