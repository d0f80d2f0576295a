/* python/src/engine_base.h: the Engine's state that the other files use
 * (engine_base.c): whether it is usable, the calls running inside it, its
 * live Batch objects and the batches libtern could not free yet.  The type
 * itself, with its method table naming every file's methods, is engine.c's
 * (engine.h). */
#ifndef TERNPY_ENGINE_BASE_H
#define TERNPY_ENGINE_BASE_H

#include "ternpy.h"

typedef struct RegObject RegObject;
typedef struct BatchObject BatchObject;

/* A batch libtern would not free yet, and what its requests point into. */
typedef struct ternpy_grave {
    tern_batch *b;
    PyObject *keep; /* list */
} ternpy_grave;

typedef struct EngineObject {
    PyObject_HEAD
    tern_engine *e;
    RegObject **regs;        /* sorted by addr, strong references */
    size_t nregs, capregs;
    BatchObject *batches;    /* live Batch objects (borrowed), a list */
    ternpy_grave *graves;
    size_t ngraves, capgraves;
    long busy;               /* calls running with the GIL released */
    int closing;             /* close() is under way: no new calls */
    PyObject *server_name;   /* str, cached after creation */
    PyObject *weakreflist;
    PyObject *logq;          /* _LogQueue the engine logs into, or NULL */
    PyObject *logthread;     /* the threading.Thread that empties it */
} EngineObject;

#define TERNPY_ENTER(eo) do { (eo)->busy++; Py_BEGIN_ALLOW_THREADS
#define TERNPY_LEAVE(eo) Py_END_ALLOW_THREADS (eo)->busy--; } while (0)

/* tern.Engine, for an argument that must be one (Batch(engine)): set by
 * module.c when it creates the types.  engine.c's type object names the
 * methods of the files below it, so they check against this pointer
 * rather than name the type. */
extern PyTypeObject *ternpy_engine_type;

/* Raise ClosedError when the engine is closed; 0 when usable. */
int ternpy_engine_check(EngineObject *eo);
/* Park a batch libtern refused to free (TERN_ERR_BUSY); steals keep. */
int ternpy_engine_park(EngineObject *eo, tern_batch *b, PyObject *keep);
/* Free parked batches libtern now lets go. */
void ternpy_engine_reap(EngineObject *eo);
void ternpy_engine_link_batch(EngineObject *eo, BatchObject *bo);
void ternpy_engine_unlink_batch(EngineObject *eo, BatchObject *bo);

#endif
