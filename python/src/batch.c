/* python/src/batch.c: tern.Batch and the one-call transfers.
 *
 * write()/read() queue a request in Python; submit() hands every queued
 * request to libtern in one call; wait() submits what is queued and waits.
 * A batch keeps a reference to each registration (and each buffer object)
 * its requests point into.  close() frees the libtern batch, or, while
 * libtern still holds slices of a timed-out request, parks it on the engine
 * with those references (see ternpy.h): memory a transport may still touch
 * is never released. */
#include "ternpy.h" /* Python.h first, as CPython requires */
#include "batch.h"

#include "args.h"
#include "engine_base.h"
#include "errors.h"
#include "registration.h"
#include "results.h"
#include "segment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- arguments ----------------------------------------------------------- */

/* Parse (local, length) of a request: an int address with a length, or an
 * object with the buffer protocol (length defaults to its size).  On
 * success *keep is a new reference to the object to keep alive (or NULL). */
static int local_arg(PyObject *local, PyObject *length, int writable, uintptr_t *addr,
                     uint64_t *len, PyObject **keep)
{
    *keep = NULL;
    if (PyObject_CheckBuffer(local)) {
        Py_buffer v;
        int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(local, &v, flags) < 0)
            return -1;
        *addr = (uintptr_t)v.buf;
        *len = (uint64_t)v.len;
        PyBuffer_Release(&v);
        if (length != Py_None) {
            unsigned long long n = PyLong_AsUnsignedLongLong(length);
            if (n == (unsigned long long)-1 && PyErr_Occurred())
                return -1;
            if (n > *len) {
                ternpy_raise(TERN_ERR_INVAL, "length is larger than the local buffer");
                return -1;
            }
            *len = n;
        }
        *keep = Py_NewRef(local);
        return 0;
    }
    if (!PyIndex_Check(local)) {
        PyErr_Format(PyExc_TypeError,
                     "local: expected an int address or an object with the buffer "
                     "protocol, not %.100s", Py_TYPE(local)->tp_name);
        return -1;
    }
    unsigned long long a = PyLong_AsUnsignedLongLong(local);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (length == Py_None) {
        ternpy_raise(TERN_ERR_INVAL, "an int local address needs length=");
        return -1;
    }
    unsigned long long n = PyLong_AsUnsignedLongLong(length);
    if (n == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *addr = (uintptr_t)a;
    *len = n;
    return 0;
}

/* One request from (local, segment, remote, length=None, timeout=None); the
 * objects to keep alive for it are appended to `keep`. */
static int request_arg(EngineObject *eo, PyObject *args, PyObject *kw, const char *fname,
                       int opcode, tern_request *r, PyObject *keep)
{
    static char *kwlist[] = {"local", "segment", "remote", "length", "timeout", NULL};
    PyObject *local, *seg, *remote, *length = Py_None, *timeout = Py_None, *obj = NULL;
    char fmt[64];
    snprintf(fmt, sizeof fmt, "OOO|OO:%s", fname);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &local, &seg, &remote, &length,
                                     &timeout))
        return -1;
    uintptr_t addr;
    uint64_t len;
    int ms;
    if (local_arg(local, length, opcode == TERN_READ, &addr, &len, &obj) < 0)
        return -1;
    unsigned long long ra = PyLong_AsUnsignedLongLong(remote);
    int rc = ra == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
    if (rc == 0)
        rc = ternpy_timeout_ms(timeout, &ms);
    if (rc == 0)
        rc = ternpy_segment_arg(eo, seg, &r->segment);
    if (rc == 0 && obj)
        rc = PyList_Append(keep, obj);
    Py_XDECREF(obj);
    if (rc < 0)
        return -1;
    RegObject *reg = ternpy_engine_find_reg(eo, addr, len);
    Py_ssize_t n = PyList_GET_SIZE(keep);
    if (reg && (n == 0 || PyList_GET_ITEM(keep, n - 1) != (PyObject *)reg) &&
        PyList_Append(keep, (PyObject *)reg) < 0)
        return -1;
    r->opcode = opcode;
    r->local = (void *)addr;
    r->remote = ra;
    r->length = len;
    r->timeout_ms = ms < 0 ? 0 : (ms == 0 ? 1 : (uint32_t)ms);
    return 0;
}

/* ---- Batch ------------------------------------------------------------------ */

