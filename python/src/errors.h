/* python/src/errors.h: tern.Error and its subclasses, one per tern_err
 * code (errors.c). */
#ifndef TERNPY_ERRORS_H
#define TERNPY_ERRORS_H

#include "ternpy.h"

typedef struct EngineObject EngineObject;

/* Create the classes and add them to module m (at import). */
int ternpy_errors_init(PyObject *m);
/* Raise the tern.Error subclass for `code` with `msg`. Returns NULL. */
PyObject *ternpy_raise(int code, const char *msg);
/* The same with the engine's last error message for this thread. */
PyObject *ternpy_raise_engine(EngineObject *eo, int code);

#endif
