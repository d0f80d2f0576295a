/* python/src/ternpy.h: the objects of the tern Python extension.
 *
 * One type per file: Engine (engine.c, with its methods on memory in
 * engine_memory.c and on other engines in engine_peers.c), Registration and
 * an engine's table of them (registration.c), Segment (segment.c), Batch
 * and the one-call transfers (batch.c); module.c holds the exception
 * classes, the result types and the module functions.
 *
 * Rules every file follows (docs/python.md, "Threading and memory"):
 *  - Every call into libtern that can block (network, waits, transfers) runs
 *    with the GIL released, between TERNPY_ENTER and TERNPY_LEAVE, which
 *    count the call on the engine so close() never frees what another
 *    thread is using.
 *  - Memory registered from a Python object keeps that object (and its
 *    buffer export) alive until it is unregistered AND no batch that used it
 *    can still touch it: a batch holds a reference to every registration its
 *    requests point into, and a batch that cannot be freed yet (a timed-out
 *    request whose slices are still in flight) is parked on its engine with
 *    those references until libtern lets it go.
 */
#ifndef TERNPY_H
#define TERNPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "tern/tern.h"

/* The application API v2 (named buffers, notifications that ride on a
 * batch, completion and notification fds, reset, cancel): bound when the
 * libtern headers have it, so the binding still builds against an older
 * installed tern (without those methods). */
#if defined(TERN_BUFFER_NAME_MAX) && defined(TERN_NOTIFY_QUEUE)
#define TERNPY_V2 1
#else
#define TERNPY_V2 0
#endif
/* Engine.alloc_memory / free_memory: when the headers have tern_alloc_memory. */
#if defined(TERN_API_ALLOC)
#define TERNPY_ALLOC 1
#else
#define TERNPY_ALLOC 0
#endif
/* Engine.stats(): when the headers have tern_engine_stats. */
#if defined(TERN_STATS_BUCKETS)
#define TERNPY_STATS 1
#else
#define TERNPY_STATS 0
#endif

/* The log hook (tern_engine_create_with): Engine(logger=...) when the
 * headers have it. */
#ifdef TERN_LOG_HOOK
#define TERNPY_LOG_HOOK 1
#else
#define TERNPY_LOG_HOOK 0
#endif

/* ---- the log bridge (logbridge.c) ------------------------------------------ */

typedef struct ternpy_logq ternpy_logq;

typedef struct LogQueueObject {
    PyObject_HEAD
    ternpy_logq *q;
} LogQueueObject;

#if TERNPY_LOG_HOOK
extern PyTypeObject TernPy_LogQueueType;
/* The engine's log hook: user is a LogQueueObject's q. */
int ternpy_log_hook(void *user, int level, const char *engine, const char *msg);
#endif

/* tern_engine_close (close() wakes blocked threads) and tern_segment_probe. */
#if defined(TERN_API_CLOSE_PROBE)
#define TERNPY_CLOSE_PROBE 1
#else
#define TERNPY_CLOSE_PROBE 0
#endif

/* ---- registrations ------------------------------------------------------ */

typedef struct RegObject {
    PyObject_HEAD
    uintptr_t addr;
    size_t len;
    PyObject *owner;    /* the registered object, or keep=, or None */
    Py_buffer view;     /* held while registered: the object cannot resize */
    int has_view;
    PyObject *name;     /* str or None */
    PyObject *location; /* str or None (detected) */
} RegObject;

extern PyTypeObject TernPy_RegType;

/* ---- engine ------------------------------------------------------------- */

typedef struct BatchObject BatchObject;

/* A batch libtern would not free yet, and what its requests point into. */
typedef struct ternpy_grave {
    tern_batch *b;
    PyObject *keep; /* list */
} ternpy_grave;

typedef struct EngineObject {
    PyObject_HEAD
    tern_engine *e;
    RegObject **regs;        /* sorted by addr, strong references */
    size_t nregs, capregs;
    BatchObject *batches;    /* live Batch objects (borrowed), a list */
    ternpy_grave *graves;
    size_t ngraves, capgraves;
    long busy;               /* calls running with the GIL released */
    int closing;             /* close() is under way: no new calls */
    PyObject *server_name;   /* str, cached after creation */
    PyObject *weakreflist;
    PyObject *logq;          /* _LogQueue the engine logs into, or NULL */
    PyObject *logthread;     /* the threading.Thread that empties it */
} EngineObject;

extern PyTypeObject TernPy_EngineType;

/* Raise ClosedError when the engine is closed; 0 when usable. */
int ternpy_engine_check(EngineObject *eo);
/* The registration covering [addr, addr+len), borrowed, or NULL. */
RegObject *ternpy_engine_find_reg(EngineObject *eo, uintptr_t addr, uint64_t len);
/* Park a batch libtern refused to free (TERN_ERR_BUSY); steals keep. */
int ternpy_engine_park(EngineObject *eo, tern_batch *b, PyObject *keep);
/* Free parked batches libtern now lets go. */
void ternpy_engine_reap(EngineObject *eo);
void ternpy_engine_link_batch(EngineObject *eo, BatchObject *bo);
void ternpy_engine_unlink_batch(EngineObject *eo, BatchObject *bo);

#define TERNPY_ENTER(eo) do { (eo)->busy++; Py_BEGIN_ALLOW_THREADS
#define TERNPY_LEAVE(eo) Py_END_ALLOW_THREADS (eo)->busy--; } while (0)

/* ---- segments ----------------------------------------------------------- */

typedef struct SegmentObject {
    PyObject_HEAD
    EngineObject *engine; /* strong */
    tern_segment_id id;
    PyObject *name;       /* str */
} SegmentObject;

