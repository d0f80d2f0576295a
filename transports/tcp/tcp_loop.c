/* transports/tcp/tcp_loop.c: the TCP transport's fixed pool of I/O threads.
 *
 * Each worker owns an epoll set and serves every socket placed on it (the
 * listening socket, target-side connections, initiator-side connections)
 * with non-blocking I/O.  Sockets are placed on the worker serving the
 * fewest connections, so one large transfer over several connections is
 * copied on several cores.  Other threads never touch a worker's list: they
 * hand it a command (a function it runs between two batches of events).
 * A socket closed while a batch is handled stays allocated until the batch
 * is over, so a later event of the same batch never reaches freed memory.
 * Every TCP_TICK_MS the worker calls on_tick of each socket (deadlines).
 * While a large payload is coming it polls instead of sleeping, for at most
 * payload_spin_us after the last event that left one under way. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tcp_internal.h"

#define EVENTS_MAX 64

void tcp_worker_wake(tcp_worker *w)
{
    uint64_t one = 1;
    if (write(w->efd, &one, sizeof one) < 0) {
        /* an eventfd write fails only on overflow: the worker is awake anyway */
    }
}

int tcp_worker_is_self(const tcp_worker *w)
{
    return w->started && pthread_equal(pthread_self(), w->thread);
}

static void cmd_push(tcp_worker *w, tcp_cmd *c)
{
    c->next = NULL;
    if (w->cmd_tail)
        w->cmd_tail->next = c;
    else
        w->cmd_head = c;
    w->cmd_tail = c;
}

void tcp_worker_call(tcp_worker *w, void (*fn)(void *), void *arg)
{
    if (tcp_worker_is_self(w) || !w->started) {
        fn(arg);
        return;
    }
    tcp_cmd c = {.fn = fn, .arg = arg, .sync = 1};
    pthread_mutex_lock(&w->mu);
    cmd_push(w, &c);
    pthread_mutex_unlock(&w->mu);
    tcp_worker_wake(w);
    pthread_mutex_lock(&w->mu);
    while (!c.done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

int tcp_worker_post(tcp_worker *w, void (*fn)(void *), void *arg)
{
    tcp_cmd *c = calloc(1, sizeof *c);
    if (!c)
        return TERN_ERR_NOMEM;
    c->fn = fn;
    c->arg = arg;
    pthread_mutex_lock(&w->mu);
    cmd_push(w, c);
    pthread_mutex_unlock(&w->mu);
    tcp_worker_wake(w);
    return 0;
}

tcp_worker *tcp_worker_pick(tcp_ctx *ctx)
{
    unsigned start = atomic_fetch_add(&ctx->next_worker, 1);
    tcp_worker *best = NULL;
    for (int i = 0; i < ctx->nworkers; i++) {
        tcp_worker *w = &ctx->workers[(start + (unsigned)i) % (unsigned)ctx->nworkers];
        if (!best || atomic_load(&w->nconn) < atomic_load(&best->nconn))
            best = w;
    }
    return best;
}

void tcp_io_list(tcp_io *io)
{
    if (io->listed)
        return;
    io->prev = NULL;
    io->next = io->w->list;
    if (io->w->list)
        io->w->list->prev = io;
    io->w->list = io;
    io->listed = 1;
}

int tcp_io_add(tcp_io *io, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = io};
    if (epoll_ctl(io->w->epfd, EPOLL_CTL_ADD, io->fd, &ev) != 0)
        return TERN_ERR_IO;
    tcp_io_list(io);
    return 0;
}

void tcp_io_mod(tcp_io *io, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = io};
    epoll_ctl(io->w->epfd, EPOLL_CTL_MOD, io->fd, &ev);
}

void tcp_io_unlist(tcp_io *io)
{
    tcp_worker *w = io->w;
    if (!io->listed)
        return;
    if (io->prev)
        io->prev->next = io->next;
    else
        w->list = io->next;
    if (io->next)
        io->next->prev = io->prev;
    io->listed = 0;
    io->dead = 1;
    io->next = w->grave;
    w->grave = io;
}