static int batch_init(BatchObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"engine", "capacity", NULL};
    PyObject *engine;
    Py_ssize_t capacity = 64;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|n:Batch", kwlist, ternpy_engine_type,
                                     &engine, &capacity))
        return -1;
    if (self->b) {
        ternpy_raise(TERN_ERR_EXISTS, "Batch: already created");
        return -1;
    }
    EngineObject *eo = (EngineObject *)engine;
    if (ternpy_engine_check(eo) < 0)
        return -1;
    if (capacity < 1) {
        ternpy_raise(TERN_ERR_INVAL, "Batch: capacity must be >= 1");
        return -1;
    }
    ternpy_engine_reap(eo);
    self->keep = PyList_New(0);
    self->queued_keep = PyList_New(0);
    if (!self->keep || !self->queued_keep)
        return -1;
    self->b = tern_batch_alloc(eo->e, (size_t)capacity);
    if (!self->b) {
        ternpy_raise_engine(eo, TERN_ERR_NOMEM);
        return -1;
    }
    self->capacity = (size_t)capacity;
    self->engine = (EngineObject *)Py_NewRef(eo);
    ternpy_engine_link_batch(eo, self);
    return 0;
}

static int batch_usable(BatchObject *self)
{
    if (!self->b) {
        ternpy_raise(TERN_ERR_CLOSED, "the batch is closed");
        return -1;
    }
    if (self->busy) {
        ternpy_raise(TERN_ERR_BUSY, "another thread is inside submit/wait on this batch");
        return -1;
    }
    return ternpy_engine_check(self->engine);
}

static void queue_clear(BatchObject *self)
{
    self->nqueued = 0;
    Py_CLEAR(self->notify);
    if (self->queued_keep)
        PyList_SetSlice(self->queued_keep, 0, PY_SSIZE_T_MAX, NULL);
}

static PyObject *batch_add(BatchObject *self, PyObject *args, PyObject *kw, int opcode)
{
    if (batch_usable(self) < 0)
        return NULL;
    size_t submitted = tern_batch_size(self->b);
    if (submitted + self->nqueued >= self->capacity)
        return ternpy_raise(TERN_ERR_INVAL, "batch full: capacity reached");
    if (self->nqueued == self->capqueued) {
        size_t cap = self->capqueued ? self->capqueued * 2 : 16;
        tern_request *n = PyMem_Realloc(self->queued, cap * sizeof *n);
        if (!n)
            return PyErr_NoMemory();
        self->queued = n;
        self->capqueued = cap;
    }
    /* Opening a segment given by name releases the GIL: the batch is busy. */
    tern_request r;
    self->busy = 1;
    int rc = request_arg(self->engine, args, kw, opcode == TERN_WRITE ? "write" : "read", opcode,
                         &r, self->queued_keep);
    self->busy = 0;
    if (rc < 0)
        return NULL;
    self->queued[self->nqueued++] = r;
    return PyLong_FromSize_t(submitted + self->nqueued - 1);
}

static PyObject *batch_write(BatchObject *self, PyObject *args, PyObject *kw)
{
    return batch_add(self, args, kw, TERN_WRITE);
}

static PyObject *batch_read(BatchObject *self, PyObject *args, PyObject *kw)
{
    return batch_add(self, args, kw, TERN_READ);
}

/* Submit the queued requests; returns how many, -1 with an exception. */
static Py_ssize_t submit_queued(BatchObject *self)
{
    size_t n = self->nqueued;
    if (!n)
        return 0;
    EngineObject *eo = self->engine;
    int rc;
    tern_segment_id nseg = 0;
    const char *nname = NULL, *nmsg = NULL;
    if (self->notify) { /* (segment id, name, msg) */
        nseg = (tern_segment_id)PyLong_AsLong(PyTuple_GET_ITEM(self->notify, 0));
        nname = PyBytes_AS_STRING(PyTuple_GET_ITEM(self->notify, 1));
        nmsg = PyBytes_AS_STRING(PyTuple_GET_ITEM(self->notify, 2));
    }
    self->busy = 1;
    TERNPY_ENTER(eo);
#if TERNPY_V2
    if (nname)
        rc = tern_batch_submit_with_notify(self->b, self->queued, n, nseg, nname, nmsg);
    else
#endif
        rc = tern_batch_submit(self->b, self->queued, n);
    TERNPY_LEAVE(eo);
    self->busy = 0;
    (void)nseg; /* unused without the v2 API */
    (void)nname;
    (void)nmsg;
    if (rc < 0) {
        queue_clear(self);
        ternpy_raise_engine(eo, rc);
        return -1;
    }
    /* What the submitted requests point into now stays with the batch. */
    Py_ssize_t k = PyList_GET_SIZE(self->keep);
    if (PyList_SetSlice(self->keep, k, k, self->queued_keep) < 0)
        return -1;
    queue_clear(self);
    return (Py_ssize_t)n;
}

