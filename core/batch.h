/* core/batch.h: batch internals shared by batch.c (submit, state, wait)
 * and batch_progress.c (progress threads, completions, retries).
 * Owner: engine. */
#ifndef TERN_CORE_BATCH_H
#define TERN_CORE_BATCH_H

#include "engine.h"

/* One request and its state; guarded by the batch lock. */
typedef struct tern_req {
    tern_request r;
    tern_status status;
    uint64_t transferred;
    int error;
    char *errmsg;          /* malloc()ed on failure, NULL otherwise */
    int nslices;           /* slices of the first cut (test hook) */
    int live;              /* slices the core or a transport still holds */
    tern_status ending;    /* final status decided but not yet published:
                              it is published when live drops to 0, so an
                              ended request's memory is never touched again */
    uint64_t deadline_ms;  /* tern_now_ms() based; 0 = none */
} tern_req;

struct tern_batch {
    tern_engine *e;
    size_t cap, n;
    tern_req *reqs;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    long inflight;         /* live tern_cslice of this batch (under lock) */
};

/* A slice and the core's bookkeeping (s.core points back here). */
typedef struct tern_cslice {
    tern_slice s;
    tern_batch *b;
    size_t idx;            /* request index */
    tern_xport *x;
    tern_segment *seg;
    uint64_t seg_gen;      /* seg->gen when cut */
    uint64_t offset;       /* within the request */
    int attempt;           /* 0 first try; retry count for path choice */
    tern_ep_ref *ref;      /* endpoint held while the transport owns it */
    int local_dev;
    char peer_nic_path[320];
    struct tern_cslice *next;
} tern_cslice;

/* Choose a path and an endpoint for cs (attempt = retry count), retrying on
 * the next path on failure up to cfg->retries.  0: ready to submit; else
 * the request has been failed and cs freed. */
int tern_cslice_prepare(tern_cslice *cs);
/* Finish a slice the transport returned (status set) or could not take. */
void tern_cslice_done(tern_cslice *cs);
/* Submit n prepared slices of one endpoint; blocks until all are taken
 * (used by application threads, never by a progress thread). */
void tern_cslice_submit_all(tern_xport *x, void *ep, tern_cslice **cs, int n);
/* Fail request idx (batch lock held) unless it already ended. */
void tern_req_fail_locked(tern_batch *b, size_t idx, tern_status st, int code,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Drop one live slice of b: frees cs, decrements inflight (lock held). */
void tern_cslice_free_locked(tern_cslice *cs);

#endif
