/* python/src/engine.c: tern.Engine: creation, close, batches, attributes
 * and the method table (its methods on memory are in engine_memory.c, on
 * other engines in engine_peers.c; tern.Registration in registration.c).
 *
 * An Engine owns one tern_engine, the registrations made through it (each a
 * Registration holding the registered Python object and its buffer export),
 * the list of its live Batch objects and the batches libtern could not free
 * yet ("parked", see ternpy.h; both lists are kept by engine_base.c).
 * close() frees all of them in that order: batches first (their requests
 * end before the memory goes), then the engine, then the registrations. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "engine.h"

#include "args.h"
#include "batch.h"
#include "engine_base.h"
#include "engine_memory.h"
#include "engine_peers.h"
#include "errors.h"
#include "logbridge.h"
#include "registration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* ---- logger=: the engine's lines into Python's logging (logbridge.c) ------- */

static PyObject *logbridge_call(const char *fn, PyObject *args)
{
    PyObject *mod = PyImport_ImportModule("tern._logbridge");
    PyObject *f = mod ? PyObject_GetAttrString(mod, fn) : NULL;
    Py_XDECREF(mod);
    PyObject *r = f && args ? PyObject_CallObject(f, args) : NULL;
    Py_XDECREF(f);
    Py_XDECREF(args);
    return r;
}

/* The queue and its reader thread, before the engine exists: the hook is
 * set at creation, so even the plugin loader's lines reach the logger. */
static int logbridge_start(EngineObject *self, PyObject *logger)
{
#if TERNPY_LOG_HOOK
    PyObject *lg = logbridge_call("resolve", Py_BuildValue("(O)", logger));
    if (!lg)
        return -1;
    self->logq = PyObject_CallNoArgs((PyObject *)&TernPy_LogQueueType);
    if (self->logq)
        self->logthread = logbridge_call("start", Py_BuildValue("(OO)", self->logq, lg));
    Py_DECREF(lg);
    if (!self->logthread) {
        Py_CLEAR(self->logq);
        return -1;
    }
    return 0;
#else
    (void)self;
    (void)logger;
    ternpy_raise(TERN_ERR_NOT_SUPPORTED,
                 "Engine: logger= needs a libtern with tern_engine_create_with");
    return -1;
#endif
}

static int py_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* After the engine is gone: the thread delivers what is queued and ends.
 * While the interpreter shuts down (an engine never closed) nothing can be
 * imported and daemon threads no longer run: only close the queue. */
static void logbridge_stop(EngineObject *self)
{
    if (!self->logq)
        return;
    PyObject *r = py_finalizing()
                      ? PyObject_CallMethod(self->logq, "close", NULL)
                      : logbridge_call("stop", Py_BuildValue("(OO)", self->logq, self->logthread));
    if (!r && py_finalizing())
        PyErr_Clear();
    else if (!r)
        PyErr_WriteUnraisable((PyObject *)self);
    Py_XDECREF(r);
    Py_CLEAR(self->logthread);
    Py_CLEAR(self->logq);
}

static tern_engine *engine_create(EngineObject *self, const char *path, const char *yaml,
                                  const char *server_name, char *err, size_t errlen)
{
#if TERNPY_LOG_HOOK
    if (self->logq) {
        tern_engine_options o = {.size = sizeof o, .config_path = path, .config_yaml = yaml,
                                 .server_name = server_name, .log_hook = ternpy_log_hook,
                                 .log_user = ((LogQueueObject *)self->logq)->q};
        return tern_engine_create_with(&o, err, errlen);
    }
#endif
    (void)self;
    return yaml ? tern_engine_create_from_yaml(yaml, "<yaml>", err, errlen)
                : tern_engine_create_as(path, server_name, err, errlen);
}

