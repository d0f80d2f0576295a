/* python/src/ternpy.h: what every file of the tern Python extension
 * includes first: Python.h, tern.h and which parts of the libtern API the
 * headers have.  It declares no function: each file's are in its own
 * header, and a file includes the headers of the files it calls.
 *
 * One type per file: Engine (engine.c, with its methods on memory in
 * engine_memory.c and on other engines in engine_peers.c, and the state
 * every other file uses in engine_base.c), Registration and an engine's
 * table of them (registration.c), Segment (segment.c), Batch and the
 * one-call transfers (batch.c), the log queue (logbridge.c).  Below them:
 * the exception classes (errors.c), the arguments every type parses
 * (args.c) and the values calls return (results.c).  module.c, on top,
 * holds the module functions and creates the module.  No file calls one
 * that calls it (scripts/object-deps.py, group python).
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

/* tern_engine_close (close() wakes blocked threads) and tern_segment_probe. */
#if defined(TERN_API_CLOSE_PROBE)
#define TERNPY_CLOSE_PROBE 1
#else
#define TERNPY_CLOSE_PROBE 0
#endif

#endif
