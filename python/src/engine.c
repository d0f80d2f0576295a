/* python/src/engine.c: tern.Engine and tern.Registration.
 *
 * An Engine owns one tern_engine, the registrations made through it (each a
 * Registration holding the registered Python object and its buffer export),
 * the list of its live Batch objects and the batches libtern could not free
 * yet ("parked", see ternpy.h).  close() frees all of them in that order:
 * batches first (their requests end before the memory goes), then the
 * engine, then the registrations. */
#include "ternpy.h" /* Python.h first, as CPython requires */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


/* ---- Registration -------------------------------------------------------- */

static void reg_dealloc(RegObject *r)
{
    if (r->has_view)
        PyBuffer_Release(&r->view);
    Py_XDECREF(r->owner);
    Py_XDECREF(r->name);
    Py_XDECREF(r->location);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *reg_repr(RegObject *r)
{
    return PyUnicode_FromFormat("<tern.Registration 0x%zx length=%zu name=%R location=%R>",
                                (size_t)r->addr, r->len, r->name, r->location);
}

static PyObject *reg_get_address(RegObject *r, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(r->addr);
}

static PyObject *reg_get_length(RegObject *r, void *c)
{
    (void)c;
    return PyLong_FromSize_t(r->len);
}

static PyObject *reg_get_obj(RegObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->owner);
}

static PyObject *reg_get_name(RegObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->name);
}

static PyObject *reg_get_location(RegObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->location);
}

