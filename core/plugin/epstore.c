/* core/plugin/epstore.c: the endpoint cache keyed by "<local dev>|<peer nic path>".
 *
 * A hash table (chained) finds an entry; a queue (head = newest) orders
 * them for eviction.  SIEVE (Zhang et al., NSDI'24): a hit only sets the
 * entry's visited bit; to evict, a hand moves from the tail towards the
 * head, clearing visited bits, and evicts the first entry whose bit is
 * clear; the hand stays where it stopped.  FIFO evicts the tail.
 *
 * Locking: lookups take the read side of a rwlock (the visited bit, the
 * reference count and the counters are atomics), so hits from several
 * threads run in parallel; insert/remove/eviction take the write side.
 *
 * Lifetime: the store holds one reference on every entry it contains and
 * each get/insert adds one.  Eviction or removal unlinks the entry and
 * drops the store's reference; whoever drops the last one closes the
 * endpoint, always outside the store's locks.  An entry that left the
 * store while still referenced waits on the "detached" list (so destroy can
 * still find it), guarded by its own mutex. */
#include "plugin/epstore.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "tern/errors.h"

#define EP_KEY_MAX 1024
#define EP_MAX_BUCKETS (1u << 24)

typedef struct ep_entry {
    struct ep_entry *hnext;          /* hash chain */
    struct ep_entry *newer, *older;  /* queue, or the detached list */
    atomic_int refs;
    atomic_uchar visited;
    int closed;                      /* destroy closed its endpoint already (dlock) */
    void *ep;
    uint64_t hash;
    char key[];
} ep_entry;

struct tern_epstore {
    pthread_rwlock_t lock;           /* table and queue */
    pthread_mutex_t dlock;           /* detached list */
    ep_entry **buckets;
    size_t mask;
    ep_entry *head, *tail, *hand;    /* head = newest; the hand walks tail -> head */
    ep_entry *detached;
    ep_entry *doomed;                /* released last by release_deferred (dlock) */
    int destroyed;                   /* destroy ran with entries held: the release
                                        that frees the last one frees the store (dlock) */
    size_t size, capacity;
    int policy;
    tern_ep_close_fn close_fn;
    void *arg;
    atomic_uint_fast64_t hits, misses, evictions, closes;
};

/* FNV-1a, 64-bit. */
static uint64_t ep_hash(const char *k)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 0x100000001b3ULL;
    return h;
}

tern_epstore *tern_epstore_create(size_t capacity, int policy, tern_ep_close_fn close_fn,
                                  void *arg)
{
    if (capacity == 0 || (policy != TERN_EVICT_SIEVE && policy != TERN_EVICT_FIFO))
        return NULL;
    size_t nb = 16;
    while (nb < capacity && nb < EP_MAX_BUCKETS)
        nb <<= 1;
    tern_epstore *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->buckets = calloc(nb, sizeof(*s->buckets));
    if (!s->buckets) {
        free(s);
        return NULL;
    }
    s->mask = nb - 1;
    s->capacity = capacity;
    s->policy = policy;
    s->close_fn = close_fn;
    s->arg = arg;
    pthread_rwlock_init(&s->lock, NULL);
    pthread_mutex_init(&s->dlock, NULL);
    return s;
}

void tern_epstore_key(char *out, size_t outlen, const char *local_dev,
                      const char *peer_nic_path)
{
    if (out && outlen)
        snprintf(out, outlen, "%s|%s", local_dev ? local_dev : "",
                 peer_nic_path ? peer_nic_path : "");
}

static int ep_key_ok(const char *key)
{
    return key && key[0] && strnlen(key, EP_KEY_MAX) < EP_KEY_MAX;
}

/* ---- table and queue (write lock held unless noted) -------------------- */

