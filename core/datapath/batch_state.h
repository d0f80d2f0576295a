/* core/datapath/batch_state.h: a batch, its requests and the notifications
 * riding on them, and what the completion path changes in them
 * (batch_state.c): the ground floor of the data path (request.h builds the
 * slices on it).
 *
 * Lock: the batch lock guards its requests' state. */
#ifndef TERN_CORE_DATAPATH_BATCH_STATE_H
#define TERN_CORE_DATAPATH_BATCH_STATE_H

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

#endif