static PyObject *batch_submit(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (batch_usable(self) < 0)
        return NULL;
    Py_ssize_t n = submit_queued(self);
    return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

static PyObject *batch_wait(BatchObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    int ms;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &timeout))
        return NULL;
    if (ternpy_timeout_ms(timeout, &ms) < 0 || batch_usable(self) < 0)
        return NULL;
    if (submit_queued(self) < 0)
        return NULL;
    EngineObject *eo = self->engine;
    int rc;
    self->busy = 1;
    TERNPY_ENTER(eo);
    rc = tern_batch_wait(self->b, ms);
    TERNPY_LEAVE(eo);
    self->busy = 0;
    if (rc < 0)
        return ternpy_raise_engine(eo, rc);
    Py_RETURN_NONE;
}

static int index_arg(BatchObject *self, PyObject *arg, size_t *idx, int *queued)
{
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred())
        return -1;
    size_t submitted = tern_batch_size(self->b);
    if (i < 0 || (size_t)i >= submitted + self->nqueued) {
        PyErr_Format(PyExc_IndexError, "request %zd: the batch holds %zu", i,
                     submitted + self->nqueued);
        return -1;
    }
    *idx = (size_t)i;
    *queued = (size_t)i >= submitted;
    return 0;
}

static PyObject *batch_state(BatchObject *self, PyObject *arg)
{
    size_t i;
    int queued;
    if (!self->b)
        return ternpy_raise(TERN_ERR_CLOSED, "the batch is closed");
    if (index_arg(self, arg, &i, &queued) < 0)
        return NULL;
    tern_request_state st = {TERN_WAITING, 0, 0};
    if (!queued) {
        int rc = tern_batch_state(self->b, i, &st);
        if (rc < 0)
            return ternpy_raise_engine(self->engine, rc);
    }
    return ternpy_request_state(&st, queued ? "" : tern_batch_error(self->b, i));
}

static PyObject *batch_error(BatchObject *self, PyObject *arg)
{
    size_t i;
    int queued;
    if (!self->b)
        return ternpy_raise(TERN_ERR_CLOSED, "the batch is closed");
    if (index_arg(self, arg, &i, &queued) < 0)
        return NULL;
    return PyUnicode_FromString(queued ? "" : tern_batch_error(self->b, i));
}

/* Free the libtern batch or park it; never waits.  Requests still
 * running are canceled first where libtern can. */
static void batch_release(BatchObject *self)
{
    queue_clear(self);
    if (!self->b)
        return;
    tern_batch *b = self->b;
    self->b = NULL;
#if TERNPY_V2
    tern_batch_cancel(b);
#endif
    if (tern_batch_free(b) == 0) {
        if (self->keep)
            PyList_SetSlice(self->keep, 0, PY_SSIZE_T_MAX, NULL);
        return;
    }
    /* Slices of a timed-out request are still out: the engine keeps the
     * batch and what it points into until libtern lets go. */
    PyObject *keep = self->keep;
    self->keep = PyList_New(0);
    if (ternpy_engine_park(self->engine, b, keep) < 0)
        Py_INCREF(keep); /* never released: see ternpy_engine_park */
}

void ternpy_batch_detach(BatchObject *self)
{
    batch_release(self);
}

static PyObject *batch_close(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy)
        return ternpy_raise(TERN_ERR_BUSY, "another thread is inside submit/wait on this batch");
    batch_release(self);
    Py_RETURN_NONE;
}

