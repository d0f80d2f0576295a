/* core/obs/stats.c: the engine's counter sets (see stats.h). */
#include "obs/stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "desc/desc.h"
#include "base/util.h"

#define PEERS_MAX 4096 /* peers beyond this are counted in the engine's set only */
#define RELAXED memory_order_relaxed

typedef struct peer_set {
    char *name;
    tern_stat_set st;
} peer_set;

struct tern_stats_obj {
    _Atomic int on;               /* read relaxed on every count */
    tern_stat_set xp[TERN_DESC_MAX_TRANSPORTS + 1]; /* the last: no transport */
    tern_stat_set nopeer; /* requests whose peer has no set of its own */
    char xname[TERN_DESC_MAX_TRANSPORTS][64];
    pthread_mutex_t lock; /* the peer table (never the counters) */
    peer_set **peers;
    size_t npeers, cap;
};

static int counting(const tern_stats_obj *s)
{
    return s && atomic_load_explicit(&s->on, RELAXED);
}

tern_stats_obj *tern_stats_create(int on)
{
    tern_stats_obj *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    atomic_init(&s->on, on);
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

void tern_stats_free(tern_stats_obj *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->npeers; i++) {
        free(s->peers[i]->name);
        free(s->peers[i]);
    }
    free(s->peers);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void tern_stats_set_transport(tern_stats_obj *s, int i, const char *name)
{
    if (s && i >= 0 && i < TERN_DESC_MAX_TRANSPORTS)
        tern_strlcpy(s->xname[i], name, sizeof s->xname[i]);
}

/* Linear: called once per segment open, never on the data path. */
tern_stat_set *tern_stats_peer(tern_stats_obj *s, const char *name)
{
    if (!counting(s) || !name)
        return NULL;
    tern_stat_set *found = NULL;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->npeers && !found; i++)
        if (!strcmp(s->peers[i]->name, name))
            found = &s->peers[i]->st;
    if (!found && s->npeers < PEERS_MAX) {
        peer_set **v = tern_array_room(s->peers, s->npeers, &s->cap, sizeof *v, 16);
        if (v)
            s->peers = v;
        peer_set *p = s->npeers < s->cap ? calloc(1, sizeof *p) : NULL;
        if (p && (p->name = strdup(name))) {
            s->peers[s->npeers++] = p;
            found = &p->st;
        } else {
            free(p);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

/* ---- counting: relaxed atomics, no lock ------------------------------------------- */

static inline void add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, RELAXED);
}

static tern_stat_set *xset(tern_stats_obj *s, int xport)
{
    return xport >= 0 && xport < TERN_DESC_MAX_TRANSPORTS ? &s->xp[xport]
                                                          : &s->xp[TERN_DESC_MAX_TRANSPORTS];
}

void tern_stats_enable(tern_stats_obj *s, int on)
{
    if (s)
        atomic_store_explicit(&s->on, on, RELAXED);
}

uint64_t tern_stats_now(const tern_stats_obj *s)
{
    return counting(s) ? tern_now_ns() : 0;
}

/* Bucket k holds latencies up to 2^k microseconds. */
static int bucket(uint64_t ns)
{
    uint64_t us = ns / 1000;
    int k = us ? 64 - __builtin_clzll(us) : 0;
    return k < TERN_STATS_BUCKETS - 1 ? k : TERN_STATS_BUCKETS - 1;
}

static void end_one(tern_stat_set *t, int op, int started, int code, int k, uint64_t ns,
                    uint64_t bytes)
{
    if (bytes)
        add(&t->bytes[op], bytes);
    if (code == 0) {
        add(&t->lat[op][k], 1);
        add(&t->lat_sum_ns[op], ns);
        return;
    }
    add(&t->failures[op], 1);
    if (!started)
        add(&t->unstarted, 1);
    int i = -code;
    add(&t->errors[i > 0 && i < TERN_STATS_ERRORS ? i : 0], 1);
}

void tern_stats_end(tern_stats_obj *s, tern_stat_set *peer, int xport, int op, int started,
                    int code, uint64_t ns, uint64_t bytes)
{
    if (!counting(s))
        return;
    op &= 1;
    int k = bucket(ns);
    end_one(peer ? peer : &s->nopeer, op, started, code, k, ns, bytes);
    end_one(xset(s, xport), op, started, code, k, ns, bytes);
}

void tern_stats_started(tern_stats_obj *s, tern_stat_set *peer, uint64_t n)
{
    if (n && counting(s))
        add(&(peer ? peer : &s->nopeer)->started, n);
}

static void flush_one(tern_stat_set *t, const tern_stat_acc *a)
{
    add(&t->bytes[a->op], a->bytes);
    add(&t->lat_sum_ns[a->op], a->sum_ns);
    for (int k = 0; k < TERN_STATS_BUCKETS; k++)
        if (a->lat[k])
            add(&t->lat[a->op][k], a->lat[k]);
}

void tern_stats_flush(tern_stats_obj *s, tern_stat_acc *a)
{
    if (!a->n)
        return;
    if (counting(s)) {
        flush_one(a->peer ? a->peer : &s->nopeer, a);
        flush_one(xset(s, a->xport), a);
    }
    memset(a, 0, sizeof *a);
}

/* n requests of one key that took ns each and moved bytes in all. */
static void acc_add_n(tern_stats_obj *s, tern_stat_acc *a, tern_stat_set *peer, int xport,
                      int op, uint64_t ns, uint64_t n, uint64_t bytes)
{
    op &= 1;
    if (a->n && (a->peer != peer || a->xport != xport || a->op != op))
        tern_stats_flush(s, a);
    a->peer = peer;
    a->xport = xport;
    a->op = op;
    a->n += n;
    a->bytes += bytes;
    a->sum_ns += ns * n;
    a->lat[bucket(ns)] += (uint32_t)n;
}

void tern_stats_acc_add(tern_stats_obj *s, tern_stat_acc *a, tern_stat_set *peer, int xport,
                        int op, uint64_t ns, uint64_t bytes)
{
    if (counting(s))
        acc_add_n(s, a, peer, xport, op, ns, 1, bytes);
}

void tern_stats_resolve(tern_stats_obj *s, tern_stat_acc *pend, tern_stat_acc *a, uint64_t t0)
{
    if (!pend->n)
        return;
    if (counting(s))
        acc_add_n(s, a, pend->peer, pend->xport, pend->op, tern_now_ns() - t0, pend->n,
                  pend->bytes);
    memset(pend, 0, sizeof *pend);
}

void tern_stats_defer(tern_stats_obj *s, tern_stat_acc *pend, tern_stat_acc *a,
                      tern_stat_set *peer, int xport, int op, uint64_t bytes, uint64_t t0)
{
    op &= 1;
    if (pend->n && (pend->peer != peer || pend->xport != xport || pend->op != op))
        tern_stats_resolve(s, pend, a, t0);
    pend->peer = peer;
    pend->xport = xport;
    pend->op = op;
    pend->n++;
    pend->bytes += bytes;
}

static void event_one(tern_stat_set *t, tern_stat_event ev)
{
    switch (ev) {
    case TERN_STAT_RETRY: add(&t->retries, 1); break;
    case TERN_STAT_REFETCH: add(&t->refetches, 1); break;
    case TERN_STAT_FALLBACK: add(&t->fallbacks, 1); break;
    case TERN_STAT_HEAL: add(&t->heals, 1); break;
    }
}

void tern_stats_event(tern_stats_obj *s, tern_stat_set *peer, int xport, tern_stat_event ev)
{
    if (!counting(s))
        return;
    event_one(peer ? peer : &s->nopeer, ev);
    event_one(xset(s, xport), ev);
}

/* ---- reading ------------------------------------------------------------------------ */

static uint64_t ld(_Atomic uint64_t *c) { return atomic_load_explicit(c, RELAXED); }

/* Adds set t into o (o->size, kind and name are the caller's). */
static void sum_into(tern_stat_set *t, tern_stats *o)
{
    for (int op = 0; op < 2; op++) {
        o->bytes[op] += ld(&t->bytes[op]);
        o->failures[op] += ld(&t->failures[op]);
        o->latency_sum_ns[op] += ld(&t->lat_sum_ns[op]);
        for (int k = 0; k < TERN_STATS_BUCKETS; k++) {
            uint64_t n = ld(&t->lat[op][k]);
            o->latency[op][k] += n;
            o->latency_count[op] += n; /* consistent with the buckets */
            o->ops[op] += n;
        }
    }
    for (int i = 0; i < TERN_STATS_ERRORS; i++)
        o->errors[i] += ld(&t->errors[i]);
    o->retries += ld(&t->retries);
    o->refetches += ld(&t->refetches);
    o->fallbacks += ld(&t->fallbacks);
    o->heals += ld(&t->heals);
}

/* A peer's requests in flight: started and not ended.  The counters are
 * read one by one while requests run: never below 0. */
static int64_t in_flight(tern_stat_set *t)
{
    uint64_t ended = ld(&t->failures[0]) + ld(&t->failures[1]) - ld(&t->unstarted);
    for (int op = 0; op < 2; op++)
        for (int k = 0; k < TERN_STATS_BUCKETS; k++)
            ended += ld(&t->lat[op][k]);
    int64_t n = (int64_t)(ld(&t->started) - ended);
    return n > 0 ? n : 0;
}

static void start(tern_stats *o, int kind, const char *name)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->kind = (uint32_t)kind;
    o->name = name;
}

