/* core/datapath/stage.c: the stager (see stage.h and docs/gpu.md). */
#include "datapath/stage.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/cuda.h"
#include "base/log.h"
#include "base/util.h"

#define STAGE_MAX_GPUS 64
#define STAGE_TAIL (16u << 10) /* the cut's tail rule: a slice may be this much longer */
#define STAGE_INFLIGHT 256     /* device copies started ahead of the one waited on */

typedef struct stage_buf {
    void *host;
    int gpu;
    void *mr[TERN_DESC_MAX_TRANSPORTS];
    tern_mr_keys keys[TERN_DESC_MAX_TRANSPORTS];
    struct stage_buf *next;
} stage_buf;

/* What the stager keeps of a slice while it holds a buffer for it. */
typedef struct stage_rec {
    stage_buf *buf;
    void *gpu_local;       /* the slice's own local address (device memory) */
    uint64_t gpu_lkey;
} stage_rec;

typedef struct stage_gpu {
    tern_cuda_stream *d2h, *h2d;
    stage_buf *free;
    int nalloc;
} stage_gpu;

typedef struct stage_job {
    tern_cslice *cs;
    int in;                /* 1: bytes back to the GPU; 0: out to the transport */
    void *ev;              /* the device copy's event, NULL when none */
    tern_cuda_stream *stream;
    int rc;
    char err[128];
} stage_job;

struct tern_stage {
    tern_engine *e;
    void (*submit)(tern_cslice *);
    void (*finish)(tern_cslice *);
    pthread_mutex_t lock;
    pthread_cond_t cond;
    tern_cslice *out, *out_tail; /* routed slices waiting for a buffer */
    tern_cslice *in, *in_tail;   /* READ slices back, waiting for the copy to the GPU */
    stage_gpu gpu[STAGE_MAX_GPUS];
    size_t bufsize;
    int maxbufs;
    int started, stop;
    pthread_t thread;
};

static stage_rec *rec_of(tern_cslice *cs) { return cs->stage; }

/* ---- buffers ------------------------------------------------------------------------- */

