/* transports/shm/shm_drain.c: after a deregistration, the copies still
 * under way into that memory (see docs/protocol.md, Same-host transport,
 * "Deregistration").
 *
 * The initiator copies into the target's memory itself, so the target
 * cannot pin a range the way tcp's server does.  Instead each copy is
 * announced in the initiator's own table (shm_copying: the target's
 * instance, and the target's seq its range was checked at) BEFORE it reads
 * the target's header.  The target, after changing its seq, reads the
 * copying[] slots of every process that handshook with it as initiator and
 * waits while one names it with a seq older than the change (or none yet):
 * either that copier read the header before the change and the target sees
 * its slot, or it read the header after and refuses the range itself.  The
 * wait is bounded by unregister_wait_ms, as tcp's. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shm_internal.h"

void shm_copiers_init(shm_copiers *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
}

void shm_copiers_fini(shm_copiers *c)
{
    pthread_mutex_destroy(&c->lock);
}

void shm_copiers_add(shm_copiers *c, const shm_ident *id)
{
    pthread_mutex_lock(&c->lock);
    int i = 0;
    while (i < c->n && c->id[i].instance != id->instance)
        i++;
    if (i == c->n) {
        /* Full: replace the oldest entry (256 engines on one host copying
         * into this one; a process gone is dropped by the next wait). */
        i = c->n < SHM_MAX_COPIERS ? c->n++ : (int)(c->evict++ % SHM_MAX_COPIERS);
        c->id[i] = *id;
    }
    pthread_mutex_unlock(&c->lock);
}

static void drop_locked(shm_copiers *c, uint64_t instance)
{
    for (int i = 0; i < c->n; i++)
        if (c->id[i].instance == instance) {
            c->id[i] = c->id[--c->n];
            return;
        }
}

/* The copier's header and copying[] slots in one read. */
typedef struct shm_view {
    shm_head head;
    shm_copying copying[SHM_COPY_SLOTS];
} shm_view;

/* 1 while id has a copy into us checked before seq, 0 when it has none,
 * -1 when id is no longer there (process gone, engine destroyed). */
static int copier_busy(const shm_ident *id, uint64_t self_instance, uint64_t seq)
{
    shm_view v;
    if (shm_peek((pid_t)id->pid, id->table, &v, sizeof v) != 0 ||
        v.head.magic != SHM_TABLE_MAGIC || v.head.instance != id->instance)
        return -1;
    for (int i = 0; i < SHM_COPY_SLOTS; i++)
        if (v.copying[i].instance == self_instance && v.copying[i].seq < seq)
            return 1;
    return 0;
}

/* One pass over the copiers: the pid of one still busy, or 0. */
static long busy_pass(shm_ctx *ctx, uint64_t seq)
{
    shm_copiers *c = &ctx->copiers;
    long busy = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n && !busy;) {
        int b = copier_busy(&c->id[i], ctx->self.instance, seq);
        if (b < 0) {
            drop_locked(c, c->id[i].instance); /* i now holds another entry */
            continue;
        }
        if (b)
            busy = (long)c->id[i].pid;
        i++;
    }
    pthread_mutex_unlock(&c->lock);
    if (!busy && shm_local_copying_before(&ctx->local, seq))
        busy = (long)ctx->self.pid;
    return busy;
}

int shm_drain_wait(shm_ctx *ctx, uint64_t seq, int wait_ms, char *msg, size_t msglen)
{
    uint64_t end = tern_kit_now_us() + (uint64_t)wait_ms * 1000u;
    long nap_us = 20; /* a chunk takes tens of microseconds: poll fast, then back off */
    for (;;) {
        long pid = busy_pass(ctx, seq);
        if (!pid)
            return 0;
        if (tern_kit_now_us() >= end)
            return tern_kit_errf(msg, msglen, TERN_ERR_TIMEOUT,
                                 "process %ld was still copying into the range after "
                                 "unregister_wait_ms (%d ms)", pid, wait_ms);
        struct timespec ts = {0, nap_us * 1000};
        nanosleep(&ts, NULL);
        if (nap_us < 1000)
            nap_us *= 2;
    }
}
