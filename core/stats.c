/* core/stats.c: the engine's counter sets (see stats.h). */
#include "stats.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "desc.h"
#include "util.h"

#define PEERS_MAX 4096 /* peers beyond this are counted in the engine's set only */
#define RELAXED memory_order_relaxed

typedef struct peer_set {
    char *name;
    tern_stat_set st;
} peer_set;

struct tern_stats_obj {
    int on;
    tern_stat_set all;
    tern_stat_set xp[TERN_DESC_MAX_TRANSPORTS];
    char xname[TERN_DESC_MAX_TRANSPORTS][64];
    pthread_mutex_t lock; /* the peer table (never the counters) */
    peer_set **peers;
    size_t npeers, cap;
};

tern_stats_obj *tern_stats_create(int on)
{
    tern_stats_obj *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->on = on;
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
    if (!s || !s->on || !name)
        return NULL;
    tern_stat_set *found = NULL;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->npeers && !found; i++)
        if (!strcmp(s->peers[i]->name, name))
            found = &s->peers[i]->st;
    if (!found && s->npeers < PEERS_MAX) {
        if (s->npeers == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 16;
            peer_set **v = realloc(s->peers, cap * sizeof *v);
            if (v) {
                s->peers = v;
                s->cap = cap;
            }
        }
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
    return xport >= 0 && xport < TERN_DESC_MAX_TRANSPORTS ? &s->xp[xport] : NULL;
}

void tern_stats_start(tern_stats_obj *s, tern_stat_set *peer)
{
    if (!s || !s->on)
        return;
    atomic_fetch_add_explicit(&s->all.in_flight, 1, RELAXED);
    if (peer)
        atomic_fetch_add_explicit(&peer->in_flight, 1, RELAXED);
}

void tern_stats_bytes(tern_stats_obj *s, tern_stat_set *peer, int xport, int op, uint64_t n)
{
    if (!s || !s->on)
        return;
    op &= 1;
    add(&s->all.bytes[op], n);
    if (peer)
        add(&peer->bytes[op], n);
    tern_stat_set *x = xset(s, xport);
    if (x)
        add(&x->bytes[op], n);
}

/* Bucket k holds latencies up to 2^k microseconds. */
static int bucket(uint64_t ns)
{
    uint64_t us = ns / 1000;
    int k = us ? 64 - __builtin_clzll(us) : 0;
    return k < TERN_STATS_BUCKETS - 1 ? k : TERN_STATS_BUCKETS - 1;
}

static void end_one(tern_stat_set *t, int op, int code, int k, uint64_t ns)
{
    if (code == 0) {
        add(&t->ops[op], 1);
        add(&t->lat[op][k], 1);
        add(&t->lat_sum_ns[op], ns);
        return;
    }
    add(&t->failures[op], 1);
    int i = -code;
    add(&t->errors[i > 0 && i < TERN_STATS_ERRORS ? i : 0], 1);
}

void tern_stats_end(tern_stats_obj *s, tern_stat_set *peer, int xport, int op, int started,
                    int code, uint64_t ns)
{
    if (!s || !s->on)
        return;
    op &= 1;
    int k = bucket(ns);
    end_one(&s->all, op, code, k, ns);
    if (started)
        atomic_fetch_sub_explicit(&s->all.in_flight, 1, RELAXED);
    if (peer) {
        end_one(peer, op, code, k, ns);
        if (started)
            atomic_fetch_sub_explicit(&peer->in_flight, 1, RELAXED);
    }
    tern_stat_set *x = xset(s, xport);
    if (x)
        end_one(x, op, code, k, ns);
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
    if (!s || !s->on)
        return;
    event_one(&s->all, ev);
    if (peer)
        event_one(peer, ev);
    tern_stat_set *x = xset(s, xport);
    if (x)
        event_one(x, ev);
}

/* ---- reading ------------------------------------------------------------------------ */

static uint64_t ld(_Atomic uint64_t *c) { return atomic_load_explicit(c, RELAXED); }

static void snapshot(tern_stat_set *t, tern_stats *o, int kind, const char *name)
{
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->kind = (uint32_t)kind;
    o->name = name;
    for (int op = 0; op < 2; op++) {
        o->ops[op] = ld(&t->ops[op]);
        o->bytes[op] = ld(&t->bytes[op]);
        o->failures[op] = ld(&t->failures[op]);
        o->latency_sum_ns[op] = ld(&t->lat_sum_ns[op]);
        for (int k = 0; k < TERN_STATS_BUCKETS; k++) {
            o->latency[op][k] = ld(&t->lat[op][k]);
            o->latency_count[op] += o->latency[op][k]; /* consistent with the buckets */
        }
    }
    for (int i = 0; i < TERN_STATS_ERRORS; i++)
        o->errors[i] = ld(&t->errors[i]);
    o->retries = ld(&t->retries);
    o->refetches = ld(&t->refetches);
    o->fallbacks = ld(&t->fallbacks);
    o->heals = ld(&t->heals);
    o->in_flight = atomic_load_explicit(&t->in_flight, RELAXED);
}

int tern_stats_each(tern_stats_obj *s, const char *engine_name, tern_stats_fn fn, void *arg)
{
    tern_stats o;
    snapshot(&s->all, &o, TERN_STATS_ENGINE, engine_name);
    int rc = fn(&o, arg);
    for (int i = 0; !rc && i < TERN_DESC_MAX_TRANSPORTS; i++)
        if (s->xname[i][0]) {
            snapshot(&s->xp[i], &o, TERN_STATS_TRANSPORT, s->xname[i]);
            rc = fn(&o, arg);
        }
    /* The table only grows and its entries never move: walk a copy of its
     * length so the callback runs without the lock (it may open segments). */
    pthread_mutex_lock(&s->lock);
    size_t n = s->npeers;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; !rc && i < n; i++) {
        pthread_mutex_lock(&s->lock);
        peer_set *p = s->peers[i];
        pthread_mutex_unlock(&s->lock);
        snapshot(&p->st, &o, TERN_STATS_PEER, p->name);
        rc = fn(&o, arg);
    }
    return rc;
}
