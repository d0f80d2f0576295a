/* core/datapath/request.h: requests, batches and slices: the state every
 * stage of the data path shares (see docs/architecture.md, Data path).
 *
 * Lock: the batch lock guards its requests' state; a stage that holds a
 * slice (tern_cslice) owns it alone until it hands it to the next stage.
 * A request ends (COMPLETED, FAILED, TIMEOUT) once; a FAILED request is
 * published only when its last live slice is back, so the application
 * never sees a final status while a transport may still touch its memory. */
#ifndef TERN_CORE_DATAPATH_REQUEST_H
#define TERN_CORE_DATAPATH_REQUEST_H

#include "engine/engine_state.h"
#include "obs/stats.h"

/* One request and its state; guarded by the batch lock. */
typedef struct tern_req {
    tern_request r;
    tern_status status;
    uint64_t transferred;
    int error;
    char *errmsg;          /* malloc()ed on failure, NULL otherwise */
    int nslices;           /* slices of the first cut (test hook) */
    int live;              /* slices the core or a transport still holds */
    tern_status ending;    /* final status decided, published when live is 0 */
    uint64_t deadline_ms;  /* tern_now_ms() based; 0 = none */
    int note;              /* index into the batch's notes, -1: none */
    /* statistics (stats.h): fixed at submit, before any slice exists */
    tern_stat_set *st;     /* the peer's counters, NULL: the engine's only */
    uint64_t start_ns;     /* when it went PENDING (tern_stats_now: 0 when not counting) */
    int started;           /* went PENDING */
    int xport;             /* transport of the last slice that ended, -1: none */
} tern_req;

/* A notification riding on requests [first, first+count) of a batch
 * (tern_batch_submit_with_notify): handed to the notification sender when
 * the last of them COMPLETED, dropped with an error when one ended
 * otherwise.  Guarded by the batch lock. */
typedef struct tern_bnote {
    size_t first, count, left; /* left: requests not yet COMPLETED */
    tern_segment_id seg;
    char peer[256];        /* the segment's name, resolved at submit: the
                              completion path takes no segment lock */
    char *name, *msg;
    int state;             /* 1 waiting for the requests, 2 being sent, 0 sent,
                              < 0 failed (the tern_err) */
    char *why;             /* the failure's message */
} tern_bnote;

struct tern_batch {
    tern_engine *e;
    size_t cap, n;
    tern_req *reqs;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    long inflight;         /* live tern_cslice of this batch (under lock) */
    int efd;               /* eventfd of tern_batch_fd, -1 until asked for */
    tern_bnote *notes;     /* notifications attached (batch_ctl.c, batch_state.c) */
    size_t nnotes;
    int notes_busy;        /* notes waiting or being sent */
    int pending_note;      /* note the next submit's requests ride on, -1: none */
    size_t open;           /* requests submitted, final status not published */
    tern_stat_acc acc;     /* COMPLETED requests not added to the statistics yet */
    /* a submit call in progress (tern_stats_defer): its thread, its start
     * time, the requests that completed inside it.  pend is written by the
     * submitting thread only (under the lock), so that thread may read it
     * without the lock. */
    _Atomic int submitting;
    pthread_t submitter;
    uint64_t submit_t0;
    tern_stat_acc pend;
};

/* ---- batch state the completion path changes (batch_state.c) ---- */

/* A request reached its final status, the last slice came back or a
 * notification was handed over: wake waiters and the batch's eventfd. */
void tern_batch_signal_locked(tern_batch *b);
/* Request idx published its final status: advance its notification. */
void tern_batch_note_req_locked(tern_batch *b, size_t idx);
void tern_batch_drain_fd_locked(tern_batch *b);
/* Closes the eventfd and frees the notes (tern_batch_free). */
void tern_batch_release_locked(tern_batch *b);
/* Frees the notes (tern_batch_reset). */
void tern_batch_notes_clear_locked(tern_batch *b);

/* A slice and the core's bookkeeping (s.core points back here). */
typedef struct tern_cslice {
    tern_slice s;
    tern_batch *b;
    size_t idx;            /* request index */
    tern_segment *seg;
    uint64_t seg_gen;      /* seg->gen when cut */
    uint64_t desc_gen;     /* the peer descriptor's generation when routed */
    uint64_t offset;       /* within the request */
    int attempt;           /* failed attempts so far; the retry count for path choice */
    int whole;             /* not cut yet: the worker refetches, checks, cuts */
    int refetch;           /* refetch the peer's descriptor before the next route */
    int range;             /* the target refused the range: retry only on a newer
                              descriptor that covers it */
    int unreach;           /* the transport said TERN_ERR_UNREACHABLE */
    int probe;             /* timed out: ask whether the peer is alive before a retry */
    uint64_t epoch;        /* the peer's failure epoch this slice has counted */
    uint64_t failed_ns;    /* when the last attempt failed (a refetch that
                              started later is fresh enough) */
    uint64_t due_ms;       /* queued: not before this */
    tern_xport *x;         /* transport of the last route */
    tern_ep_ref *ref;      /* endpoint held while the transport owns it */
    int local_dev;
    int pair;              /* slot in the segment's spread table (spread.h), -1: none */
    int moves;             /* times sent again because its pair stalled */
    uint64_t sent_ns;      /* when routed to that pair */
    int gpu;               /* GPU ordinal of the local memory, -1 host */
    void *stage;           /* held by the stager (datapath/stage.c), else NULL */
    char peer_nic_path[320];
    struct tern_cslice *next, *prev; /* queue links */
} tern_cslice;

/* Request idx has its final status: count it, advance its notification,
 * wake the waiters (batch lock held). */
void tern_req_publish_locked(tern_batch *b, size_t idx);
/* Fail request idx (batch lock held) unless it already ended. */
void tern_req_fail_locked(tern_batch *b, size_t idx, tern_status st, int code,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Live (neither ended nor ending): its slices may still move data. */
int tern_req_active_locked(const tern_req *q);
/* cs leaves its NIC pair's in-flight count (ok as for tern_spread_done: 1
 * done, 0 the pair failed it, -1 taken back for another reason); no-op
 * when it has none. */
void tern_cslice_unpair(tern_cslice *cs, int ok);
/* Drop one live slice of b: releases its endpoint (never closing it here:
 * returns 1 when a worker must reap it), frees cs (lock held). */
int tern_cslice_free_locked(tern_cslice *cs);
/* Fail cs's request with why and drop cs (takes the batch lock). */
void tern_cslice_fail(tern_cslice *cs, int code, const char *why);
/* Drop cs quietly when its request already ended; returns 1 if dropped. */
int tern_cslice_drop_if_ended(tern_cslice *cs);

#endif
