/* transports/shm/shm_pool.c: the worker threads that copy.
 *
 * One queue per context.  A queued slice is cut into chunks of chunk_size
 * bytes as workers take them, so one large request keeps every worker busy
 * and small ones cost one chunk each; one with others queued behind it is
 * taken in larger pieces (worker_main).  The worker that finishes a slice's
 * last chunk hands the slice back through the host service complete(),
 * holding no lock of ours (the core may resubmit it from inside). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm_internal.h"

#define WHOLE_CHUNKS 16 /* the largest piece of a job with others behind it */

struct shm_job {
    struct shm_job *next;
    tern_slice *s;
    shm_ep *ep;
    uint64_t next_off;     /* first byte no worker took yet (queue lock) */
    atomic_uint_fast64_t left; /* bytes not yet finished */
    atomic_int status;     /* first error of any chunk */
};

struct shm_pool {
    shm_ctx *ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    shm_job *head, *tail;
    int stop;
    int n;
    pthread_t threads[];
};

static void job_finish(shm_pool *p, shm_job *j)
{
    tern_slice *s = j->s;
    shm_ep *ep = j->ep;
    int st = atomic_load(&j->status);
    s->status = st;
    s->transferred = st == 0 ? s->length : 0;
    p->ctx->host->free(j);
    shm_ep_unref(ep); /* may free it: ep_close already returned */
    p->ctx->host->complete(p->ctx->host->host, s);
}

/* The first failing chunk writes the slice's message. */
static void job_fail(shm_job *j, int code, const char *msg)
{
    int zero = 0;
    if (atomic_compare_exchange_strong(&j->status, &zero, code))
        snprintf(j->s->errmsg, sizeof j->s->errmsg, "%s", msg);
}

static void *worker_main(void *arg)
{
    shm_pool *p = arg;
    uint64_t chunk = p->ctx->chunk;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && !p->head)
            pthread_cond_wait(&p->cond, &p->lock);
        if (!p->head) /* stopping and drained */
            break;
        shm_job *j = p->head;
        uint64_t off = j->next_off;
        /* A job with others queued behind it is taken in pieces of up to
         * WHOLE_CHUNKS chunks: the other workers have work of their own,
         * and each process_vm_* call has a fixed cost (the peer's mm
         * looked up and locked, its access checked) that larger calls
         * spread over more pages.  A job alone is cut in chunk_size
         * pieces, so one large request keeps every worker busy. */
        uint64_t take = j->next ? chunk * WHOLE_CHUNKS : chunk;
        uint64_t len = j->s->length - off < take ? j->s->length - off : take;
        j->next_off += len;
        if (j->next_off >= j->s->length) {
            p->head = j->next;
            if (!p->head)
                p->tail = NULL;
        }
        if (p->head)
            pthread_cond_signal(&p->cond); /* more work: wake another worker */
        pthread_mutex_unlock(&p->lock);

        char msg[128];
        int rc;
        if (atomic_load(&j->status) != 0)
            rc = 0; /* the slice already failed: do not copy the rest */
        else if (p->stop)
            rc = tern_kit_errf(msg, sizeof msg, TERN_ERR_CLOSED, "shm: transport shutting down");
        else
            rc = shm_copy_chunk(j->ep, j->s, off, len, msg, sizeof msg);
        if (rc)
            job_fail(j, rc, msg);
        if (atomic_fetch_sub(&j->left, len) == len)
            job_finish(p, j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int shm_pool_start(shm_ctx *ctx, int workers, shm_pool **out, char *err, size_t errlen)
{
    shm_pool *p = calloc(1, sizeof *p + (size_t)workers * sizeof(pthread_t));
    if (!p)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "shm: out of memory for the worker pool");
    p->ctx = ctx;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    for (; p->n < workers; p->n++)
        if (pthread_create(&p->threads[p->n], NULL, worker_main, p) != 0) {
            int rc = tern_kit_errf(err, errlen, TERN_ERR_IO,
                                   "shm: cannot start worker thread %d of %d", p->n + 1, workers);
            shm_pool_stop(p);
            return rc;
        }
    *out = p;
    return 0;
}

/* Workers drain the queue (failing what is left) and exit. */
void shm_pool_stop(shm_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

shm_job *shm_job_new(shm_pool *p, shm_ep *ep, tern_slice *s)
{
    shm_job *j = p->ctx->host->alloc(sizeof *j);
    if (!j)
        return NULL;
    memset(j, 0, sizeof *j);
    j->s = s;
    j->ep = ep;
    atomic_init(&j->left, s->length);
    atomic_init(&j->status, 0);
    atomic_fetch_add(&ep->refs, 1);
    return j;
}

void shm_job_link(shm_job *j, shm_job *next)
{
    j->next = next;
}

/* One lock and one wake-up per submit, not per slice. */
void shm_pool_push(shm_pool *p, shm_job *first, shm_job *last, int n)
{
    if (!first)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->tail)
        p->tail->next = first;
    else
        p->head = first;
    p->tail = last;
    if (n > 1 || first->s->length > p->ctx->chunk)
        pthread_cond_broadcast(&p->cond);
    else
        pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}
