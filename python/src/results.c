/* python/src/results.c: the values the extension's calls return: the
 * Status enum and the RequestState, Notification and BufferInfo types,
 * created once at import (ternpy_results_init, from module.c), and the
 * values other Python modules build: dicts from libtern's JSON, coroutines
 * from tern._aio. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "results.h"

#include <string.h>


/* ---- Status, RequestState, Notification, BufferInfo ---------------------- */

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

int ternpy_results_init(PyObject *m)
{
    if (status_init(m) < 0 ||
        PyStructSequence_InitType2(&RequestStateType, &request_state_desc) < 0 ||
        PyStructSequence_InitType2(&NotificationType, &notification_desc) < 0 ||
        PyModule_AddObjectRef(m, "RequestState", (PyObject *)&RequestStateType) < 0 ||
        PyModule_AddObjectRef(m, "Notification", (PyObject *)&NotificationType) < 0)
        return -1;
#if TERNPY_V2
    if (PyStructSequence_InitType2(&BufferInfoType, &buffer_info_desc) < 0 ||
        PyModule_AddObjectRef(m, "BufferInfo", (PyObject *)&BufferInfoType) < 0)
        return -1;
#endif
    return 0;
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

/* ---- values built by Python modules ----------------------------------------- */

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

PyObject *ternpy_json_loads(const char *text)
{
    PyObject *json = PyImport_ImportModule("json");
    if (!json)
        return NULL;
    PyObject *r = PyObject_CallMethod(json, "loads", "s", text);
    Py_DECREF(json);
    return r;
}
