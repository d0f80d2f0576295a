/* python/src/results.h: the values the extension's calls return: the
 * Status enum, the RequestState, Notification and BufferInfo types, dicts
 * from libtern's JSON and coroutines from tern._aio (results.c). */
#ifndef TERNPY_RESULTS_H
#define TERNPY_RESULTS_H

#include "ternpy.h"

/* Create the types and add them to module m (at import). */
int ternpy_results_init(PyObject *m);
/* The Status enum member for a tern_status, new reference. */
PyObject *ternpy_status(int status);
PyObject *ternpy_request_state(const tern_request_state *st, const char *msg);
PyObject *ternpy_notification(const char *from, const char *name, const char *msg);
#if TERNPY_V2
/* A BufferInfo for one entry of tern_segment_buffers, new reference. */
PyObject *ternpy_buffer_info(const tern_buffer_info *b);
#endif
/* json.loads(text), new reference. */
PyObject *ternpy_json_loads(const char *text);
/* Call tern._aio.<fn>(*args), a coroutine (Batch.wait_async and
 * Engine.notify_recv_async are written in Python over the fds). */
PyObject *ternpy_aio(const char *fn, PyObject *args);

#endif