static stage_buf *buf_new(struct tern_stage *st, int gpu, char *err, size_t errlen)
{
    stage_buf *b = calloc(1, sizeof *b);
    if (!b) {
        tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->gpu = gpu;
    if (tern_cuda_host_alloc(st->e->cuda, gpu, st->bufsize, &b->host, err, errlen) != 0) {
        free(b);
        return NULL;
    }
    /* Every transport sees the buffer as ordinary registered host memory
     * (an RDMA-style transport needs its local key). */
    for (size_t t = 0; t < st->e->nxports; t++) {
        tern_xport *x = &st->e->xports[t];
        char msg[256] = "";
        if (x->ops->mr_register(x->pl->ctx, b->host, st->bufsize, &b->keys[t], &b->mr[t], msg,
                                sizeof msg) != 0)
            tern_log(&st->e->log, TERN_LOG_WARN, "staging buffer for GPU %d: %s: %s", gpu,
                     x->pl->name, msg);
    }
    return b;
}

static void buf_free(struct tern_stage *st, stage_buf *b)
{
    for (size_t t = 0; t < st->e->nxports; t++)
        if (b->mr[t])
            st->e->xports[t].ops->mr_deregister(st->e->xports[t].pl->ctx, b->mr[t]);
    tern_cuda_host_free(st->e->cuda, b->host);
    free(b);
}

/* A buffer of cs's GPU, or NULL when the pool is at its bound (lock held;
 * a new buffer is made with the lock released: *grow says so). */
static stage_buf *buf_take_locked(struct tern_stage *st, int gpu, int *grow)
{
    stage_gpu *g = &st->gpu[gpu];
    *grow = 0;
    if (g->free) {
        stage_buf *b = g->free;
        g->free = b->next;
        return b;
    }
    if (g->nalloc < st->maxbufs) {
        g->nalloc++;
        *grow = 1;
    }
    return NULL;
}

static void buf_put(struct tern_stage *st, stage_buf *b)
{
    pthread_mutex_lock(&st->lock);
    b->next = st->gpu[b->gpu].free;
    st->gpu[b->gpu].free = b;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

/* Give the slice its own address back and the buffer to the pool. */
static void rec_release(struct tern_stage *st, tern_cslice *cs)
{
    stage_rec *r = rec_of(cs);
    cs->s.local = r->gpu_local;
    cs->s.lkey = r->gpu_lkey;
    cs->stage = NULL;
    stage_buf *b = r->buf;
    free(r);
    if (b)
        buf_put(st, b);
}

/* ---- the thread ------------------------------------------------------------------------ */

static int gpu_streams(struct tern_stage *st, int gpu, char *err, size_t errlen)
{
    stage_gpu *g = &st->gpu[gpu];
    int rc = 0;
    if (!g->d2h)
        rc = tern_cuda_stream_create(st->e->cuda, gpu, &g->d2h, err, errlen);
    if (!rc && !g->h2d)
        rc = tern_cuda_stream_create(st->e->cuda, gpu, &g->h2d, err, errlen);
    return rc;
}

/* Start the device copy of a job (none for a READ going out). */
static void job_start(struct tern_stage *st, stage_job *j)
{
    tern_cslice *cs = j->cs;
    stage_rec *r = rec_of(cs);
    j->rc = gpu_streams(st, cs->gpu, j->err, sizeof j->err);
    if (j->rc)
        return;
    if (j->in) {
        j->stream = st->gpu[cs->gpu].h2d;
        j->rc = tern_cuda_copy_async(j->stream, 1, r->gpu_local, r->buf->host, cs->s.length,
                                     &j->ev, j->err, sizeof j->err);
    } else if (cs->s.opcode == TERN_WRITE) {
        j->stream = st->gpu[cs->gpu].d2h;
        j->rc = tern_cuda_copy_async(j->stream, 0, r->buf->host, r->gpu_local, cs->s.length,
                                     &j->ev, j->err, sizeof j->err);
    }
}

/* The job's copy is done (or failed): hand the slice on. */
static void job_end(struct tern_stage *st, stage_job *j)
{
    tern_cslice *cs = j->cs;
    if (!j->rc && j->ev)
        j->rc = tern_cuda_event_wait(j->stream, j->ev, j->err, sizeof j->err);
    if (j->rc) {
        char why[256];
        snprintf(why, sizeof why, "GPU %d: staging %s: %s", cs->gpu,
                 j->in ? "the copy to the GPU failed" : "the copy from the GPU failed", j->err);
        rec_release(st, cs);
        tern_cslice_fail(cs, TERN_ERR_DEVICE, why);
        return;
    }
    if (j->in) {
        rec_release(st, cs);
        st->finish(cs);
        return;
    }
    stage_rec *r = rec_of(cs);
    cs->s.local = r->buf->host;
    cs->s.lkey = cs->local_dev >= 0 ? r->buf->keys[cs->x->index].lkey[cs->local_dev] : 0;
    st->submit(cs);
}

static tern_cslice *list_pop(tern_cslice **head, tern_cslice **tail)
{
    tern_cslice *cs = *head;
    if (cs) {
        *head = cs->next;
        if (!*head)
            *tail = NULL;
        cs->next = NULL;
    }
    return cs;
}

static void list_push(tern_cslice **head, tern_cslice **tail, tern_cslice *cs)
{
    cs->next = NULL;
    if (*tail)
        (*tail)->next = cs;
    else
        *head = cs;
    *tail = cs;
}

/* Take what can start now (lock held) into the ring: every slice coming
 * back, and slices going out while their GPU's pool has a buffer.  Each
 * taken job is marked not started (rc 1).  Returns the count taken;
 * *grow_gpu >= 0 asks for a new buffer of that GPU. */
static int take_locked(struct tern_stage *st, stage_job *ring, int head, int count,
                       int *grow_gpu)
{
    int n = 0;
    *grow_gpu = -1;
    while (count + n < STAGE_INFLIGHT && (st->in || st->out)) {
        tern_cslice *cs = NULL;
        int in = st->in != NULL;
        if (in) {
            cs = list_pop(&st->in, &st->in_tail);
        } else {
            int grow = 0;
            stage_buf *b = buf_take_locked(st, st->out->gpu, &grow);
            if (!b) {
                if (grow)
                    *grow_gpu = st->out->gpu;
                break;
            }
            cs = list_pop(&st->out, &st->out_tail);
            rec_of(cs)->buf = b;
        }
        stage_job *j = &ring[(head + count + n) % STAGE_INFLIGHT];
        memset(j, 0, sizeof *j);
        j->cs = cs;
        j->in = in;
        j->rc = 1;
        n++;
    }
    return n;
}

static void grow(struct tern_stage *st, int gpu)
{
    char err[256] = "";
    stage_buf *b = buf_new(st, gpu, err, sizeof err);
    if (b) {
        buf_put(st, b);
        return;
    }
    /* No buffer can be made: when the GPU has none at all, the slices
     * waiting for one fail; else they wait for one to come back. */
    tern_log(&st->e->log, TERN_LOG_ERROR, "staging for GPU %d: %s", gpu, err);
    pthread_mutex_lock(&st->lock);
    st->gpu[gpu].nalloc--;
    tern_cslice *keep = NULL, *keep_tail = NULL, *fail = NULL, *fail_tail = NULL, *cs;
    while ((cs = list_pop(&st->out, &st->out_tail)) != NULL) {
        if (cs->gpu == gpu && st->gpu[gpu].nalloc == 0)
            list_push(&fail, &fail_tail, cs);
        else
            list_push(&keep, &keep_tail, cs);
    }
    st->out = keep;
    st->out_tail = keep_tail;
    pthread_mutex_unlock(&st->lock);
    while ((cs = list_pop(&fail, &fail_tail)) != NULL) {
        rec_release(st, cs);
        tern_cslice_fail(cs, TERN_ERR_NOMEM, err);
    }
}

/* Engine going away: what is queued or in flight fails. */
static void stage_drain(struct tern_stage *st, stage_job *ring, int head, int count)
{
    pthread_mutex_lock(&st->lock);
    tern_cslice *out = st->out, *in = st->in;
    st->out = st->out_tail = st->in = st->in_tail = NULL;
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < count; i++) {
        stage_job *j = &ring[(head + i) % STAGE_INFLIGHT];
        if (j->rc == 0 && j->ev)
            tern_cuda_event_wait(j->stream, j->ev, NULL, 0);
        rec_release(st, j->cs);
        tern_cslice_fail(j->cs, TERN_ERR_CLOSED, "engine destroyed");
    }
    for (tern_cslice **l = &out; l; l = l == &out ? &in : NULL) {
        tern_cslice *tail = NULL, *cs;
        while ((cs = list_pop(l, &tail)) != NULL) {
            rec_release(st, cs);
            tern_cslice_fail(cs, TERN_ERR_CLOSED, "engine destroyed");
        }
    }
}

static void *stage_main(void *arg)
{
    struct tern_stage *st = arg;
    static_assert(STAGE_INFLIGHT > 0, "ring");
    stage_job *ring = calloc(STAGE_INFLIGHT, sizeof *ring);
    int head = 0, count = 0, stop = 0;
    while (ring && !stop) {
        int g = -1, n = 0;
        pthread_mutex_lock(&st->lock);
        /* Sleep only when nothing is in flight and nothing can start. */
        while (!(stop = st->stop)) {
            n = take_locked(st, ring, head, count, &g);
            if (count + n || g >= 0)
                break;
            pthread_cond_wait(&st->cond, &st->lock);
        }
        pthread_mutex_unlock(&st->lock);
        for (int i = count; i < count + n; i++) { /* start the new copies */
            stage_job *j = &ring[(head + i) % STAGE_INFLIGHT];
            j->rc = 0;
            job_start(st, j);
        }
        count += n;
        if (stop)
            break;
        if (g >= 0)
            grow(st, g);
        if (count) { /* the oldest copy: wait for it, hand its slice on */
            stage_job j = ring[head];
            head = (head + 1) % STAGE_INFLIGHT;
            count--;
            job_end(st, &j);
        }
    }
    stage_drain(st, ring, head, ring ? count : 0);
    free(ring);
    return NULL;
}

/* ---- the interface ------------------------------------------------------------------------ */

struct tern_stage *tern_stage_create(tern_engine *e, void (*submit)(tern_cslice *),
                                     void (*finish)(tern_cslice *))
{
    struct tern_stage *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->e = e;
    st->submit = submit;
    st->finish = finish;
    uint64_t max = 0;
    for (size_t t = 0; t < e->nxports; t++)
        if (e->xports[t].slice_size > max)
            max = e->xports[t].slice_size;
    st->bufsize = (size_t)max + STAGE_TAIL;
    st->maxbufs = e->cfg->gpu_staging_buffers > 0 ? e->cfg->gpu_staging_buffers : 16;
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cond, NULL);
    return st;
}

