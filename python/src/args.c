/* python/src/args.c: arguments every type parses the same way: names the
 * C API takes as C strings, timeouts in seconds. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "args.h"

#include "errors.h"

#include <stdio.h>
#include <string.h>


const char *ternpy_name_arg(PyObject *o, const char *what)
{
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s && strlen(s) != (size_t)n) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: the name contains a NUL byte (at offset %zu); names "
                 "are C strings, remove it", what, strlen(s));
        ternpy_raise(TERN_ERR_INVAL, msg);
        return NULL;
    }
    return s;
}

int ternpy_timeout_ms(PyObject *timeout, int *ms)
{
    if (!timeout || timeout == Py_None) {
        *ms = -1;
        return 0;
    }
    double s = PyFloat_AsDouble(timeout);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (!(s >= 0) || s > 2000000.0) {
        ternpy_raise(TERN_ERR_INVAL, "timeout: expected None or seconds in 0..2000000");
        return -1;
    }
    *ms = (int)(s * 1000.0 + 0.5);
    return 0;
}
