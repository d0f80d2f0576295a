/* python/src/args.h: arguments every type parses the same way (args.c). */
#ifndef TERNPY_ARGS_H
#define TERNPY_ARGS_H

#include "ternpy.h"

/* str -> UTF-8 C string for a name the C API takes NUL-terminated (a
 * segment, buffer or location name): one with a NUL byte inside would be cut
 * there, naming something else, so it is refused (InvalidArgumentError).
 * NULL with an exception set. */
const char *ternpy_name_arg(PyObject *o, const char *what);
/* "timeout" in seconds (None: forever) -> milliseconds, -1 for forever. */
int ternpy_timeout_ms(PyObject *timeout, int *ms);

#endif