static PyGetSetDef reg_getset[] = {
    {"address", (getter)reg_get_address, NULL, "first byte of the registered memory", NULL},
    {"length", (getter)reg_get_length, NULL, "bytes registered", NULL},
    {"obj", (getter)reg_get_obj, NULL,
     "the object kept alive by this registration (the buffer, or keep=), or None", NULL},
    {"name", (getter)reg_get_name, NULL, "the application's name for it, or None", NULL},
    {"location", (getter)reg_get_location, NULL,
     "the location given at registration ('cpu:0'), or None when detected", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject TernPy_RegType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern.Registration",
    .tp_basicsize = sizeof(RegObject),
    .tp_dealloc = (destructor)reg_dealloc,
    .tp_repr = (reprfunc)reg_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory registered with an Engine (Engine.registrations()).\n\n"
              "It keeps the registered object alive until Engine.unregister() and\n"
              "until no batch that used it can still touch it.",
    .tp_getset = reg_getset,
};

/* ---- the registration table: sorted by address ---------------------------- */

static size_t regs_upper_bound(EngineObject *eo, uintptr_t addr)
{
    size_t lo = 0, hi = eo->nregs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (eo->regs[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

RegObject *ternpy_engine_find_reg(EngineObject *eo, uintptr_t addr, uint64_t len)
{
    size_t i = regs_upper_bound(eo, addr);
    if (i == 0)
        return NULL;
    RegObject *r = eo->regs[i - 1];
    if (addr - r->addr > r->len || len > r->len - (addr - r->addr))
        return NULL;
    return r;
}

static int regs_insert(EngineObject *eo, RegObject *r)
{
    if (eo->nregs == eo->capregs) {
        size_t cap = eo->capregs ? eo->capregs * 2 : 8;
        RegObject **n = PyMem_Realloc(eo->regs, cap * sizeof *n);
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        eo->regs = n;
        eo->capregs = cap;
    }
    size_t i = regs_upper_bound(eo, r->addr);
    memmove(&eo->regs[i + 1], &eo->regs[i], (eo->nregs - i) * sizeof *eo->regs);
    eo->regs[i] = r; /* the table's reference */
    eo->nregs++;
    return 0;
}

static RegObject *regs_take(EngineObject *eo, size_t i)
{
    RegObject *r = eo->regs[i];
    memmove(&eo->regs[i], &eo->regs[i + 1], (eo->nregs - i - 1) * sizeof *eo->regs);
    eo->nregs--;
    return r;
}

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

/* ---- creation ------------------------------------------------------------ */

/* libtern's create calls say why they failed but not with which code: ask
 * tern_config_describe, which runs the same checks (configuration, then
 * transports and secret) and returns the code.  yaml text is described
 * through a memfd so nothing is written to disk.  0: no code known. */
static int create_failure_code(const char *path, const char *yaml)
{
    char fdpath[64], err[256];
    int fd = -1;
    if (yaml) {
        fd = memfd_create("tern-config", MFD_CLOEXEC);
        size_t n = strlen(yaml);
        if (fd < 0 || write(fd, yaml, n) != (ssize_t)n) {
            if (fd >= 0)
                close(fd);
            return 0;
        }
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
        path = fdpath;
    }
    char *json = NULL;
    int rc = tern_config_describe(path, TERN_DESCRIBE_CONFIG_ONLY, &json, err, sizeof err);
    free(json);
    json = NULL;
    if (rc == 0)
        rc = tern_config_describe(path, 0, &json, err, sizeof err);
    free(json);
    if (fd >= 0)
        close(fd);
    return rc < 0 ? rc : 0;
}

/* config -> a path (bytes) or YAML text (bytes); exactly one is set. */
static int config_arg(PyObject *config, PyObject *server_name, PyObject **path, PyObject **yaml)
{
    *path = *yaml = NULL;
    if (config == Py_None)
        return 0;
    if (PyDict_Check(config)) {
        PyObject *d = PyDict_Copy(config);
        if (!d)
            return -1;
        if (server_name != Py_None && PyDict_SetItemString(d, "server_name", server_name) < 0) {
            Py_DECREF(d);
            return -1;
        }
        /* JSON is YAML: the dict goes through libtern's own parser. */
        PyObject *json = PyImport_ImportModule("json");
        PyObject *text = json ? PyObject_CallMethod(json, "dumps", "O", d) : NULL;
        Py_XDECREF(json);
        Py_DECREF(d);
        if (!text)
            return -1;
        *yaml = PyUnicode_AsUTF8String(text);
        Py_DECREF(text);
        return *yaml ? 0 : -1;
    }
    if (PyUnicode_Check(config)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(config, &n);
        if (!s)
            return -1;
        while (*s == ' ' || *s == '\t')
            s++;
        if (memchr(s, '\n', (size_t)n) || *s == '{') {
            if (server_name != Py_None) {
                ternpy_raise(TERN_ERR_INVAL,
                             "Engine: server_name= needs config as a path or a dict; put "
                             "server_name in the YAML text instead");
                return -1;
            }
            *yaml = PyUnicode_AsUTF8String(config);
            return *yaml ? 0 : -1;
        }
    }
    if (PyUnicode_Check(config) || PyBytes_Check(config) ||
        PyObject_HasAttrString(config, "__fspath__"))
        return PyUnicode_FSConverter(config, path) ? 0 : -1;
    PyErr_Format(PyExc_TypeError,
                 "Engine: config must be None, a path, YAML text or a dict, not %.100s",
                 Py_TYPE(config)->tp_name);
    return -1;
}

static int engine_init(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"config", "server_name", NULL};
    PyObject *config = Py_None, *server_name = Py_None, *path = NULL, *yaml = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$O:Engine", kwlist, &config, &server_name))
        return -1;
    if (self->e) {
        ternpy_raise(TERN_ERR_EXISTS, "Engine: already created");
        return -1;
    }
    if (server_name != Py_None && !PyUnicode_Check(server_name)) {
        PyErr_SetString(PyExc_TypeError, "Engine: server_name must be a str 'host:port'");
        return -1;
    }
    if (config_arg(config, server_name, &path, &yaml) < 0)
        return -1;
    const char *p = path ? PyBytes_AS_STRING(path) : NULL;
    const char *y = yaml ? PyBytes_AS_STRING(yaml) : NULL;
    const char *sn = server_name != Py_None && !yaml ? PyUnicode_AsUTF8(server_name) : NULL;
    char err[1024] = "";
    tern_engine *e;
    int code = 0;
    Py_BEGIN_ALLOW_THREADS
    e = y ? tern_engine_create_from_yaml(y, "<yaml>", err, sizeof err)
          : tern_engine_create_as(p, sn, err, sizeof err);
    if (!e)
        code = create_failure_code(p, y);
    Py_END_ALLOW_THREADS
    Py_XDECREF(path);
    Py_XDECREF(yaml);
    if (!e) {
        ternpy_raise(code, err[0] ? err : "engine creation failed");
        return -1;
    }
    self->e = e;
    self->server_name = PyUnicode_FromString(tern_engine_server_name(e));
    return self->server_name ? 0 : -1;
}

/* ---- close ------------------------------------------------------------------ */

static int engine_close_impl(EngineObject *self)
{
    if (!self->e)
        return 0;
    if (self->closing) {
        ternpy_raise(TERN_ERR_BUSY, "Engine.close: another thread is closing this engine");
        return -1;
    }
    if (self->busy) {
        ternpy_raise(TERN_ERR_BUSY,
                     "Engine.close: another thread is inside a call on this engine");
        return -1;
    }
    self->closing = 1; /* other threads may run while the GIL is released below */
    for (BatchObject *bo = self->batches; bo; bo = self->batches) {
        ternpy_batch_detach(bo);
        ternpy_engine_unlink_batch(self, bo);
    }
    /* Parked batches end once their slices do; give them the time a peer
     * needs to answer, then destroy the engine regardless and keep what
     * they point into alive (never freed: memory a transport might still
     * touch must not be reused). */
    for (int i = 0; i < 1000 && self->ngraves; i++) {
        ternpy_engine_reap(self);
        if (self->ngraves) {
            Py_BEGIN_ALLOW_THREADS
            usleep(10000);
            Py_END_ALLOW_THREADS
        }
    }
    self->ngraves = 0; /* leaked on purpose, see above */
    tern_engine *e = self->e;
    self->e = NULL;
    Py_BEGIN_ALLOW_THREADS
    tern_engine_destroy(e);
    Py_END_ALLOW_THREADS
    while (self->nregs)
        Py_DECREF(regs_take(self, self->nregs - 1));
    self->closing = 0;
    return 0;
}

static PyObject *engine_close(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (engine_close_impl(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_enter(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *engine_exit(EngineObject *self, PyObject *args)
{
    (void)args;
    if (engine_close_impl(self) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static void engine_dealloc(EngineObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    self->busy = 0; /* nobody else can hold a reference any more */
    if (engine_close_impl(self) < 0)
        PyErr_WriteUnraisable((PyObject *)self);
    PyErr_Restore(et, ev, tb);
    PyMem_Free(self->regs);
    PyMem_Free(self->graves);
    Py_XDECREF(self->server_name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- memory --------------------------------------------------------------- */

static int reg_fill_from_buffer(RegObject *r, PyObject *obj, PyObject *length)
{
    if (PyObject_GetBuffer(obj, &r->view, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) < 0) {
        /* BufferError says what is wrong with the object; say what works. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *why = ev ? PyObject_Str(ev) : NULL;
        char msg[512];
        snprintf(msg, sizeof msg,
                 "register: %s; the object must expose writable, contiguous memory "
                 "(bytearray, writable memoryview, contiguous numpy array)",
                 why && PyUnicode_AsUTF8(why) ? PyUnicode_AsUTF8(why) : "no buffer");
        PyErr_Clear();
        Py_XDECREF(why);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        ternpy_raise(TERN_ERR_INVAL, msg);
        return -1;
    }
    r->has_view = 1;
    r->addr = (uintptr_t)r->view.buf;
    r->len = (size_t)r->view.len;
    if (length != Py_None) {
        size_t n = PyLong_AsSize_t(length);
        if (n == (size_t)-1 && PyErr_Occurred())
            return -1;
        if (n > r->len) {
            PyErr_Clear();
            ternpy_raise(TERN_ERR_INVAL, "register: length is larger than the object's buffer");
            return -1;
        }
        r->len = n;
    }
    r->owner = Py_NewRef(obj);
    return 0;
}

static int reg_fill_from_address(RegObject *r, PyObject *obj, PyObject *length,
                                 PyObject *owner)
{
    unsigned long long a = PyLong_AsUnsignedLongLong(obj);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (length == Py_None) {
        ternpy_raise(TERN_ERR_INVAL, "register: an integer address needs length=");
        return -1;
    }
    size_t n = PyLong_AsSize_t(length);
    if (n == (size_t)-1 && PyErr_Occurred())
        return -1;
    r->addr = (uintptr_t)a;
    r->len = n;
    r->owner = Py_NewRef(owner);
    return 0;
}

static PyObject *engine_register(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"obj", "length", "name", "location", "keep", NULL};
    PyObject *obj, *length = Py_None, *name = Py_None, *location = Py_None, *owner = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOO$O:register", kwlist, &obj, &length,
                                     &name, &location, &owner))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    if ((name != Py_None && !PyUnicode_Check(name)) ||
        (location != Py_None && !PyUnicode_Check(location))) {
        PyErr_SetString(PyExc_TypeError, "register: name and location must be str or None");
        return NULL;
    }
#if !TERNPY_V2
    if (name != Py_None)
        return ternpy_raise(TERN_ERR_NOT_SUPPORTED,
                            "register: named buffers need a libtern with "
                            "tern_register_memory_named (application API v2)");
#endif
    RegObject *r = PyObject_New(RegObject, &TernPy_RegType);
    if (!r)
        return NULL;
    r->owner = NULL;
    r->has_view = 0;
    r->name = Py_NewRef(name);
    r->location = Py_NewRef(location);
    int rc = PyObject_CheckBuffer(obj) ? reg_fill_from_buffer(r, obj, length)
             : PyIndex_Check(obj)      ? reg_fill_from_address(r, obj, length, owner)
                                       : (PyErr_Format(PyExc_TypeError,
                                                       "register: expected an object with the "
                                                       "buffer protocol or an int address, "
                                                       "not %.100s",
                                                       Py_TYPE(obj)->tp_name),
                                          -1);
    if (rc == 0 && owner != Py_None && r->owner != owner) {
        Py_SETREF(r->owner, Py_NewRef(owner)); /* the buffer stays held by r->view */
    }
    const char *loc = rc == 0 && location != Py_None ? PyUnicode_AsUTF8(location) : NULL;
    const char *nm = rc == 0 && name != Py_None ? PyUnicode_AsUTF8(name) : NULL;
    if (rc < 0 || (location != Py_None && !loc) || (name != Py_None && !nm)) {
        Py_DECREF(r);
        return NULL;
    }
    TERNPY_ENTER(self);
#if TERNPY_V2
    rc = tern_register_memory_named(self->e, (void *)r->addr, r->len, loc, nm);
#else
    rc = tern_register_memory(self->e, (void *)r->addr, r->len, loc);
#endif
    TERNPY_LEAVE(self);
    if (rc < 0) {
        ternpy_raise_engine(self, rc);
        Py_DECREF(r);
        return NULL;
    }
    if (regs_insert(self, r) < 0) {
        tern_unregister_memory(self->e, (void *)r->addr);
        Py_DECREF(r);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(r->addr);
}

/* The index of the registration for obj: the same object, else its address. */
static Py_ssize_t reg_index_of(EngineObject *self, PyObject *obj, uintptr_t *addr)
{
    for (size_t i = 0; i < self->nregs; i++)
        if (self->regs[i]->owner == obj && obj != Py_None) {
            *addr = self->regs[i]->addr;
            return (Py_ssize_t)i;
        }
    if (PyObject_CheckBuffer(obj)) {
        Py_buffer v;
        if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0)
            return -2;
        *addr = (uintptr_t)v.buf;
        PyBuffer_Release(&v);
    } else {
        unsigned long long a = PyLong_AsUnsignedLongLong(obj);
        if (a == (unsigned long long)-1 && PyErr_Occurred())
            return -2;
        *addr = (uintptr_t)a;
    }
    size_t i = regs_upper_bound(self, *addr);
    return i > 0 && self->regs[i - 1]->addr == *addr ? (Py_ssize_t)(i - 1) : -1;
}

static PyObject *engine_unregister(EngineObject *self, PyObject *obj)
{
    if (ternpy_engine_check(self) < 0)
        return NULL;
    uintptr_t addr = 0;
    Py_ssize_t i = reg_index_of(self, obj, &addr);
    if (i == -2)
        return NULL;
    int rc;
    TERNPY_ENTER(self);
    rc = tern_unregister_memory(self->e, (void *)addr);
    TERNPY_LEAVE(self);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    /* The table may have changed while the GIL was released. */
    size_t j = regs_upper_bound(self, addr);
    if (j > 0 && self->regs[j - 1]->addr == addr)
        Py_DECREF(regs_take(self, j - 1));
    Py_RETURN_NONE;
}

static PyObject *engine_registrations(EngineObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *l = PyList_New((Py_ssize_t)self->nregs);
    for (size_t i = 0; l && i < self->nregs; i++)
        PyList_SET_ITEM(l, (Py_ssize_t)i, Py_NewRef(self->regs[i]));
    return l;
}

/* ---- segments and notifications ------------------------------------------- */

static PyObject *engine_open_segment(EngineObject *self, PyObject *name)
{
    if (ternpy_engine_check(self) < 0)
        return NULL;
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    tern_segment_id id;
    TERNPY_ENTER(self);
    id = tern_segment_open(self->e, s);
    TERNPY_LEAVE(self);
    if (id < 0)
        return ternpy_raise_engine(self, id);
    return ternpy_segment_new(self, id, name);
}

static PyObject *engine_descriptor(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    char *json = NULL;
    int rc = tern_segment_descriptor(self->e, TERN_LOCAL_SEGMENT, &json);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    PyObject *r = ternpy_json_loads(json);
    free(json);
    return r;
}

static PyObject *engine_notify_send(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "name", "msg", NULL};
    PyObject *seg, *msg;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsO:notify_send", kwlist, &seg, &name, &msg))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_segment_id id;
    if (ternpy_segment_arg(self, seg, &id) < 0)
        return NULL;
    PyObject *bytes = PyUnicode_Check(msg) ? PyUnicode_AsUTF8String(msg) : Py_XNewRef(msg);
    if (!bytes || !PyBytes_Check(bytes)) {
        if (bytes)
            PyErr_SetString(PyExc_TypeError, "notify_send: msg must be str or bytes");
        Py_XDECREF(bytes);
        return NULL;
    }
    if (strlen(PyBytes_AS_STRING(bytes)) != (size_t)PyBytes_GET_SIZE(bytes)) {
        Py_DECREF(bytes);
        return ternpy_raise(TERN_ERR_INVAL, "notify_send: msg contains a NUL byte");
    }
    int rc;
    TERNPY_ENTER(self);
    rc = tern_notify_send(self->e, id, name, PyBytes_AS_STRING(bytes));
    TERNPY_LEAVE(self);
    Py_DECREF(bytes);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    Py_RETURN_NONE;
}

static PyObject *engine_notify_recv(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = NULL;
    int ms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:notify_recv", kwlist, &timeout))
        return NULL;
    if (timeout && ternpy_timeout_ms(timeout, &ms) < 0)
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    char from[256], name[256];
    char *msg = PyMem_Malloc(TERN_NOTIFY_MAX + 1);
    if (!msg)
        return PyErr_NoMemory();
    int rc;
    if (ms == 0) {
        rc = tern_notify_recv(self->e, from, sizeof from, name, sizeof name, msg,
                              TERN_NOTIFY_MAX + 1);
    } else {
#if TERNPY_V2
        TERNPY_ENTER(self);
        rc = tern_notify_recv_wait(self->e, from, sizeof from, name, sizeof name, msg,
                                   TERN_NOTIFY_MAX + 1, ms);
        TERNPY_LEAVE(self);
#else
        PyMem_Free(msg);
        return ternpy_raise(TERN_ERR_NOT_SUPPORTED,
                            "notify_recv: waiting needs tern_notify_recv_wait "
                            "(application API v2)");
#endif
    }
    PyObject *r = rc < 0    ? ternpy_raise_engine(self, rc)
                  : rc == 0 ? Py_NewRef(Py_None)
                            : ternpy_notification(from, name, msg);
    PyMem_Free(msg);
    return r;
}

#if TERNPY_V2
static PyObject *engine_notify_fileno(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    int fd = tern_notify_fd(self->e);
    if (fd < 0)
        return ternpy_raise_engine(self, fd);
    return PyLong_FromLong(fd);
}

static PyObject *engine_notify_stats(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_notify_stats st;
    int rc = tern_notify_stats_get(self->e, &st);
    if (rc < 0)
        return ternpy_raise_engine(self, rc);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "received",
                         (unsigned long long)st.received, "delivered",
                         (unsigned long long)st.delivered, "refused",
                         (unsigned long long)st.refused, "queued",
                         (unsigned long long)st.queued, "sent", (unsigned long long)st.sent,
                         "send_failed", (unsigned long long)st.send_failed);
}

static PyObject *engine_notify_recv_async(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:notify_recv_async", kwlist, &timeout))
        return NULL;
    PyObject *a = PyTuple_Pack(2, (PyObject *)self, timeout);
    if (!a)
        return NULL;
    PyObject *r = ternpy_aio("notify_recv", a);
    Py_DECREF(a);
    return r;
}

static PyObject *engine_buffers(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", NULL};
    PyObject *seg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:buffers", kwlist, &seg))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_segment_id id = TERN_LOCAL_SEGMENT;
    if (seg != Py_None && ternpy_segment_arg(self, seg, &id) < 0)
        return NULL;
    return ternpy_segment_buffers(self, id);
}

static PyObject *engine_buffer(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "name", NULL};
    PyObject *seg, *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OU:buffer", kwlist, &seg, &name))
        return NULL;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    tern_segment_id id = TERN_LOCAL_SEGMENT;
    if (seg != Py_None && ternpy_segment_arg(self, seg, &id) < 0)
        return NULL;
    return ternpy_segment_buffer(self, id, name);
}
#endif

/* ---- batches and one-call transfers --------------------------------------- */

static PyObject *engine_batch(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t capacity = 64;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:batch", kwlist, &capacity))
        return NULL;
    return PyObject_CallFunction((PyObject *)&TernPy_BatchType, "On", self, capacity);
}

static PyObject *engine_sync_write(EngineObject *self, PyObject *args, PyObject *kw)
{
    return ternpy_transfer_sync(self, args, kw, TERN_WRITE);
}

static PyObject *engine_sync_read(EngineObject *self, PyObject *args, PyObject *kw)
{
    return ternpy_transfer_sync(self, args, kw, TERN_READ);
}

/* ---- attributes ---------------------------------------------------------------- */

static PyObject *engine_get_server_name(EngineObject *self, void *c)
{
    (void)c;
    if (ternpy_engine_check(self) < 0)
        return NULL;
    return Py_NewRef(self->server_name);
}

static PyObject *engine_get_closed(EngineObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->e == NULL || self->closing);
}

static PyObject *engine_get_last_error(EngineObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(self->e ? tern_engine_last_error(self->e) : "");
}

static PyObject *engine_repr(EngineObject *self)
{
    if (!self->e)
        return PyUnicode_FromString("<tern.Engine closed>");
    return PyUnicode_FromFormat("<tern.Engine %U, %zu registration(s)>", self->server_name,
                                self->nregs);
}

#define KW (METH_VARARGS | METH_KEYWORDS)
#define CF(f) (PyCFunction)(void (*)(void))(f)

static PyMethodDef engine_methods[] = {
    {"close", (PyCFunction)engine_close, METH_NOARGS,
     "close()\n\nWait for this engine's batches to end, free them, stop the engine\n"
     "(daemon, transports, published segment) and release every registered\n"
     "object.  Idempotent.  BusyError if another thread is inside a call."},
    {"__enter__", (PyCFunction)engine_enter, METH_NOARGS, "Return the engine."},
    {"__exit__", (PyCFunction)engine_exit, METH_VARARGS, "close() the engine."},
    {"register", CF(engine_register), KW,
     "register(obj, length=None, name=None, location=None, *, keep=None) -> int\n\n"
     "Register memory with every loaded transport and publish it; returns its\n"
     "address.  obj is an object with the buffer protocol (bytearray, writable\n"
     "memoryview, contiguous numpy array), kept alive until unregister(), or\n"
     "an int address (torch's tensor.data_ptr()) with length=; keep= is then\n"
     "kept alive instead.  length registers a prefix of a buffer.  name: the\n"
     "application's name for it ('kv/layer0'), by which peers find it\n"
     "(Engine.buffer(segment, name)).  location: 'cpu:0'..., None to detect\n"
     "it.  ExistsError when it overlaps a registration or reuses a name."},
    {"unregister", (PyCFunction)engine_unregister, METH_O,
     "unregister(obj_or_address)\n\nUnregister memory registered with register() (the same object or\n"
     "its address).  The object is released once no batch can touch it."},
    {"registrations", (PyCFunction)engine_registrations, METH_NOARGS,
     "registrations() -> list[Registration]\n\nWhat is registered, by address."},
    {"open_segment", (PyCFunction)engine_open_segment, METH_O,
     "open_segment(name) -> Segment\n\nOpen a peer's segment by its server name ('host:port'), fetching its\n"
     "descriptor.  Opening an open segment returns the same id."},
    {"descriptor", (PyCFunction)engine_descriptor, METH_NOARGS,
     "descriptor() -> dict\n\nThis engine's own segment descriptor (name, buffers, devices...)."},
    {"batch", CF(engine_batch), KW,
     "batch(capacity=64) -> Batch\n\nA new batch of at most `capacity` requests (Batch(engine, capacity))."},
    {"transfer_sync_write", CF(engine_sync_write), KW,
     "transfer_sync_write(local, segment, remote, length=None, timeout=None)\n\n"
     "Write `length` bytes from local memory to address `remote` of a peer's\n"
     "segment and return when they are there.  local: an int address or an\n"
     "object with the buffer protocol inside registered memory (length\n"
     "defaults to its size); segment: a Segment, its id or its name.\n"
     "timeout in seconds (None: none).  Raises the tern.Error of a failure.\n"
     "The GIL is released while it runs."},
    {"transfer_sync_read", CF(engine_sync_read), KW,
     "transfer_sync_read(local, segment, remote, length=None, timeout=None)\n\n"
     "Read `length` bytes at address `remote` of a peer's segment into local\n"
     "memory; arguments as transfer_sync_write()."},
    {"notify_send", CF(engine_notify_send), KW,
     "notify_send(segment, name, msg)\n\nSend a short message (str or bytes, at most NOTIFY_MAX bytes) to the\n"
     "owner of a segment.  The GIL is released while it runs."},
    {"notify_recv", CF(engine_notify_recv), KW,
     "notify_recv(timeout=0) -> Notification | None\n\nThe oldest received notification (sender, name, msg), or None when\n"
     "none came within `timeout` seconds (0: do not wait; None: wait for\n"
     "one).  The GIL is released while it waits."},
#if TERNPY_V2
    {"notify_recv_async", CF(engine_notify_recv_async), KW,
     "notify_recv_async(timeout=None) -> Notification | None  (a coroutine)\n\n"
     "await the next notification in asyncio, woken by notify_fileno()."},
    {"notify_fileno", (PyCFunction)engine_notify_fileno, METH_NOARGS,
     "notify_fileno() -> int\n\nAn eventfd, readable while notifications are queued (owned by the\n"
     "engine: do not close or read it; notify_recv drains it)."},
    {"notify_stats", (PyCFunction)engine_notify_stats, METH_NOARGS,
     "notify_stats() -> dict\n\nreceived, delivered, refused (sends refused while the queue was\n"
     "full), queued, sent, send_failed."},
    {"buffers", CF(engine_buffers), KW,
     "buffers(segment=None) -> list[BufferInfo]\n\nA segment's registered buffers (name, address, length, location), by\n"
     "address, from its descriptor fetched again; segment None: this engine's."},
    {"buffer", CF(engine_buffer), KW,
     "buffer(segment, name) -> BufferInfo\n\nThe segment's buffer registered under `name` (NotFoundError if none);\n"
     "its address is the remote of a request."},
#endif
    {NULL, NULL, 0, NULL}};

static PyGetSetDef engine_getset[] = {
    {"server_name", (getter)engine_get_server_name, NULL,
     "'host:port' this engine listens on: its segment name for peers", NULL},
    {"closed", (getter)engine_get_closed, NULL, "True once close() ran", NULL},
    {"last_error", (getter)engine_get_last_error, NULL,
     "message of this thread's last failure on the engine ('' if none)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject TernPy_EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_repr = (reprfunc)engine_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(config=None, *, server_name=None)\n\n"
              "A tern transfer engine: a handshake daemon, a metadata backend and\n"
              "the transports its configuration loads.  It registers memory, opens\n"
              "peers' segments and moves bytes with batches.\n\n"
              "config: None ($TERN_CONFIG, else the built-in default), a path to a\n"
              "YAML file, YAML text (a str with a newline or starting with '{'),\n"
              "or a dict with the same keys.  server_name replaces the\n"
              "configuration's ('127.0.0.1:0' picks a free port; read it back from\n"
              "server_name).  An invalid configuration raises ConfigError naming\n"
              "file:line:col.\n\n"
              "Use it as a context manager, or call close():\n\n"
              "    with tern.Engine({'server_name': '127.0.0.1:0',\n"
              "                      'transports': [{'name': 'tcp'}]}) as eng:\n"
              "        buf = bytearray(1 << 20)\n"
              "        addr = eng.register(buf)\n"
              "        seg = eng.open_segment('10.0.0.7:12001')\n"
              "        eng.transfer_sync_write(buf, seg, remote_addr)\n\n"
              "Every method may be called from any thread; calls that block release\n"
              "the GIL.",
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
    .tp_init = (initproc)engine_init,
    .tp_new = PyType_GenericNew,
    .tp_weaklistoffset = offsetof(EngineObject, weakreflist),
};