/* The peer table only grows and its entries never move: entry i, read
 * under the lock, stays valid without it. */
static peer_set *peer_at(tern_stats_obj *s, size_t i)
{
    pthread_mutex_lock(&s->lock);
    peer_set *p = i < s->npeers ? s->peers[i] : NULL;
    pthread_mutex_unlock(&s->lock);
    return p;
}

int tern_stats_each(tern_stats_obj *s, const char *engine_name, tern_stats_fn fn, void *arg)
{
    tern_stats o;
    start(&o, TERN_STATS_ENGINE, engine_name);
    for (int i = 0; i <= TERN_DESC_MAX_TRANSPORTS; i++)
        sum_into(&s->xp[i], &o);
    o.in_flight = in_flight(&s->nopeer);
    peer_set *p;
    for (size_t i = 0; (p = peer_at(s, i)); i++)
        o.in_flight += in_flight(&p->st);
    int rc = fn(&o, arg);
    for (int i = 0; !rc && i < TERN_DESC_MAX_TRANSPORTS; i++)
        if (s->xname[i][0]) {
            start(&o, TERN_STATS_TRANSPORT, s->xname[i]);
            sum_into(&s->xp[i], &o);
            rc = fn(&o, arg); /* in_flight 0: a request has no transport until it ends */
        }
    for (size_t i = 0; !rc && (p = peer_at(s, i)); i++) {
        start(&o, TERN_STATS_PEER, p->name);
        sum_into(&p->st, &o);
        o.in_flight = in_flight(&p->st);
        rc = fn(&o, arg);
    }
    return rc;
}