int tern_stage_needed(const tern_cslice *cs)
{
    return cs->gpu >= 0 && !(cs->x->ops->caps & TERN_CAP_GPU_DIRECT);
}

void tern_stage_out(struct tern_stage *st, tern_cslice *cs)
{
    const char *why = NULL;
    if (cs->gpu >= STAGE_MAX_GPUS)
        why = "GPU ordinal beyond the stager's table";
    else if (cs->s.length > st->bufsize)
        why = "slice longer than a staging buffer";
    stage_rec *r = why ? NULL : calloc(1, sizeof *r);
    if (!r) {
        tern_cslice_fail(cs, why ? TERN_ERR_INVAL : TERN_ERR_NOMEM, why ? why : "out of memory");
        return;
    }
    r->gpu_local = cs->s.local;
    r->gpu_lkey = cs->s.lkey;
    cs->stage = r;
    pthread_mutex_lock(&st->lock);
    if (!st->started && !st->stop) {
        st->started = pthread_create(&st->thread, NULL, stage_main, st) == 0;
        if (!st->started)
            why = "cannot start the staging thread";
    }
    if (st->stop)
        why = "engine destroyed";
    if (!why) {
        list_push(&st->out, &st->out_tail, cs);
        pthread_cond_broadcast(&st->cond);
    }
    pthread_mutex_unlock(&st->lock);
    if (why) {
        rec_release(st, cs);
        tern_cslice_fail(cs, TERN_ERR_CLOSED, why);
    }
}

