/* core/gate.h: closing an engine while other threads are blocked in it.
 *
 * Every call that can block for long (tern_notify_recv_wait,
 * tern_batch_wait, tern_transfer_sync) enters the engine's gate with the
 * mutex and condition variable it sleeps on, and leaves it before it
 * returns.  tern_gate_close marks the gate closed, broadcasts every
 * registered condition (under its mutex, so no wake-up is lost between a
 * waiter's check and its sleep) and returns once no thread is inside: a
 * woken call sees tern_gate_closed() and returns TERN_ERR_CLOSED.  A call
 * that was not blocked sees nothing.
 *
 * Lock order: the gate's lock, then a waiter's mutex.  A waiter takes its
 * mutex only between enter and leave, never the gate's lock while holding
 * it. */
#ifndef TERN_CORE_GATE_H
#define TERN_CORE_GATE_H

#include <pthread.h>
#include <stdatomic.h>

typedef struct tern_gate_waiter {
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    struct tern_gate_waiter *prev, *next;
} tern_gate_waiter;

typedef struct tern_gate {
    pthread_mutex_t lock;
    pthread_cond_t left;       /* a thread left while closing */
    atomic_int closed;
    int inside;                /* threads between enter and leave */
    tern_gate_waiter *waiters; /* those sleeping on a condition */
} tern_gate;

void tern_gate_init(tern_gate *g);
void tern_gate_fini(tern_gate *g);
/* Enter a blocking call that sleeps on (lock, cond); w is the caller's
 * (on its stack) until tern_gate_leave.  lock and cond may be NULL for a
 * call that only needs to be waited for.  TERN_ERR_CLOSED (not entered)
 * once the gate is closed. */
int tern_gate_enter(tern_gate *g, tern_gate_waiter *w, pthread_mutex_t *lock,
                    pthread_cond_t *cond);
void tern_gate_leave(tern_gate *g, tern_gate_waiter *w);
/* 1 once tern_gate_close began. */
int tern_gate_closed(tern_gate *g);
/* Close (idempotent, any thread): wake every waiter, return when none is
 * inside any more. */
void tern_gate_close(tern_gate *g);

#endif