static int engine_init(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"config", "server_name", "logger", NULL};
    PyObject *config = Py_None, *server_name = Py_None, *logger = Py_None;
    PyObject *path = NULL, *yaml = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OO:Engine", kwlist, &config, &server_name,
                                     &logger))
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
    if (logger != Py_None && logger != Py_False && !self->logq &&
        logbridge_start(self, logger) < 0) {
        Py_XDECREF(path);
        Py_XDECREF(yaml);
        return -1;
    }
    const char *p = path ? PyBytes_AS_STRING(path) : NULL;
    const char *y = yaml ? PyBytes_AS_STRING(yaml) : NULL;
    const char *sn = NULL;
    if (server_name != Py_None && !yaml &&
        !(sn = ternpy_name_arg(server_name, "Engine: server_name"))) {
        Py_XDECREF(path);
        return -1;
    }
    char err[1024] = "";
    tern_engine *e;
    int code = 0;
    Py_BEGIN_ALLOW_THREADS
    e = engine_create(self, p, y, sn, err, sizeof err);
    if (!e)
        code = create_failure_code(p, y);
    Py_END_ALLOW_THREADS
    Py_XDECREF(path);
    Py_XDECREF(yaml);
    if (!e) {
        logbridge_stop(self); /* the lines of the failed creation reach the logger */
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
    if (self->closing) { /* another thread is closing it: done when it is */
        while (self->closing) {
            Py_BEGIN_ALLOW_THREADS
            usleep(1000);
            Py_END_ALLOW_THREADS
        }
        return 0;
    }
    self->closing = 1; /* other threads may run while the GIL is released below:
                          their new calls raise ClosedError */
    /* Threads blocked in the engine (notify_recv, Batch.wait, transfers)
     * are woken with ClosedError; then wait for every call still inside
     * (each counts itself in busy until it has the GIL back). */
#if TERNPY_CLOSE_PROBE
    tern_engine *ce = self->e;
    Py_BEGIN_ALLOW_THREADS
    tern_engine_close(ce);
    Py_END_ALLOW_THREADS
#endif
    while (self->busy > 0) {
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
    }
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
        Py_DECREF(ternpy_regs_take(self, self->nregs - 1));
    logbridge_stop(self); /* every line is with the logger when close() returns */
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
     "close()\n\nClose the engine from any thread: every thread blocked in it\n"
     "(notify_recv, Batch.wait, transfer_sync_*) is woken with ClosedError,\n"
     "and close() returns once every call has left.  Then it cancels and\n"
     "frees this engine's batches, stops the engine (daemon, transports,\n"
     "published segment) and releases every registered object.  Idempotent;\n"
     "a second close() from another thread returns when the first is done."},
    {"__enter__", (PyCFunction)engine_enter, METH_NOARGS, "Return the engine."},
    {"__exit__", (PyCFunction)engine_exit, METH_VARARGS, "close() the engine."},
    {"register", CF(ternpy_engine_register), KW,
     "register(obj, length=None, name=None, location=None, *, keep=None) -> int\n\n"
     "Register memory with every loaded transport and publish it; returns its\n"
     "address.  obj is an object with the buffer protocol (bytearray, writable\n"
     "memoryview, contiguous numpy array), kept alive until unregister(), or\n"
     "an int address (torch's tensor.data_ptr()) with length=; keep= is then\n"
     "kept alive instead.  length registers a prefix of a buffer.  name: the\n"
     "application's name for it ('kv/layer0'), by which peers find it\n"
     "(Engine.buffer(segment, name)).  location: 'cpu:0'..., None to detect\n"
     "it.  ExistsError when it overlaps a registration or reuses a name."},
    {"unregister", (PyCFunction)ternpy_engine_unregister, METH_O,
     "unregister(obj_or_address)\n\nUnregister memory registered with register() (the same object or\n"
     "its address).  The object is released once no batch can touch it."},
#if TERNPY_ALLOC
    {"alloc_memory", CF(ternpy_engine_alloc_memory), KW,
     "alloc_memory(length, name=None, location=None) -> int\n\n"
     "Memory tern allocates and registers (tern_alloc_memory): `length` bytes\n"
     "rounded up to the page size, zeroed; returns its address.  It is a\n"
     "shared-memory file, so a same-host peer's shm transport copies it with\n"
     "memcpy.  View it with ctypes ((ctypes.c_char * n).from_address(addr)).\n"
     "name and location as register().  Freed by free_memory(addr) or when\n"
     "the engine closes: no view of it may be used after that."},
    {"free_memory", (PyCFunction)ternpy_engine_free_memory, METH_O,
     "free_memory(address)\n\nUnregister and unmap memory from alloc_memory().  NotFoundError for\n"
     "an address alloc_memory() did not return (or freed already)."},
