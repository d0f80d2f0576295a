/* transports/tcp/tcp_budget.c: who may hold a connection to the data
 * port (see docs/protocol.md, "Target budgets").  A connection is a
 * stranger until it has authenticated (auth on) or sent one request inside
 * registered memory (auth off); strangers are limited per source address
 * and in total, and the oldest idle one is dropped to make room for a new
 * one; established connections can use all of max_server_connections.
 * The stranger list and the counts are guarded by ctx->srv_mu; a stranger
 * is dropped by its own worker (the evict flag, read by the connection's
 * on_tick in tcp_server.c). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "tcp_server.h"

/* Caller holds srv_mu. */
static void stranger_unlink_locked(tcp_ctx *ctx, tcp_srv_conn *c)
{
    if (!c->stranger)
        return;
    if (c->sprev)
        c->sprev->snext = c->snext;
    else
        ctx->strangers = c->snext;
    if (c->snext)
        c->snext->sprev = c->sprev;
    else
        ctx->strangers_tail = c->sprev;
    c->sprev = c->snext = NULL;
    c->stranger = 0;
    ctx->nunproven--;
}

/* Tell a stranger's worker to drop it (caller holds srv_mu, which keeps
 * the connection alive: it is freed only after tcp_srv_close took srv_mu). */
static void stranger_evict_locked(tcp_ctx *ctx, tcp_srv_conn *c)
{
    stranger_unlink_locked(ctx, c);
    atomic_store(&c->evict, 1);
    atomic_store(&c->io.w->tick_now, 1); /* its on_tick closes it (tcp_server.c) */
    tcp_worker_wake(c->io.w);
    atomic_fetch_add(&ctx->st_evicted, 1);
}

void tcp_budget_prove(tcp_srv_conn *c)
{
    if (c->proven)
        return;
    c->proven = 1;
    pthread_mutex_lock(&c->ctx->srv_mu);
    stranger_unlink_locked(c->ctx, c);
    pthread_mutex_unlock(&c->ctx->srv_mu);
}

void tcp_budget_forget(tcp_srv_conn *c)
{
    pthread_mutex_lock(&c->ctx->srv_mu);
    stranger_unlink_locked(c->ctx, c);
    c->ctx->nsrv--;
    pthread_mutex_unlock(&c->ctx->srv_mu);
}

/* A stranger with a request (or hello) waiting in its socket is about to
 * prove itself: only idle ones are dropped to make room.  Caller holds
 * srv_mu, so the socket is not closed meanwhile. */
static int stranger_idle(const tcp_srv_conn *c)
{
    int n = 0;
    return ioctl(c->io.fd, FIONREAD, &n) == 0 && n < TCP_REQ_SIZE;
}

/* The oldest idle stranger (of src, or of all when src is NULL). */
static tcp_srv_conn *stranger_oldest_idle(tcp_ctx *ctx, const char *src, int *count)
{
    tcp_srv_conn *oldest = NULL;
    int n = 0;
    for (tcp_srv_conn *s = ctx->strangers; s; s = s->snext) {
        if (src && strcmp(s->src, src))
            continue;
        n++;
        if (!oldest && stranger_idle(s))
            oldest = s;
    }
    if (count)
        *count = n;
    return oldest;
}

/* Make room for a stranger from src (caller holds srv_mu): 0, or -1 when
 * the port is full of established connections. */
static int srv_budget_locked(tcp_ctx *ctx, const char *src)
{
    if (ctx->nsrv >= ctx->opt_max_server_conns && !ctx->strangers)
        return -1;
    if (ctx->nsrv >= ctx->opt_max_server_conns || ctx->nunproven >= ctx->opt_max_unproven) {
        tcp_srv_conn *v = stranger_oldest_idle(ctx, NULL, NULL);
        if (v)
            stranger_evict_locked(ctx, v);
        else if (ctx->nsrv >= ctx->opt_max_server_conns)
            return -1;
    }
    int same = 0;
    tcp_srv_conn *v = stranger_oldest_idle(ctx, src, &same);
    if (same >= ctx->opt_unproven_per_source && v)
        stranger_evict_locked(ctx, v);
    return 0;
}

int tcp_budget_admit(tcp_ctx *ctx, tcp_srv_conn *c)
{
    pthread_mutex_lock(&ctx->srv_mu);
    if (srv_budget_locked(ctx, c->src) != 0) {
        pthread_mutex_unlock(&ctx->srv_mu);
        return -1;
    }
    c->stranger = 1;
    c->sprev = ctx->strangers_tail;
    if (ctx->strangers_tail)
        ctx->strangers_tail->snext = c;
    else
        ctx->strangers = c;
    ctx->strangers_tail = c;
    ctx->nunproven++;
    ctx->nsrv++;
    atomic_fetch_add(&c->io.w->nconn, 1);
    pthread_mutex_unlock(&ctx->srv_mu);
    return 0;
}
