/* python/src/module.c: the tern._tern module: exception classes (one per
 * tern_err code), the Status enum, the RequestState and Notification result
 * types, and the functions that need no engine (strerror, describe_config,
 * config_schema).
 *
 * The classes are created once at import and never change afterwards: a
 * module object owns them (single-phase initialisation, as CPython's own
 * extension modules of this size do). */
#include "ternpy.h" /* Python.h first, as CPython requires */

#include <stdlib.h>
#include <string.h>


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

PyObject *ternpy_raise_engine(EngineObject *eo, int code)
{
    return ternpy_raise(code, eo->e ? tern_engine_last_error(eo->e) : "");
}

static int errors_init(PyObject *m)
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

/* ---- Status, RequestState, Notification --------------------------------- */

static PyObject *StatusEnum;

static int status_init(PyObject *m)
{
    static const char *names[] = {"WAITING", "PENDING", "INVALID", "CANCELED",
                                  "COMPLETED", "TIMEOUT", "FAILED"};
    PyObject *enum_mod = PyImport_ImportModule("enum");
    if (!enum_mod)
        return -1;
    PyObject *members = PyList_New(0);
    for (int i = 0; members && i < (int)(sizeof names / sizeof names[0]); i++) {
        PyObject *pair = Py_BuildValue("(si)", names[i], i);
        if (!pair || PyList_Append(members, pair) < 0) {
            Py_XDECREF(pair);
            Py_CLEAR(members);
            break;
        }
        Py_DECREF(pair);
    }
    if (members) {
        PyObject *kw = Py_BuildValue("{s:s}", "module", "tern");
        PyObject *args = Py_BuildValue("(sO)", "Status", members);
        PyObject *intenum = PyObject_GetAttrString(enum_mod, "IntEnum");
        if (kw && args && intenum)
            StatusEnum = PyObject_Call(intenum, args, kw);
        Py_XDECREF(kw);
        Py_XDECREF(args);
        Py_XDECREF(intenum);
    }
    Py_XDECREF(members);
    Py_DECREF(enum_mod);
    if (!StatusEnum)
        return -1;
    PyObject *doc = PyUnicode_FromString("Status of one request of a batch.");
    if (!doc || PyObject_SetAttrString(StatusEnum, "__doc__", doc) < 0) {
        Py_XDECREF(doc);
        return -1;
    }
    Py_DECREF(doc);
    return PyModule_AddObjectRef(m, "Status", StatusEnum);
}

PyObject *ternpy_status(int status)
{
    return PyObject_CallFunction(StatusEnum, "i", status);
}

static PyTypeObject RequestStateType, NotificationType;

static PyStructSequence_Field request_state_fields[] = {
    {"status", "tern.Status of the request"},
    {"transferred", "bytes completed so far"},
    {"error", "tern error code of the failure, 0 otherwise"},
    {"message", "message of the failure, '' otherwise"},
    {NULL, NULL}};
static PyStructSequence_Desc request_state_desc = {
    "tern.RequestState", "State of one request of a batch (Batch.state()).",
    request_state_fields, 4};

static PyStructSequence_Field notification_fields[] = {
    {"sender", "server name of the engine that sent it"},
    {"name", "the name the sender gave it"},
    {"msg", "the message text"},
    {NULL, NULL}};
static PyStructSequence_Desc notification_desc = {
    "tern.Notification", "A notification received from a peer (Engine.notify_recv()).",
    notification_fields, 3};

#if TERNPY_V2
static PyTypeObject BufferInfoType;

static PyStructSequence_Field buffer_info_fields[] = {
    {"name", "the application's name for it, or None"},
    {"address", "its address in the owner's memory: the remote of a request"},
    {"length", "bytes"},
    {"location", "where it lives ('cpu:0')"},
    {NULL, NULL}};
static PyStructSequence_Desc buffer_info_desc = {
    "tern.BufferInfo", "A registered buffer of a segment (Engine.buffers()).",
    buffer_info_fields, 4};

