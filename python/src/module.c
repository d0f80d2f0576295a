/* python/src/module.c: the tern._tern module, on top of every other file:
 * the functions that need no engine (strerror, describe_config,
 * config_schema) and the module's creation, which adds the exception
 * classes (errors.c), the result types (results.c) and each file's type.
 *
 * The classes are created once at import and never change afterwards: a
 * module object owns them (single-phase initialisation, as CPython's own
 * extension modules of this size do). */
#include "ternpy.h" /* Python.h first, as CPython requires */

#include "batch.h"
#include "engine.h"
#include "engine_base.h"
#include "errors.h"
#include "logbridge.h"
#include "registration.h"
#include "results.h"
#include "segment.h"

#include <stdlib.h>


/* ---- module functions ---------------------------------------------------- */

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    (void)self;
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(tern_strerror(code));
}

static PyObject *describe(const char *path, unsigned flags)
{
    char *json = NULL, err[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tern_config_describe(path, flags, &json, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (!json)
        return ternpy_raise(rc ? rc : TERN_ERR_INVAL, err);
    PyObject *r = ternpy_json_loads(json);
    free(json);
    return r;
}

static PyObject *mod_describe_config(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"path", "verbose", "config_only", NULL};
    PyObject *path = Py_None, *bytes = NULL;
    int verbose = 0, config_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$pp:describe_config", kwlist, &path,
                                     &verbose, &config_only))
        return NULL;
    if (path != Py_None && !PyUnicode_FSConverter(path, &bytes))
        return NULL;
    unsigned flags = (verbose ? TERN_DESCRIBE_VERBOSE : 0) |
                     (config_only ? TERN_DESCRIBE_CONFIG_ONLY : 0);
    PyObject *r = describe(bytes ? PyBytes_AS_STRING(bytes) : NULL, flags);
    Py_XDECREF(bytes);
    return r;
}

static PyObject *mod_config_schema(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *d = describe(NULL, TERN_DESCRIBE_SCHEMA);
    if (!d)
        return NULL;
    PyObject *keys = PyDict_GetItemString(d, "keys");
    Py_XINCREF(keys);
    Py_DECREF(d);
    if (!keys)
        return ternpy_raise(TERN_ERR_PROTOCOL, "config_schema: no \"keys\" in the answer");
    return keys;
}

static PyMethodDef module_methods[] = {
    {"strerror", mod_strerror, METH_O,
     "strerror(code) -> str\n\nThe name of a tern error code ('TERN_ERR_INVAL')."},
    {"describe_config", (PyCFunction)(void (*)(void))mod_describe_config,
     METH_VARARGS | METH_KEYWORDS,
     "describe_config(path=None, *, verbose=False, config_only=False) -> dict\n\n"
     "What an Engine made from `path` would be, without starting anything:\n"
     "the resolved configuration ('config'), every transport with its load\n"
     "outcome, devices and topology ('transports'), 'auth', 'ok' and 'error'.\n"
     "path None: $TERN_CONFIG, else the built-in default.  An invalid\n"
     "configuration raises ConfigError (file:line:col in the message); a\n"
     "transport that fails to load is reported in the result ('ok' False)."},
    {"config_schema", mod_config_schema, METH_NOARGS,
     "config_schema() -> list[dict]\n\n"
     "Every configuration key: key, type, accepts, min, max, choices,\n"
     "default, env, help."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef ternmodule = {
    PyModuleDef_HEAD_INIT, "tern._tern",
    "The C extension behind the `tern` package (import `tern`, not this).", -1,
    module_methods, NULL, NULL, NULL, NULL};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    return PyModule_AddObjectRef(m, name, (PyObject *)t);
}

PyMODINIT_FUNC PyInit__tern(void)
{
    PyObject *m = PyModule_Create(&ternmodule);
    if (!m)
        return NULL;
    ternpy_engine_type = &TernPy_EngineType; /* before any Batch(engine) */
    if (ternpy_errors_init(m) < 0 || ternpy_results_init(m) < 0 ||
#if TERNPY_V2
        PyModule_AddIntConstant(m, "NOTIFY_QUEUE", TERN_NOTIFY_QUEUE) < 0 ||
        PyModule_AddIntConstant(m, "BUFFER_NAME_MAX", TERN_BUFFER_NAME_MAX) < 0 ||
#endif
        PyModule_AddIntConstant(m, "HAS_API_V2", TERNPY_V2) < 0 ||
        add_type(m, &TernPy_RegType, "Registration") < 0 ||
        add_type(m, &TernPy_EngineType, "Engine") < 0 ||
        add_type(m, &TernPy_SegmentType, "Segment") < 0 ||
        add_type(m, &TernPy_BatchType, "Batch") < 0 ||
#if TERNPY_LOG_HOOK
        add_type(m, &TernPy_LogQueueType, "_LogQueue") < 0 ||
#endif
        PyModule_AddIntConstant(m, "HAS_LOG_HOOK", TERNPY_LOG_HOOK) < 0 ||
        PyModule_AddStringConstant(m, "__version__", TERN_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(m, "NOTIFY_MAX", TERN_NOTIFY_MAX) < 0 ||
        PyModule_AddIntConstant(m, "LOCAL_SEGMENT", TERN_LOCAL_SEGMENT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
