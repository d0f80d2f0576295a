/* core/batch.c: batches of READ/WRITE requests: validation, the cut into
 * slices, per-request state, waiting and freeing.
 *
 * Cut: slices of the transport's slice size; a remainder up to slice +
 * 16 KiB stays one slice (tail rule); a slice never crosses a buffer
 * boundary on either side (local buffers from our registrations, remote
 * ones from the peer's descriptor), so a request may span adjacent
 * registered buffers.  A remote range the peer's descriptor does not cover
 * triggers one refetch of the descriptor (it may be stale), then INVALID.
 * What happens to slices after the cut is in batch_progress.c. */
#include "batch.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

uint64_t tern_slice_next(uint64_t remaining, uint64_t slice_size)
{
    if (!slice_size || remaining <= slice_size + TERN_TAIL_SLACK)
        return remaining;
    return slice_size;
}

TERN_EXPORT tern_batch *tern_batch_alloc(tern_engine *e, size_t capacity)
{
    if (!e)
        return NULL;
    if (capacity == 0 || capacity > (1u << 24)) {
        tern_engine_fail(e, TERN_ERR_INVAL, "batch_alloc: capacity %zu, expected 1..%u",
                         capacity, 1u << 24);
        return NULL;
    }
    tern_batch *b = calloc(1, sizeof *b);
    if (b)
        b->reqs = calloc(capacity, sizeof *b->reqs);
    if (!b || !b->reqs) {
        free(b);
        tern_engine_fail(e, TERN_ERR_NOMEM, "batch_alloc: out of memory for %zu requests",
                         capacity);
        return NULL;
    }
    b->e = e;
    b->cap = capacity;
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    return b;
}

/* ---- validation ------------------------------------------------------------------ */

/* Bytes of [a, a+len) covered by adjacent buffers of d, from a. */
static uint64_t remote_covered(const tern_segment_desc *d, uint64_t a, uint64_t len)
{
    uint64_t done = 0;
    while (d && done < len) {
        const tern_buffer_desc *b = tern_segment_find_buffer(d, a + done, 1);
        if (!b)
            break;
        done += b->addr + b->length - (a + done);
    }
    return done < len ? done : len;
}

static int remote_ok(tern_segment *s, const tern_request *r)
{
    pthread_rwlock_rdlock(&s->lock);
    int ok = s->desc && remote_covered(s->desc, r->remote, r->length) == r->length;
    pthread_rwlock_unlock(&s->lock);
    return ok;
}

/* 0 when r can run; else a code with the reason in msg. */
static int validate(tern_batch *b, const tern_request *r, tern_segment **seg, char *msg,
                    size_t msglen)
{
    tern_engine *e = b->e;
    if (r->opcode != TERN_READ && r->opcode != TERN_WRITE)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "opcode %d is neither READ nor WRITE",
                         (int)r->opcode);
    if (r->length == 0 || !r->local)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "%s", r->length ? "local address is NULL"
                                                                      : "length is 0");
    uint64_t la = (uintptr_t)r->local;
    if (r->length > UINT64_MAX - la || r->length > UINT64_MAX - r->remote)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "address + length %llu overflows",
                         (unsigned long long)r->length);
    if (!(*seg = tern_engine_segment(e, r->segment)))
        return tern_errf(msg, msglen, TERN_ERR_NOT_FOUND, "segment %d is not open",
                         (int)r->segment);
    pthread_rwlock_rdlock(&e->memlock);
    uint64_t cov = tern_engine_covered(e, la, r->length);
    pthread_rwlock_unlock(&e->memlock);
    if (cov < r->length)
        return tern_errf(msg, msglen, TERN_ERR_RANGE,
                         "local range [%p, +%llu) is not registered memory (first unregistered "
                         "byte at 0x%llx)", r->local, (unsigned long long)r->length,
                         (unsigned long long)(la + cov));
    if (remote_ok(*seg, r))
        return 0;
    char why[512] = ""; /* stale descriptor?  refetch once */
    if (tern_segment_refetch(e, *seg, why, sizeof why) == 0 && remote_ok(*seg, r))
        return 0;
    return tern_errf(msg, msglen, TERN_ERR_RANGE,
                     "remote address 0x%llx (+%llu bytes) is not inside the registered buffers "
                     "of segment %s (descriptor refetched%s%s)",
                     (unsigned long long)r->remote, (unsigned long long)r->length,
                     (*seg)->name, why[0] ? ": " : "", why);
}