#endif
    {"registrations", (PyCFunction)ternpy_engine_registrations, METH_NOARGS,
     "registrations() -> list[Registration]\n\nWhat is registered, by address."},
    {"open_segment", (PyCFunction)ternpy_engine_open_segment, METH_O,
     "open_segment(name) -> Segment\n\nOpen a peer's segment by its server name ('host:port'), fetching its\n"
     "descriptor.  Opening an open segment returns the same id."},
    {"descriptor", (PyCFunction)ternpy_engine_descriptor, METH_NOARGS,
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
    {"notify_send", CF(ternpy_engine_notify_send), KW,
     "notify_send(segment, name, msg)\n\nSend a short message (str or bytes, at most NOTIFY_MAX bytes) to the\n"
     "owner of a segment.  The GIL is released while it runs."},
    {"notify_recv", CF(ternpy_engine_notify_recv), KW,
     "notify_recv(timeout=0) -> Notification | None\n\nThe oldest received notification (sender, name, msg), or None when\n"
     "none came within `timeout` seconds (0: do not wait; None: wait for\n"
     "one).  The GIL is released while it waits."},
#if TERNPY_V2
    {"notify_recv_async", CF(ternpy_engine_notify_recv_async), KW,
     "notify_recv_async(timeout=None) -> Notification | None  (a coroutine)\n\n"
     "await the next notification in asyncio, woken by notify_fileno()."},
    {"notify_fileno", (PyCFunction)ternpy_engine_notify_fileno, METH_NOARGS,
     "notify_fileno() -> int\n\nAn eventfd, readable while notifications are queued (owned by the\n"
     "engine: do not close or read it; notify_recv drains it)."},
    {"notify_stats", (PyCFunction)ternpy_engine_notify_stats, METH_NOARGS,
     "notify_stats() -> dict\n\nreceived, delivered, refused (sends refused while the queue was\n"
     "full), queued, sent, send_failed."},
    {"register_many", CF(ternpy_engine_register_many), KW,
     "register_many(addresses, lengths, names=None, location=None)\n\nRegister memory at int addresses (lengths[i] bytes at addresses[i],\n"
     "named names[i] when names is given) with one descriptor publish: all\n"
     "or nothing.  Each becomes a Registration as register() makes; peers\n"
     "see them all at once."},
#if TERNPY_STATS
    {"stats", (PyCFunction)ternpy_engine_stats, METH_NOARGS,
     "stats() -> dict\n\nThe engine's statistics: {'engine': S, 'transports': {name: S},\n"
     "'peers': {segment name: S}}, each S a dict: ops, bytes, failures (each\n"
     "{'read': n, 'write': n}), errors ({error name: n}), retries, refetches,\n"
     "fallbacks, heals, in_flight, latency ({'read'|'write': {'count', 'sum'\n"
     "(seconds), 'buckets': [(le seconds, n), ...]}}).  docs/metrics.md."},
#endif
    {"buffers", CF(ternpy_engine_buffers), KW,
     "buffers(segment=None) -> list[BufferInfo]\n\nA segment's registered buffers (name, address, length, location), by\n"
     "address, from its descriptor fetched again; segment None: this engine's."},
    {"buffer", CF(ternpy_engine_buffer), KW,
     "buffer(segment, name) -> BufferInfo\n\nThe segment's buffer registered under `name` (NotFoundError if none);\n"
     "its address is the remote of a request."},
#endif
#if TERNPY_CLOSE_PROBE
    {"probe", CF(ternpy_engine_probe), KW,
     "probe(segment, timeout=None) -> bool\n\nIs that engine alive?  One Probe frame to its handshake daemon\n"
     "(segment: a Segment or a server name 'host:port'; nothing is opened),\n"
     "connect and answer each within `timeout` seconds (None: the engine's\n"
     "io_timeout_ms).  True when it answered, False when it did not (stopped,\n"
     "hung, nothing listening).  The GIL is released while it runs."},
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
    .tp_doc = "Engine(config=None, *, server_name=None, logger=None)\n\n"
              "A tern transfer engine: a handshake daemon, a metadata backend and\n"
              "the transports its configuration loads.  It registers memory, opens\n"
              "peers' segments and moves bytes with batches.\n\n"
              "config: None ($TERN_CONFIG, else the built-in default), a path to a\n"
              "YAML file, YAML text (a str with a newline or starting with '{'),\n"
              "or a dict with the same keys.  server_name replaces the\n"
              "configuration's ('127.0.0.1:0' picks a free port; read it back from\n"
              "server_name).  An invalid configuration raises ConfigError naming\n"
              "file:line:col.\n\n"
              "logger: None (lines on stderr), True (logging.getLogger('tern')), a\n"
              "logger name or a logging.Logger: every line the engine logs (at or\n"
              "above log_level) becomes a LogRecord there, with levels mapped and\n"
              "the attributes tern_engine and tern_thread; close() delivers them all.\n\n"
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