static ep_entry *ep_find(tern_epstore *s, const char *key, uint64_t h)  /* read lock */
{
    for (ep_entry *e = s->buckets[h & s->mask]; e; e = e->hnext)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void ep_link(tern_epstore *s, ep_entry *e)
{
    ep_entry **b = &s->buckets[e->hash & s->mask];
    e->hnext = *b;
    *b = e;
    e->older = s->head;
    e->newer = NULL;
    if (s->head)
        s->head->newer = e;
    s->head = e;
    if (!s->tail)
        s->tail = e;
    s->size++;
}

/* Takes e off a list linked newer -> older: the queue (head, tail) or the
 * detached list (head only, tail NULL). */
static void ep_list_unlink(ep_entry **head, ep_entry **tail, ep_entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        *head = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else if (tail)
        *tail = e->newer;
}

static void ep_unlink(tern_epstore *s, ep_entry *e)
{
    ep_entry **p = &s->buckets[e->hash & s->mask];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    if (s->hand == e)
        s->hand = e->newer;
    ep_list_unlink(&s->head, &s->tail, e);
    e->newer = e->older = NULL;
    s->size--;
}

/* SIEVE: from the hand (or the tail) towards the head, clear visited bits
 * and take the first entry without one. */
static ep_entry *ep_sieve_victim(tern_epstore *s)
{
    ep_entry *h = s->hand ? s->hand : s->tail;
    while (atomic_load_explicit(&h->visited, memory_order_relaxed)) {
        atomic_store_explicit(&h->visited, 0, memory_order_relaxed);
        h = h->newer ? h->newer : s->tail;
    }
    s->hand = h;   /* ep_unlink moves it on to the next newer entry */
    return h;
}

/* Drop the store's reference of an unlinked entry: returns it when that
 * was the last reference (the caller closes it after unlocking); otherwise
 * it waits on the detached list for its last user. */
static ep_entry *ep_drop_store_ref(tern_epstore *s, ep_entry *e)
{
    pthread_mutex_lock(&s->dlock);
    int last = atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1;
    if (!last) {
        e->older = s->detached;
        e->newer = NULL;
        if (s->detached)
            s->detached->newer = e;
        s->detached = e;
    }
    pthread_mutex_unlock(&s->dlock);
    return last ? e : NULL;
}

static void ep_close(tern_epstore *s, ep_entry *e)
{
    if (s->close_fn && !e->closed)
        s->close_fn(s->arg, e->ep);
    atomic_fetch_add_explicit(&s->closes, 1, memory_order_relaxed);
    free(e);
}

/* ---- API --------------------------------------------------------------- */

tern_ep_ref *tern_epstore_get(tern_epstore *s, const char *key, void **ep)
{
    if (ep)
        *ep = NULL;
    if (!s || !ep_key_ok(key))
        return NULL;
    uint64_t h = ep_hash(key);
    pthread_rwlock_rdlock(&s->lock);
    ep_entry *e = ep_find(s, key, h);
    if (e) {
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
        /* Write the bit only when it changes: hits stay read-mostly. */
        if (!atomic_load_explicit(&e->visited, memory_order_relaxed))
            atomic_store_explicit(&e->visited, 1, memory_order_relaxed);
        if (ep)
            *ep = e->ep;
    }
    pthread_rwlock_unlock(&s->lock);
    atomic_fetch_add_explicit(e ? &s->hits : &s->misses, 1, memory_order_relaxed);
    return (tern_ep_ref *)e;
}

int tern_epstore_insert(tern_epstore *s, const char *key, void *ep_in, void **ep,
                        tern_ep_ref **ref)
{
    if (ep)
        *ep = NULL;
    if (ref)
        *ref = NULL;
    if (!s || !ep_key_ok(key) || !ep_in)
        return TERN_ERR_INVAL;
    size_t klen = strlen(key);
    ep_entry *n = malloc(sizeof(*n) + klen + 1);
    if (!n)
        return TERN_ERR_NOMEM;
    memcpy(n->key, key, klen + 1);
    n->hash = ep_hash(key);
    n->ep = ep_in;
    n->hnext = n->newer = n->older = NULL;
    atomic_init(&n->refs, ref ? 2 : 1); /* the store's and the caller's */
    atomic_init(&n->visited, 0);
    n->closed = 0;

    ep_entry *victim = NULL, *closing = NULL;
    pthread_rwlock_wrlock(&s->lock);
    ep_entry *e = ep_find(s, key, n->hash);
    if (e) {
        if (ref)
            atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
        atomic_store_explicit(&e->visited, 1, memory_order_relaxed);
        if (ep)
            *ep = e->ep;
        pthread_rwlock_unlock(&s->lock);
        free(n);
        if (ref)
            *ref = (tern_ep_ref *)e;
        return TERN_ERR_EXISTS;
    }
    if (s->size >= s->capacity) {
        victim = s->policy == TERN_EVICT_FIFO ? s->tail : ep_sieve_victim(s);
        ep_unlink(s, victim);
        closing = ep_drop_store_ref(s, victim);
        atomic_fetch_add_explicit(&s->evictions, 1, memory_order_relaxed);
    }
    ep_link(s, n);
    pthread_rwlock_unlock(&s->lock);
    if (closing)
        ep_close(s, closing);
    if (ep)
        *ep = ep_in;
    if (ref)
        *ref = (tern_ep_ref *)n;
    return 0;
}

static void ep_store_free(tern_epstore *s)
{
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->dlock);
    free(s->buckets);
    free(s);
}

void tern_epstore_release(tern_epstore *s, tern_ep_ref *ref)
{
    ep_entry *e = (ep_entry *)ref;
    if (!s || !e)
        return;
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    /* Last reference: the store already let go, so e is on the detached list. */
    pthread_mutex_lock(&s->dlock);
    ep_list_unlink(&s->detached, NULL, e); /* the detached list has no tail */
    int last = s->destroyed && !s->detached && !s->doomed;
    pthread_mutex_unlock(&s->dlock);
    ep_close(s, e);
    if (last) /* destroy left the store to the last holder */
        ep_store_free(s);
}