/* ---- the cut ----------------------------------------------------------------------- */

static tern_cslice *cslice_new(tern_batch *b, size_t idx, tern_segment *seg, uint64_t off,
                               uint64_t len)
{
    tern_cslice *cs = calloc(1, sizeof *cs);
    if (!cs)
        return NULL;
    const tern_request *r = &b->reqs[idx].r;
    cs->s.struct_size = sizeof cs->s;
    cs->s.opcode = r->opcode;
    cs->s.local = (char *)r->local + off;
    cs->s.remote = r->remote + off;
    cs->s.length = len;
    cs->s.core = cs;
    cs->b = b;
    cs->idx = idx;
    cs->seg = seg;
    cs->seg_gen = seg->gen; /* seg's read lock is held by cut() */
    cs->x = &b->e->xports[seg->xport];
    cs->offset = off;
    cs->local_dev = -1;
    return cs;
}

/* Length of the slice at offset off: tail rule, then both buffer ends. */
static uint64_t slice_len(tern_batch *b, const tern_request *r, tern_segment *seg,
                          uint64_t off, uint64_t slice_size)
{
    uint64_t n = tern_slice_next(r->length - off, slice_size);
    const tern_membuf *lb = tern_engine_find_buf(b->e, (uintptr_t)r->local + off);
    const tern_buffer_desc *rb = tern_segment_find_buffer(seg->desc, r->remote + off, 1);
    if (!lb || !rb)
        return 0;
    uint64_t lrem = lb->addr + lb->len - ((uintptr_t)r->local + off);
    uint64_t rrem = rb->addr + rb->length - (r->remote + off);
    n = n < lrem ? n : lrem;
    return n < rrem ? n : rrem;
}

/* Appends the request's slices to *list; returns the count or an error. */
static int cut(tern_batch *b, size_t idx, tern_segment *seg, tern_cslice ***list,
               size_t *nlist, size_t *caplist)
{
    const tern_request *r = &b->reqs[idx].r;
    int count = 0;
    pthread_rwlock_rdlock(&seg->lock);
    pthread_rwlock_rdlock(&b->e->memlock);
    uint64_t ss = seg->desc ? b->e->xports[seg->xport].slice_size : 0;
    for (uint64_t off = 0; off < r->length && count >= 0;) {
        uint64_t n = seg->desc ? slice_len(b, r, seg, off, ss) : 0;
        if (*nlist == *caplist) {
            size_t cap = *caplist ? *caplist * 2 : 64;
            tern_cslice **nl = realloc(*list, cap * sizeof *nl);
            if (!nl) {
                count = TERN_ERR_NOMEM;
                break;
            }
            *list = nl;
            *caplist = cap;
        }
        tern_cslice *cs = n ? cslice_new(b, idx, seg, off, n) : NULL;
        if (!cs) {
            count = n ? TERN_ERR_NOMEM : TERN_ERR_RANGE; /* unregistered meanwhile */
            break;
        }
        (*list)[(*nlist)++] = cs;
        count++;
        off += n;
    }
    pthread_rwlock_unlock(&b->e->memlock);
    pthread_rwlock_unlock(&seg->lock);
    return count;
}

/* ---- submit ------------------------------------------------------------------------ */