#if TERNPY_V2
static PyObject *batch_notify(BatchObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "name", "msg", NULL};
    PyObject *seg, *msg;
    const char *name;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsO:notify", kwlist, &seg, &name, &msg))
        return NULL;
    if (batch_usable(self) < 0)
        return NULL;
    if (!self->nqueued)
        return ternpy_raise(TERN_ERR_INVAL,
                            "notify: no queued request to carry it (write()/read() first)");
    if (self->notify)
        return ternpy_raise(TERN_ERR_EXISTS,
                            "notify: the queued requests already carry one; submit() first");
    PyObject *bytes = PyUnicode_Check(msg) ? PyUnicode_AsUTF8String(msg) : Py_XNewRef(msg);
    if (!bytes || !PyBytes_Check(bytes)) {
        if (bytes)
            PyErr_SetString(PyExc_TypeError, "notify: msg must be str or bytes");
        Py_XDECREF(bytes);
        return NULL;
    }
    if (strlen(PyBytes_AS_STRING(bytes)) != (size_t)PyBytes_GET_SIZE(bytes)) {
        Py_DECREF(bytes);
        return ternpy_raise(TERN_ERR_INVAL, "notify: msg contains a NUL byte");
    }
    tern_segment_id id;
    self->busy = 1; /* a segment given by name is opened without the GIL */
    int rc = ternpy_segment_arg(self->engine, seg, &id);
    self->busy = 0;
    if (rc < 0) {
        Py_DECREF(bytes);
        return NULL;
    }
    self->notify = Py_BuildValue("(iyN)", (int)id, name, bytes);
    if (!self->notify)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *batch_fileno(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->b)
        return ternpy_raise(TERN_ERR_CLOSED, "the batch is closed");
    int fd = tern_batch_fd(self->b);
    if (fd < 0)
        return ternpy_raise_engine(self->engine, fd);
    return PyLong_FromLong(fd);
}

static PyObject *batch_cancel(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (batch_usable(self) < 0)
        return NULL;
    queue_clear(self);
    int n = tern_batch_cancel(self->b);
    if (n < 0)
        return ternpy_raise_engine(self->engine, n);
    return PyLong_FromLong(n);
}

static PyObject *batch_reset(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (batch_usable(self) < 0)
        return NULL;
    int rc = tern_batch_reset(self->b);
    if (rc < 0)
        return ternpy_raise_engine(self->engine, rc);
    queue_clear(self);
    PyList_SetSlice(self->keep, 0, PY_SSIZE_T_MAX, NULL);
    Py_RETURN_NONE;
}

static int any_pending(BatchObject *self)
{
    size_t n = tern_batch_size(self->b);
    for (size_t i = 0; i < n; i++) {
        tern_request_state st;
        if (tern_batch_state(self->b, i, &st) == 0 &&
            (st.status == TERN_WAITING || st.status == TERN_PENDING))
            return 1;
    }
    return 0;
}

/* A notification riding on the batch is still being sent (every request
 * it rides on COMPLETED, the peer has not taken it yet). */
static int notify_pending(BatchObject *self)
{
    return tern_batch_notify_error(self->b, NULL, 0) == 1;
}

/* True when every request has its final status (raising the first
 * failure, as wait()), False while some are running.  Never blocks. */
static PyObject *batch_poll(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (batch_usable(self) < 0 || submit_queued(self) < 0)
        return NULL;
    int rc = tern_batch_wait(self->b, 0);
    /* TIMEOUT from a zero wait: still running (a request, or a notification
     * riding on the batch that is not handed over yet), or a request timed
     * out. */
    if (rc == TERN_ERR_TIMEOUT) {
        if (any_pending(self) || notify_pending(self))
            Py_RETURN_FALSE;
        rc = tern_batch_wait(self->b, 0); /* all final now: its answer stands */
    }
    if (rc < 0)
        return ternpy_raise_engine(self->engine, rc);
    Py_RETURN_TRUE;
}

static PyObject *batch_wait_async(BatchObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait_async", kwlist, &timeout))
        return NULL;
    PyObject *a = PyTuple_Pack(2, (PyObject *)self, timeout);
    if (!a)
        return NULL;
    PyObject *r = ternpy_aio("wait_batch", a);
    Py_DECREF(a);
    return r;
}

static PyObject *batch_get_inflight(BatchObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->b ? tern_batch_inflight(self->b) : 0);
}
#endif