void tern_epstore_hold(tern_ep_ref *ref)
{
    ep_entry *e = (ep_entry *)ref;
    if (e)
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

int tern_epstore_release_deferred(tern_epstore *s, tern_ep_ref *ref)
{
    ep_entry *e = (ep_entry *)ref;
    if (!s || !e)
        return 0;
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return 0;
    pthread_mutex_lock(&s->dlock);
    ep_list_unlink(&s->detached, NULL, e); /* the detached list has no tail */
    e->newer = NULL;
    e->older = s->doomed;
    s->doomed = e;
    pthread_mutex_unlock(&s->dlock);
    return 1;
}

size_t tern_epstore_reap(tern_epstore *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->dlock);
    ep_entry *e = s->doomed;
    s->doomed = NULL;
    pthread_mutex_unlock(&s->dlock);
    size_t n = 0;
    for (ep_entry *next; e; e = next, n++) {
        next = e->older;
        ep_close(s, e);
    }
    return n;
}

void tern_epstore_remove(tern_epstore *s, const char *key)
{
    if (!s || !ep_key_ok(key))
        return;
    uint64_t h = ep_hash(key);
    ep_entry *closing = NULL;
    pthread_rwlock_wrlock(&s->lock);
    ep_entry *e = ep_find(s, key, h);
    if (e) {
        ep_unlink(s, e);
        closing = ep_drop_store_ref(s, e);
    }
    pthread_rwlock_unlock(&s->lock);
    if (closing)
        ep_close(s, closing);
}

/* Does key "<local dev>|<peer nic path>" name a NIC of peer "host:port"? */
static int ep_key_is_peer(const char *key, const char *peer, size_t plen)
{
    const char *bar = strchr(key, '|');
    return bar && strncmp(bar + 1, peer, plen) == 0 && bar[1 + plen] == '@';
}

size_t tern_epstore_remove_peer(tern_epstore *s, const char *peer)
{
    if (!s || !peer || !peer[0])
        return 0;
    size_t plen = strlen(peer), n = 0;
    ep_entry *closing = NULL;
    pthread_rwlock_wrlock(&s->lock);
    for (ep_entry *e = s->head, *older; e; e = older) {
        older = e->older;
        if (!ep_key_is_peer(e->key, peer, plen))
            continue;
        ep_unlink(s, e);
        n++;
        ep_entry *last = ep_drop_store_ref(s, e);
        if (last) { /* chain through hnext: no longer in the table */
            last->hnext = closing;
            closing = last;
        }
    }
    pthread_rwlock_unlock(&s->lock);
    while (closing) { /* outside the lock: closing may block on the transport */
        ep_entry *next = closing->hnext;
        ep_close(s, closing);
        closing = next;
    }
    return n;
}

void tern_epstore_destroy(tern_epstore *s)
{
    if (!s)
        return;
    /* The store lets go of every entry, as a removal does: one nobody
     * else holds is closed now; one a slice still holds (it is in a
     * transport) waits on the detached list. */
    ep_entry *closing = NULL;
    pthread_rwlock_wrlock(&s->lock);
    while (s->head) {
        ep_entry *e = s->head;
        ep_unlink(s, e);
        ep_entry *last = ep_drop_store_ref(s, e);
        if (last) {
            last->hnext = closing;
            closing = last;
        }
    }
    pthread_rwlock_unlock(&s->lock);
    while (closing) {
        ep_entry *next = closing->hnext;
        ep_close(s, closing);
        closing = next;
    }
    /* Close the endpoints of the held ones: the transport fails what they
     * carry, and those completions release the last references (moving
     * the entries to the doomed list), usually inside close_fn.  Each
     * entry is freed only by whoever drops its last reference, and its
     * endpoint is not closed a second time then. */
    size_t n = 0;
    void **eps = NULL;
    pthread_mutex_lock(&s->dlock);
    for (ep_entry *e = s->detached; e; e = e->older)
        n++;
    eps = n ? malloc(n * sizeof *eps) : NULL;
    n = 0;
    for (ep_entry *e = s->detached; e && eps; e = e->older) {
        e->closed = 1;
        eps[n++] = e->ep;
    }
    pthread_mutex_unlock(&s->dlock);
    for (size_t i = 0; i < n; i++)
        if (s->close_fn)
            s->close_fn(s->arg, eps[i]);
    free(eps);
    tern_epstore_reap(s);
    pthread_mutex_lock(&s->dlock);
    int held = s->detached != NULL;
    s->destroyed = held;
    pthread_mutex_unlock(&s->dlock);
    if (held) /* a late completion still releases into it: that release frees it */
        return;
    ep_store_free(s);
}

void tern_epstore_stats_get(tern_epstore *s, tern_epstore_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof(*out));
    if (!s)
        return;
    pthread_rwlock_rdlock(&s->lock);
    out->size = s->size;
    out->capacity = s->capacity;
    pthread_rwlock_unlock(&s->lock);
    out->hits = atomic_load(&s->hits);
    out->misses = atomic_load(&s->misses);
    out->evictions = atomic_load(&s->evictions);
    out->closes = atomic_load(&s->closes);
}