static void req_start(tern_batch *b, size_t idx, tern_cslice ***list, size_t *nlist,
                      size_t *cap)
{
    tern_req *q = &b->reqs[idx];
    tern_segment *seg = NULL;
    char msg[512] = "";
    int rc = validate(b, &q->r, &seg, msg, sizeof msg);
    size_t first = *nlist;
    int n = rc ? rc : cut(b, idx, seg, list, nlist, cap);
    pthread_mutex_lock(&b->lock);
    if (n < 0) {
        for (size_t i = first; i < *nlist; i++)
            free((*list)[i]);
        *nlist = first;
        tern_req_fail_locked(b, idx, TERN_INVALID, n, "%s",
                             rc ? msg : "registered memory changed during the cut");
    } else {
        q->status = TERN_PENDING;
        q->nslices = n;
        q->live = n;
        q->deadline_ms = q->r.timeout_ms ? tern_now_ms() + q->r.timeout_ms : 0;
        b->inflight += n;
    }
    pthread_mutex_unlock(&b->lock);
}

static int by_endpoint(const void *a, const void *b)
{
    const tern_cslice *x = *(tern_cslice *const *)a, *y = *(tern_cslice *const *)b;
    if (x->x != y->x)
        return x->x < y->x ? -1 : 1;
    if (x->s.ep != y->s.ep)
        return (uintptr_t)x->s.ep < (uintptr_t)y->s.ep ? -1 : 1;
    return 0;
}

/* Path and endpoint per slice, then one submit call per endpoint group. */
static void dispatch(tern_cslice **list, size_t n)
{
    size_t ready = 0;
    for (size_t i = 0; i < n; i++)
        if (tern_cslice_prepare(list[i]) == 0)
            list[ready++] = list[i];
    if (ready > 1)
        qsort(list, ready, sizeof *list, by_endpoint);
    for (size_t i = 0; i < ready;) {
        size_t j = i + 1;
        while (j < ready && list[j]->x == list[i]->x && list[j]->s.ep == list[i]->s.ep)
            j++;
        tern_cslice_submit_all(list[i]->x, list[i]->s.ep, &list[i], (int)(j - i));
        i = j;
    }
}

TERN_EXPORT int tern_batch_submit(tern_batch *b, const tern_request *reqs, size_t n)
{
    if (!b)
        return TERN_ERR_INVAL;
    if (!reqs && n)
        return tern_engine_fail(b->e, TERN_ERR_INVAL, "batch_submit: reqs is NULL");
    pthread_mutex_lock(&b->lock);
    if (n > b->cap - b->n) {
        size_t have = b->n;
        pthread_mutex_unlock(&b->lock);
        return tern_engine_fail(b->e, TERN_ERR_INVAL,
                                "batch_submit: batch full (capacity %zu, %zu submitted, %zu more)",
                                b->cap, have, n);
    }
    size_t base = b->n;
    for (size_t i = 0; i < n; i++) {
        memset(&b->reqs[base + i], 0, sizeof b->reqs[0]);
        b->reqs[base + i].r = reqs[i];
        b->reqs[base + i].status = TERN_WAITING;
    }
    b->n += n;
    pthread_mutex_unlock(&b->lock);
    tern_cslice **list = NULL;
    size_t nlist = 0, cap = 0;
    for (size_t i = 0; i < n; i++)
        req_start(b, base + i, &list, &nlist, &cap);
    dispatch(list, nlist);
    free(list);
    return (int)n;
}

/* ---- state, wait, free ------------------------------------------------------------ */

static void timeouts_locked(tern_batch *b)
{
    uint64_t now = tern_now_ms();
    for (size_t i = 0; i < b->n; i++) {
        tern_req *q = &b->reqs[i];
        if (q->status == TERN_PENDING && !q->ending && q->deadline_ms && now >= q->deadline_ms)
            tern_req_fail_locked(b, i, TERN_TIMEOUT, TERN_ERR_TIMEOUT,
                                 "request timed out after %u ms (%llu of %llu bytes done)",
                                 q->r.timeout_ms, (unsigned long long)q->transferred,
                                 (unsigned long long)q->r.length);
    }
}