static PyObject *batch_enter(BatchObject *self, PyObject *unused)
{
    (void)unused;
    if (batch_usable(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *batch_exit(BatchObject *self, PyObject *args)
{
    PyObject *et = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : Py_None;
    if (et == Py_None && self->b) {
        PyObject *noargs = PyTuple_New(0);
        PyObject *r = noargs ? batch_wait(self, noargs, NULL) : NULL;
        Py_XDECREF(noargs);
        if (!r) {
            batch_release(self);
            return NULL;
        }
        Py_DECREF(r);
    }
    if (self->busy)
        return ternpy_raise(TERN_ERR_BUSY, "another thread is inside submit/wait on this batch");
    batch_release(self);
    Py_RETURN_FALSE;
}

static Py_ssize_t batch_len(BatchObject *self)
{
    return self->b ? (Py_ssize_t)(tern_batch_size(self->b) + self->nqueued) : 0;
}

static void batch_dealloc(BatchObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->engine) {
        batch_release(self);
        ternpy_engine_unlink_batch(self->engine, self);
        Py_DECREF(self->engine);
    }
    PyMem_Free(self->queued);
    Py_XDECREF(self->notify);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->queued_keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *batch_repr(BatchObject *self)
{
    if (!self->b)
        return PyUnicode_FromString("<tern.Batch closed>");
    return PyUnicode_FromFormat("<tern.Batch %zu submitted, %zu queued, capacity %zu>",
                                tern_batch_size(self->b), self->nqueued, self->capacity);
}

static PyObject *batch_get_closed(BatchObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->b == NULL);
}

static PyObject *batch_get_capacity(BatchObject *self, void *c)
{
    (void)c;
    return PyLong_FromSize_t(self->capacity);
}

#define KW (METH_VARARGS | METH_KEYWORDS)
#define CF(f) (PyCFunction)(void (*)(void))(f)

static PyMethodDef batch_methods[] = {
    {"write", CF(batch_write), KW,
     "write(local, segment, remote, length=None, timeout=None) -> int\n\n"
     "Queue a WRITE of `length` bytes from local memory to address `remote`\n"
     "of the segment; returns the request's index.  local: an int address\n"
     "or an object with the buffer protocol inside registered memory (length\n"
     "defaults to its size); segment: a Segment, its id or its name; timeout\n"
     "in seconds after which the request ends TIMEOUT (None: none)."},
    {"read", CF(batch_read), KW,
     "read(local, segment, remote, length=None, timeout=None) -> int\n\n"
     "Queue a READ of `length` bytes at `remote` into local memory; see write()."},
    {"submit", (PyCFunction)batch_submit, METH_NOARGS,
     "submit() -> int\n\nHand every queued request to tern in one call; returns how many.\n"
     "A request that cannot be valid (unregistered local memory, unknown\n"
     "segment) ends INVALID and wait() raises its error."},
    {"wait", CF(batch_wait), KW,
     "wait(timeout=None)\n\nSubmit what is queued, then wait until no request is WAITING or\n"
     "PENDING.  Raises the error of the first request that did not complete\n"
     "(its message says which and why), or TimeoutError when `timeout`\n"
     "seconds passed first (the requests go on).  The GIL is released."},
    {"state", (PyCFunction)batch_state, METH_O,
     "state(index) -> RequestState\n\n(status, transferred, error, message) of one request."},
    {"error", (PyCFunction)batch_error, METH_O,
     "error(index) -> str\n\nThe message of request `index`'s failure ('' if none)."},
    {"close", (PyCFunction)batch_close, METH_NOARGS,
     "close()\n\nFree the batch without waiting: queued requests are dropped and,\n"
     "with the v2 API, running ones canceled.  While a request still has\n"
     "bytes in flight (timed out or canceled), its engine keeps the batch\n"
     "(and the memory it uses) until they end."},
#if TERNPY_V2
    {"notify", CF(batch_notify), KW,
     "notify(segment, name, msg)\n\nAttach a notification to the requests queued so far: it is submitted\n"
     "with them and the peer receives it only after every byte of those\n"
     "requests is in place (not at all if one fails).  wait() covers it."},
    {"fileno", (PyCFunction)batch_fileno, METH_NOARGS,
     "fileno() -> int\n\nAn eventfd that becomes readable when a request reaches its final\n"
     "status (owned by the batch: do not close it).  For select/selectors/\n"
     "asyncio; wait(), poll() and reset() drain it."},
    {"poll", (PyCFunction)batch_poll, METH_NOARGS,
     "poll() -> bool\n\nSubmit what is queued; True when every request has its final status\n"
     "and a notification riding on the batch was handed over (raising the\n"
     "first failure, as wait()), False while some run.  Never blocks."},
    {"wait_async", CF(batch_wait_async), KW,
     "wait_async(timeout=None)  (a coroutine)\n\nawait the batch in asyncio: the loop watches fileno(), no thread\n"
     "polls.  Raises as wait(); TimeoutError after `timeout` seconds."},
    {"cancel", (PyCFunction)batch_cancel, METH_NOARGS,
     "cancel() -> int\n\nEnd every WAITING/PENDING request CANCELED; returns how many.  Queued\n"
     "requests are dropped.  Slices a transport already holds finish and\n"
     "are ignored; the batch keeps their memory alive until then."},
    {"reset", (PyCFunction)batch_reset, METH_NOARGS,
     "reset()\n\nEmpty the batch for reuse once every request has its final status\n"
     "and no slice is held (BusyError otherwise)."},
#endif
    {"__enter__", (PyCFunction)batch_enter, METH_NOARGS, "Return the batch."},
    {"__exit__", (PyCFunction)batch_exit, METH_VARARGS,
     "Without an exception: wait() (raising a failure), then close().  With\n"
     "one: close() only."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef batch_getset[] = {
    {"closed", (getter)batch_get_closed, NULL, "True once closed", NULL},
    {"capacity", (getter)batch_get_capacity, NULL, "the most requests it holds", NULL},
#if TERNPY_V2
    {"inflight", (getter)batch_get_inflight, NULL,
     "slices of the batch a transport or the core still holds", NULL},
#endif
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods batch_as_sequence = {
    .sq_length = (lenfunc)batch_len,
};

PyTypeObject TernPy_BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_repr = (reprfunc)batch_repr,
    .tp_as_sequence = &batch_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Batch(engine, capacity=64)\n\n"
              "Up to `capacity` READ/WRITE requests between registered memory and\n"
              "peers' segments, submitted together and waited for together:\n\n"
              "    with engine.batch(16) as b:\n"
              "        for i in range(16):\n"
              "            b.write(addr + i * bs, seg, remote + i * bs, bs)\n"
              "    # leaving the block waited for every request (raising a failure)\n\n"
              "A batch must not be used from two threads at once (BusyError).",
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
    .tp_init = (initproc)batch_init,
    .tp_new = PyType_GenericNew,
    .tp_weaklistoffset = offsetof(BatchObject, weakreflist),
};

/* ---- Engine.transfer_sync_write/read -------------------------------------- */

PyObject *ternpy_transfer_sync(EngineObject *eo, PyObject *args, PyObject *kw, int opcode)
{
    if (ternpy_engine_check(eo) < 0)
        return NULL;
    ternpy_engine_reap(eo);
    tern_request r;
    PyObject *keep = PyList_New(0);
    if (!keep)
        return NULL;
    if (request_arg(eo, args, kw,
                    opcode == TERN_WRITE ? "transfer_sync_write" : "transfer_sync_read", opcode,
                    &r, keep) < 0) {
        Py_DECREF(keep);
        return NULL;
    }
    tern_batch *b;
    int rc = 0, frc = 0;
    char msg[1024] = "";
    TERNPY_ENTER(eo);
    b = tern_batch_alloc(eo->e, 1);
    if (!b)
        rc = TERN_ERR_NOMEM;
    if (b)
        rc = tern_batch_submit(b, &r, 1);
    if (b && rc >= 0)
        rc = tern_batch_wait(b, -1);
    /* the failure's message, before a refused free replaces it */
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", tern_engine_last_error(eo->e));
#if TERNPY_V2
    if (b && rc == TERN_ERR_CLOSED) /* Engine.close() from another thread */
        tern_batch_cancel(b);
#endif
    if (b)
        frc = tern_batch_free(b);
    TERNPY_LEAVE(eo);
    if (frc == TERN_ERR_BUSY) {
        if (ternpy_engine_park(eo, b, keep) < 0)
            Py_INCREF(keep);
    } else {
        Py_DECREF(keep);
    }
    if (rc < 0)
        return ternpy_raise(rc, msg);
    Py_RETURN_NONE;
}