int tern_stage_back(struct tern_stage *st, tern_cslice *cs)
{
    if (!cs->stage)
        return 0;
    if (cs->s.status == 0 && cs->s.opcode == TERN_READ) {
        pthread_mutex_lock(&st->lock);
        int ok = !st->stop;
        if (ok) {
            list_push(&st->in, &st->in_tail, cs);
            pthread_cond_broadcast(&st->cond);
        }
        pthread_mutex_unlock(&st->lock);
        if (ok)
            return 1;
        cs->s.status = TERN_ERR_CLOSED;
        snprintf(cs->s.errmsg, sizeof cs->s.errmsg, "engine destroyed before the copy to the GPU");
    }
    rec_release(st, cs);
    return 0;
}

int tern_stage_allocated(struct tern_stage *st, int gpu)
{
    if (!st || gpu < 0 || gpu >= STAGE_MAX_GPUS)
        return 0;
    pthread_mutex_lock(&st->lock);
    int n = st->gpu[gpu].nalloc;
    pthread_mutex_unlock(&st->lock);
    return n;
}

void tern_stage_stop(struct tern_stage *st)
{
    if (!st)
        return;
    /* the thread ends the copies in flight and the queued slices first */
    tern_thread_stop(&st->thread, &st->lock, &st->cond, &st->stop, &st->started);
    st->started = 0;
}

void tern_stage_free(struct tern_stage *st)
{
    if (!st)
        return;
    for (int g = 0; g < STAGE_MAX_GPUS; g++) {
        stage_buf *b;
        while ((b = st->gpu[g].free) != NULL) {
            st->gpu[g].free = b->next;
            buf_free(st, b);
        }
        tern_cuda_stream_destroy(st->gpu[g].d2h);
        tern_cuda_stream_destroy(st->gpu[g].h2d);
    }
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    free(st);
}