TERN_EXPORT int tern_batch_state(tern_batch *b, size_t index, tern_request_state *out)
{
    if (!b || !out)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    if (index >= b->n) {
        size_t have = b->n;
        pthread_mutex_unlock(&b->lock);
        return tern_engine_fail(b->e, TERN_ERR_INVAL, "batch_state: index %zu, %zu submitted",
                                index, have);
    }
    timeouts_locked(b);
    out->status = b->reqs[index].status;
    out->transferred = b->reqs[index].transferred;
    out->error = b->reqs[index].error;
    pthread_mutex_unlock(&b->lock);
    return 0;
}

/* The earliest deadline among pending requests and `until` (0 = none). */
static uint64_t next_wake_locked(tern_batch *b, uint64_t until, int *pending)
{
    *pending = 0;
    for (size_t i = 0; i < b->n; i++) {
        tern_req *q = &b->reqs[i];
        if (q->status != TERN_PENDING && q->status != TERN_WAITING)
            continue;
        *pending = 1;
        if (q->deadline_ms && (!until || q->deadline_ms < until))
            until = q->deadline_ms;
    }
    return until;
}

static void wait_until_locked(tern_batch *b, uint64_t ms)
{
    uint64_t now = tern_now_ms();
    uint64_t step = ms && ms > now ? ms - now : 100;
    step = step > 100 ? 100 : step; /* re-check deadlines at least every 100 ms */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(step / 1000);
    ts.tv_nsec += (long)(step % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&b->cond, &b->lock, &ts);
}

static int result_locked(tern_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const tern_req *q = &b->reqs[i];
        if (q->status == TERN_COMPLETED)
            continue;
        tern_engine_fail(b->e, q->error ? q->error : TERN_ERR_INVAL, "request %zu: %s", i,
                         q->errmsg ? q->errmsg : "failed");
        return q->error ? q->error : TERN_ERR_INVAL;
    }
    return 0;
}

TERN_EXPORT int tern_batch_wait(tern_batch *b, int timeout_ms)
{
    if (!b)
        return TERN_ERR_INVAL;
    uint64_t until = timeout_ms < 0 ? 0 : tern_now_ms() + (uint64_t)timeout_ms;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        timeouts_locked(b);
        int pending;
        uint64_t wake = next_wake_locked(b, until, &pending);
        if (!pending)
            break;
        if (until && tern_now_ms() >= until) {
            pthread_mutex_unlock(&b->lock);
            return tern_engine_fail(b->e, TERN_ERR_TIMEOUT, "batch_wait: %d ms passed",
                                    timeout_ms);
        }
        wait_until_locked(b, wake);
    }
    int rc = result_locked(b);
    pthread_mutex_unlock(&b->lock);
    return rc;
}

TERN_EXPORT const char *tern_batch_error(tern_batch *b, size_t index)
{
    if (!b)
        return "";
    pthread_mutex_lock(&b->lock); /* set once; lives as long as the batch */
    const char *m = index < b->n && b->reqs[index].errmsg ? b->reqs[index].errmsg : "";
    pthread_mutex_unlock(&b->lock);
    return m;
}

TERN_EXPORT size_t tern_batch_size(const tern_batch *b) { return b ? b->n : 0; }

TERN_EXPORT int tern_batch_free(tern_batch *b)
{
    if (!b)
        return 0;
    pthread_mutex_lock(&b->lock);
    long inflight = b->inflight;
    pthread_mutex_unlock(&b->lock);
    if (inflight > 0)
        return tern_engine_fail(b->e, TERN_ERR_BUSY,
                                "batch_free: %ld slice(s) still in flight; wait first", inflight);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    for (size_t i = 0; i < b->n; i++)
        free(b->reqs[i].errmsg);
    free(b->reqs);
    free(b);
    return 0;
}

int tern_batch_slice_count(tern_batch *b, size_t index)
{
    if (!b || index >= b->n)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&b->lock);
    int n = b->reqs[index].nslices;
    pthread_mutex_unlock(&b->lock);
    return n;
}