static void run_cmds(tcp_worker *w)
{
    pthread_mutex_lock(&w->mu);
    tcp_cmd *c = w->cmd_head;
    w->cmd_head = w->cmd_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    int signal = 0;
    while (c) {
        tcp_cmd *next = c->next;
        c->fn(c->arg);
        if (c->sync) {
            pthread_mutex_lock(&w->mu);
            c->done = 1;
            pthread_mutex_unlock(&w->mu);
            signal = 1;
        } else {
            free(c);
        }
        c = next;
    }
    if (signal) {
        pthread_mutex_lock(&w->mu);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

static void bury(tcp_worker *w)
{
    while (w->grave) {
        tcp_io *io = w->grave;
        w->grave = io->next;
        if (io->on_free)
            io->on_free(io);
    }
}

static void tick(tcp_worker *w)
{
    uint64_t now = tern_kit_now_ms();
    if (now - w->last_tick < TCP_TICK_MS)
        return;
    w->last_tick = now;
    for (tcp_io *io = w->list, *next; io; io = next) {
        next = io->next; /* on_tick may unlist io (never another) */
        if (io->on_tick)
            io->on_tick(io, now);
    }
}

static void *worker_main(void *arg)
{
    tcp_worker *w = arg;
    struct epoll_event ev[EVENTS_MAX];
    w->last_tick = tern_kit_now_ms();
    uint64_t spin_until = 0; /* us: poll without sleeping until then */
    for (;;) {
        int polling = spin_until && tern_kit_now_us() < spin_until;
        int n = epoll_wait(w->epfd, ev, EVENTS_MAX, polling ? 0 : TCP_TICK_MS);
        atomic_store_explicit(&w->expect_more, 0, memory_order_relaxed);
        if (n == 0 && polling) /* the core to any thread waiting for it */
            sched_yield();
        for (int i = 0; i < n; i++) {
            tcp_io *io = ev[i].data.ptr;
            if (!io) {
                uint64_t v;
                if (read(w->efd, &v, sizeof v) < 0) {
                    /* EAGAIN: another wake-up already drained it */
                }
                continue;
            }
            if (!io->dead && io->on_event)
                io->on_event(io, ev[i].events);
        }
        /* A payload is under way (tcp_rcvlowat): poll for the rest, and for
         * the next request pipelined behind it, until payload_spin_us after
         * the last such event.  Asleep, this thread must be woken for each
         * 128 KiB, and the wake costs the sender (on loopback, in its own
         * system call) about a fifth of its time; polling, the sender finds
         * it awake.  Each empty poll yields the CPU, so a thread that has
         * work on this core (the sender itself, another connection's
         * worker) is not kept from it. */
        if (atomic_load_explicit(&w->expect_more, memory_order_relaxed) &&
            w->ctx->opt_spin_us > 0)
            spin_until = tern_kit_now_us() + (uint64_t)w->ctx->opt_spin_us;
        run_cmds(w);
        if (atomic_exchange(&w->tick_now, 0))
            w->last_tick = 0; /* every on_tick now, not at the next TCP_TICK_MS */
        tick(w);
        bury(w);
        pthread_mutex_lock(&w->mu);
        int stop = w->stop && !w->cmd_head;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
    }
    /* Close what is left (target-side connections, the listener). */
    while (w->list) {
        tcp_io *io = w->list;
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, io->fd, NULL);
        if (io->fd >= 0)
            close(io->fd);
        io->fd = -1;
        tcp_io_unlist(io);
    }
    bury(w);
    return NULL;
}

int tcp_workers_start(tcp_ctx *ctx, char *err, size_t errlen)
{
    ctx->workers = calloc((size_t)ctx->opt_io_threads, sizeof *ctx->workers);
    if (!ctx->workers)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp: out of memory for I/O threads");
    for (int i = 0; i < ctx->opt_io_threads; i++) {
        tcp_worker *w = &ctx->workers[i];
        w->ctx = ctx;
        w->idx = i;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ctx->nworkers = i + 1;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (w->epfd < 0 || w->efd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->efd, &ev) != 0 ||
            pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            int e = errno;
            tcp_workers_stop(ctx);
            return tern_kit_errf(err, errlen, TERN_ERR_IO, "tcp: cannot start I/O thread %d: %s", i,
                                 strerror(e));
        }
        w->started = 1;
    }
    return 0;
}

void tcp_workers_stop(tcp_ctx *ctx)
{
    for (int i = 0; i < ctx->nworkers; i++) {
        tcp_worker *w = &ctx->workers[i];
        if (!w->started)
            continue;
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_mutex_unlock(&w->mu);
        tcp_worker_wake(w);
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    for (int i = 0; i < ctx->nworkers; i++) {
        tcp_worker *w = &ctx->workers[i];
        if (w->epfd >= 0)
            close(w->epfd);
        if (w->efd >= 0)
            close(w->efd);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    free(ctx->workers);
    ctx->workers = NULL;
    ctx->nworkers = 0;
}
