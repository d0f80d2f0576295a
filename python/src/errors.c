/* python/src/errors.c: tern.Error and one subclass per tern_err code,
 * created once at import (ternpy_errors_init, from module.c) and never
 * changed afterwards; every file raises them through ternpy_raise. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "errors.h"

#include "engine_base.h"

#include <stdio.h>


/* ---- exceptions --------------------------------------------------------- */

typedef struct ternpy_errclass {
    int code;
    const char *name;
    const char *doc;
    PyObject *cls;
} ternpy_errclass;

static PyObject *Error; /* tern.Error */

static ternpy_errclass errclasses[] = {
    {TERN_ERR_INVAL, "InvalidArgumentError", "An argument is out of range or malformed.", NULL},
    {TERN_ERR_NOMEM, "NoMemoryError", "An allocation failed.", NULL},
    {TERN_ERR_CONFIG, "ConfigError",
     "The configuration is invalid; the message names file:line:col and the key.", NULL},
    {TERN_ERR_PLUGIN, "PluginError", "A transport or metadata plugin failed to load or start.",
     NULL},
    {TERN_ERR_NOT_FOUND, "NotFoundError", "No such segment, key, buffer or device.", NULL},
    {TERN_ERR_EXISTS, "ExistsError", "Already there (e.g. an overlapping registration).", NULL},
    {TERN_ERR_NOT_SUPPORTED, "NotSupportedError", "An operation this build or plugin lacks.",
     NULL},
    {TERN_ERR_IO, "IoError", "A system call failed (see the message).", NULL},
    {TERN_ERR_TIMEOUT, "TimeoutError", "A deadline passed.", NULL},
    {TERN_ERR_PROTOCOL, "ProtocolError", "A peer sent a malformed frame or descriptor.", NULL},
    {TERN_ERR_REFUSED, "RefusedError", "A peer refused (reply, authentication, bad address).",
     NULL},
    {TERN_ERR_CONNECT, "ConnectError", "Could not connect to a peer.", NULL},
    {TERN_ERR_BUSY, "BusyError", "In use (e.g. closing what another thread is using).", NULL},
    {TERN_ERR_NO_TRANSPORT, "NoTransportError", "No transport shared with the peer.", NULL},
    {TERN_ERR_ABI, "AbiError", "A plugin built for another ABI.", NULL},
    {TERN_ERR_DEVICE, "DeviceError", "A device failed (QP, CQ, endpoint error).", NULL},
    {TERN_ERR_AUTH, "AuthError", "Authentication failed.", NULL},
    {TERN_ERR_CANCELED, "CanceledError", "The operation was canceled.", NULL},
    {TERN_ERR_RANGE, "RangeError", "An address is outside registered memory.", NULL},
    {TERN_ERR_CLOSED, "ClosedError", "The peer, the engine or the object went away.", NULL},
    {TERN_ERR_UNREACHABLE, "UnreachableError", "No transport can reach that peer.", NULL},
};
#define NERRCLASSES (sizeof errclasses / sizeof errclasses[0])

static PyObject *errclass_for(int code)
{
    for (size_t i = 0; i < NERRCLASSES; i++)
        if (errclasses[i].code == code)
            return errclasses[i].cls;
    return Error;
}

PyObject *ternpy_raise(int code, const char *msg)
{
    PyObject *cls = errclass_for(code);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg && *msg ? msg : tern_strerror(code));
    if (!exc)
        return NULL;
    PyObject *c = PyLong_FromLong(code);
    PyObject *n = PyUnicode_FromString(tern_strerror(code));
    if (c && n && PyObject_SetAttrString(exc, "code", c) == 0 &&
        PyObject_SetAttrString(exc, "code_name", n) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(c);
    Py_XDECREF(n);
    Py_DECREF(exc);
    return NULL;
}

PyObject *ternpy_raise_engine(EngineObject *eo, int code)
{
    return ternpy_raise(code, eo->e ? tern_engine_last_error(eo->e) : "");
}

int ternpy_errors_init(PyObject *m)
{
    static const char error_doc[] =
        "Base class of every error tern raises.\n\n"
        "Attributes: code (the negative tern_err value, or None when tern gave\n"
        "none), code_name ('TERN_ERR_INVAL'...); str(e) is tern's message,\n"
        "which names what is wrong, where, and what to check.";
    PyObject *dict = Py_BuildValue("{s:O,s:O}", "code", Py_None, "code_name", Py_None);
    if (!dict)
        return -1;
    Error = PyErr_NewExceptionWithDoc("tern.Error", error_doc, NULL, dict);
    Py_DECREF(dict);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error) < 0)
        return -1;
    for (size_t i = 0; i < NERRCLASSES; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "tern.%s", errclasses[i].name);
        PyObject *d = Py_BuildValue("{s:i,s:s}", "code", errclasses[i].code, "code_name",
                                    tern_strerror(errclasses[i].code));
        if (!d)
            return -1;
        errclasses[i].cls = PyErr_NewExceptionWithDoc(qual, errclasses[i].doc, Error, d);
        Py_DECREF(d);
        if (!errclasses[i].cls ||
            PyModule_AddObjectRef(m, errclasses[i].name, errclasses[i].cls) < 0)
            return -1;
    }
    return 0;
}