PyObject *ternpy_buffer_info(const tern_buffer_info *b)
{
    PyObject *r = PyStructSequence_New(&BufferInfoType);
    if (!r)
        return NULL;
    PyObject *v[4] = {
        b->name[0] ? PyUnicode_DecodeUTF8(b->name, (Py_ssize_t)strnlen(b->name, sizeof b->name),
                                          "replace")
                   : Py_NewRef(Py_None),
        PyLong_FromUnsignedLongLong(b->addr), PyLong_FromUnsignedLongLong(b->length),
        PyUnicode_DecodeUTF8(b->location, (Py_ssize_t)strnlen(b->location, sizeof b->location),
                             "replace")};
    for (int i = 0; i < 4; i++) {
        if (!v[i]) {
            for (int j = 0; j < 4; j++)
                Py_XDECREF(v[j]);
            Py_DECREF(r);
            return NULL;
        }
    }
    for (int i = 0; i < 4; i++)
        PyStructSequence_SetItem(r, i, v[i]);
    return r;
}
#endif

PyObject *ternpy_aio(const char *fn, PyObject *args)
{
    PyObject *mod = PyImport_ImportModule("tern._aio");
    if (!mod)
        return NULL;
    PyObject *f = PyObject_GetAttrString(mod, fn);
    Py_DECREF(mod);
    if (!f)
        return NULL;
    PyObject *r = PyObject_CallObject(f, args);
    Py_DECREF(f);
    return r;
}

PyObject *ternpy_request_state(const tern_request_state *st, const char *msg)
{
    PyObject *r = PyStructSequence_New(&RequestStateType);
    if (!r)
        return NULL;
    PyObject *s = ternpy_status(st->status);
    PyObject *t = PyLong_FromUnsignedLongLong(st->transferred);
    PyObject *e = PyLong_FromLong(st->error);
    PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!s || !t || !e || !m) {
        Py_XDECREF(s);
        Py_XDECREF(t);
        Py_XDECREF(e);
        Py_XDECREF(m);
        Py_DECREF(r);
        return NULL;
    }
    PyStructSequence_SetItem(r, 0, s);
    PyStructSequence_SetItem(r, 1, t);
    PyStructSequence_SetItem(r, 2, e);
    PyStructSequence_SetItem(r, 3, m);
    return r;
}

PyObject *ternpy_notification(const char *from, const char *name, const char *msg)
{
    PyObject *r = PyStructSequence_New(&NotificationType);
    if (!r)
        return NULL;
    const char *v[3] = {from, name, msg};
    for (int i = 0; i < 3; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(v[i], (Py_ssize_t)strlen(v[i]), "surrogateescape");
        if (!s) {
            Py_DECREF(r);
            return NULL;
        }
        PyStructSequence_SetItem(r, i, s);
    }
    return r;
}

PyObject *ternpy_json_loads(const char *text)
{
    PyObject *json = PyImport_ImportModule("json");
    if (!json)
        return NULL;
    PyObject *r = PyObject_CallMethod(json, "loads", "s", text);
    Py_DECREF(json);
    return r;
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
    if (errors_init(m) < 0 || status_init(m) < 0 ||
        PyStructSequence_InitType2(&RequestStateType, &request_state_desc) < 0 ||
        PyStructSequence_InitType2(&NotificationType, &notification_desc) < 0 ||
        PyModule_AddObjectRef(m, "RequestState", (PyObject *)&RequestStateType) < 0 ||
        PyModule_AddObjectRef(m, "Notification", (PyObject *)&NotificationType) < 0 ||
#if TERNPY_V2
        PyStructSequence_InitType2(&BufferInfoType, &buffer_info_desc) < 0 ||
        PyModule_AddObjectRef(m, "BufferInfo", (PyObject *)&BufferInfoType) < 0 ||
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