extern PyTypeObject TernPy_SegmentType;

/* A new Segment for an id the engine already opened. */
PyObject *ternpy_segment_new(EngineObject *eo, tern_segment_id id, PyObject *name);
/* Segment, int id or str name (opened on the way) -> id; -1 with an
 * exception set on failure. */
int ternpy_segment_arg(EngineObject *eo, PyObject *arg, tern_segment_id *out);

/* ---- batches ------------------------------------------------------------ */

struct BatchObject {
    PyObject_HEAD
    EngineObject *engine; /* strong */
    tern_batch *b;        /* NULL once closed */
    size_t capacity;
    tern_request *queued; /* requests added by write()/read(), not submitted */
    size_t nqueued, capqueued;
    PyObject *keep;       /* list: registrations and objects requests use */
    PyObject *queued_keep;/* the same for the queued requests */
    int busy;             /* a thread is inside submit/wait/close */
    PyObject *notify;     /* (segment id, name bytes, msg bytes) riding on the
                             queued requests, or NULL */
    BatchObject *prev, *next;
    PyObject *weakreflist;
};

extern PyTypeObject TernPy_BatchType;

/* Close a batch for the engine's own close(): wait, free or park. */
void ternpy_batch_detach(BatchObject *bo);

#if TERNPY_V2
/* A BufferInfo for one entry of tern_segment_buffers, new reference. */
PyObject *ternpy_buffer_info(const tern_buffer_info *b);
/* Segment id's buffers as a list of BufferInfo; the named one. */
PyObject *ternpy_segment_buffers(EngineObject *eo, tern_segment_id id);
PyObject *ternpy_segment_buffer(EngineObject *eo, tern_segment_id id, PyObject *name);
#endif

/* Call tern._aio.<fn>(*args), a coroutine (Batch.wait_async and
 * Engine.notify_recv_async are written in Python over the fds). */
PyObject *ternpy_aio(const char *fn, PyObject *args);

/* Engine.transfer_sync_write/read. */
PyObject *ternpy_transfer_sync(EngineObject *eo, PyObject *args, PyObject *kw, int opcode);

/* Parse (local, length) of a request: an int address with a length, or an
 * object with the buffer protocol (length defaults to its size).  On
 * success *keep is a new reference to the object to keep alive (or NULL). */
int ternpy_local_arg(PyObject *local, PyObject *length, int writable, uintptr_t *addr,
                     uint64_t *len, PyObject **keep);

/* ---- module ------------------------------------------------------------- */

/* Raise the tern.Error subclass for `code` with `msg`. Returns NULL. */
PyObject *ternpy_raise(int code, const char *msg);
/* str -> UTF-8 C string for a name the C API takes NUL-terminated (a
 * segment, buffer or location name): one with a NUL byte inside would be cut
 * there, naming something else, so it is refused (InvalidArgumentError).
 * NULL with an exception set. */
const char *ternpy_name_arg(PyObject *o, const char *what);
/* The same with the engine's last error message for this thread. */
PyObject *ternpy_raise_engine(EngineObject *eo, int code);
/* "timeout" in seconds (None: forever) -> milliseconds, -1 for forever. */
int ternpy_timeout_ms(PyObject *timeout, int *ms);
/* The Status enum member for a tern_status, new reference. */
PyObject *ternpy_status(int status);
PyObject *ternpy_request_state(const tern_request_state *st, const char *msg);
PyObject *ternpy_notification(const char *from, const char *name, const char *msg);
/* json.loads(text), new reference. */
PyObject *ternpy_json_loads(const char *text);

/* ---- shared between the Engine's files ---------------------------------- */

/* ---- registration.c: the engine's table of registrations ---- */
size_t ternpy_regs_upper_bound(EngineObject *eo, uintptr_t addr);
int ternpy_regs_insert(EngineObject *eo, RegObject *r);
RegObject *ternpy_regs_take(EngineObject *eo, size_t i);

/* ---- Engine methods in engine_memory.c and engine_peers.c (the method
 * table is engine.c's) ---- */
PyObject *ternpy_engine_register(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_unregister(EngineObject *self, PyObject *obj);
PyObject *ternpy_engine_registrations(EngineObject *self, PyObject *unused);
PyObject *ternpy_engine_open_segment(EngineObject *self, PyObject *name);
PyObject *ternpy_engine_descriptor(EngineObject *self, PyObject *unused);
PyObject *ternpy_engine_notify_send(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_notify_recv(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_notify_fileno(EngineObject *self, PyObject *unused);
PyObject *ternpy_engine_notify_stats(EngineObject *self, PyObject *unused);
#if TERNPY_STATS
PyObject *ternpy_engine_stats(EngineObject *self, PyObject *unused);
#endif
PyObject *ternpy_engine_notify_recv_async(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_buffers(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_buffer(EngineObject *self, PyObject *args, PyObject *kw);
#if TERNPY_V2
PyObject *ternpy_engine_register_many(EngineObject *self, PyObject *args, PyObject *kw);
#if TERNPY_ALLOC
PyObject *ternpy_engine_alloc_memory(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *ternpy_engine_free_memory(EngineObject *self, PyObject *addr);
#endif
#endif
#if TERNPY_CLOSE_PROBE
PyObject *ternpy_engine_probe(EngineObject *self, PyObject *args, PyObject *kw);
/* tern_segment_probe of `name`: True alive, False no answer, NULL raised. */
PyObject *ternpy_probe(EngineObject *eo, const char *name, PyObject *timeout);
#endif

#endif
