/* python/src/batch.h: tern.Batch, and Engine.transfer_sync_write/read
 * built from the same request arguments (batch.c). */
#ifndef TERNPY_BATCH_H
#define TERNPY_BATCH_H

#include "engine_base.h"

struct BatchObject {
    PyObject_HEAD
    EngineObject *engine; /* strong */
    tern_batch *b;        /* NULL once closed */
    size_t capacity;
    tern_request *queued; /* requests added by write()/read(), not submitted */
    size_t nqueued, capqueued;
    PyObject *keep;       /* list: registrations and objects requests use */
    PyObject *queued_keep;/* the same for the queued requests */
    int busy;             /* a thread is inside submit/wait/close */
    PyObject *notify;     /* (segment id, name bytes, msg bytes) riding on the
                             queued requests, or NULL */
    BatchObject *prev, *next;
    PyObject *weakreflist;
};

extern PyTypeObject TernPy_BatchType;

/* Close a batch for the engine's own close(): wait, free or park. */
void ternpy_batch_detach(BatchObject *bo);
/* Engine.transfer_sync_write/read. */
PyObject *ternpy_transfer_sync(EngineObject *eo, PyObject *args, PyObject *kw, int opcode);

#endif
