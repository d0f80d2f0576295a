/* python/src/engine_base.c: what every file that takes an Engine uses of
 * it, below them all: whether it is usable (ternpy_engine_check), the list
 * of its live Batch objects and the batches libtern could not free yet
 * ("parked", see ternpy.h), freed once libtern lets them go. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "engine_base.h"

#include "batch.h"
#include "errors.h"

PyTypeObject *ternpy_engine_type; /* set by module.c (engine_base.h) */

/* ---- live batches and parked ones --------------------------------------- */

void ternpy_engine_link_batch(EngineObject *eo, BatchObject *bo)
{
    bo->prev = NULL;
    bo->next = eo->batches;
    if (eo->batches)
        eo->batches->prev = bo;
    eo->batches = bo;
}

void ternpy_engine_unlink_batch(EngineObject *eo, BatchObject *bo)
{
    if (bo->prev)
        bo->prev->next = bo->next;
    else if (eo->batches == bo)
        eo->batches = bo->next;
    if (bo->next)
        bo->next->prev = bo->prev;
    bo->prev = bo->next = NULL;
}

int ternpy_engine_park(EngineObject *eo, tern_batch *b, PyObject *keep)
{
    if (eo->ngraves == eo->capgraves) {
        size_t cap = eo->capgraves ? eo->capgraves * 2 : 4;
        ternpy_grave *n = PyMem_Realloc(eo->graves, cap * sizeof *n);
        if (!n) {
            /* Cannot remember it: keep what it points into alive forever. */
            return -1;
        }
        eo->graves = n;
        eo->capgraves = cap;
    }
    eo->graves[eo->ngraves++] = (ternpy_grave){b, keep};
    return 0;
}

void ternpy_engine_reap(EngineObject *eo)
{
    size_t j = 0;
    for (size_t i = 0; i < eo->ngraves; i++) {
        ternpy_grave g = eo->graves[i];
        if (tern_batch_free(g.b) == 0)
            Py_XDECREF(g.keep);
        else
            eo->graves[j++] = g;
    }
    eo->ngraves = j;
}

int ternpy_engine_check(EngineObject *eo)
{
    if (eo->e && !eo->closing)
        return 0;
    ternpy_raise(TERN_ERR_CLOSED, "the engine is closed");
    return -1;
}
