/* core/base/gate.c: the engine's gate for blocked calls (see gate.h). */
#include "base/gate.h"

#include "tern/errors.h"

void tern_gate_init(tern_gate *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->left, NULL);
    atomic_store(&g->closed, 0);
    g->inside = 0;
    g->waiters = NULL;
}

void tern_gate_fini(tern_gate *g)
{
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->left);
}

int tern_gate_enter(tern_gate *g, tern_gate_waiter *w, pthread_mutex_t *lock,
                    pthread_cond_t *cond)
{
    pthread_mutex_lock(&g->lock);
    if (atomic_load(&g->closed)) {
        pthread_mutex_unlock(&g->lock);
        return TERN_ERR_CLOSED;
    }
    g->inside++;
    w->lock = lock;
    w->cond = cond;
    w->prev = NULL;
    w->next = NULL;
    if (cond) {
        w->next = g->waiters;
        if (g->waiters)
            g->waiters->prev = w;
        g->waiters = w;
    }
    pthread_mutex_unlock(&g->lock);
    return 0;
}

void tern_gate_leave(tern_gate *g, tern_gate_waiter *w)
{
    pthread_mutex_lock(&g->lock);
    if (w->cond) {
        if (w->prev)
            w->prev->next = w->next;
        else
            g->waiters = w->next;
        if (w->next)
            w->next->prev = w->prev;
    }
    if (--g->inside == 0 && atomic_load(&g->closed))
        pthread_cond_broadcast(&g->left);
    pthread_mutex_unlock(&g->lock);
}

int tern_gate_closed(tern_gate *g) { return atomic_load(&g->closed); }

void tern_gate_close(tern_gate *g)
{
    pthread_mutex_lock(&g->lock);
    atomic_store(&g->closed, 1);
    /* Under each waiter's mutex: a waiter that checked `closed` before we
     * set it is asleep on its condition by the time we get the mutex. */
    for (tern_gate_waiter *w = g->waiters; w; w = w->next) {
        pthread_mutex_lock(w->lock);
        pthread_cond_broadcast(w->cond);
        pthread_mutex_unlock(w->lock);
    }
    while (g->inside > 0)
        pthread_cond_wait(&g->left, &g->lock);
    pthread_mutex_unlock(&g->lock);
}
