/* tests/core/test_epstore.c: the endpoint store: SIEVE and FIFO eviction order,
 * reference-counted close, bad input, churn from 4 threads (capacity holds,
 * every endpoint closed exactly once) and hit rates on a skewed workload. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "plugin/epstore.h"

/* ---- close accounting ------------------------------------------------- */

#define MAX_EPS (1u << 21)
static atomic_int *closed;            /* per endpoint id: times closed */
static atomic_long nclosed;

static void setup(void)
{
    closed = calloc(MAX_EPS, sizeof(*closed));
    cr_assert_not_null(closed);
    atomic_store(&nclosed, 0);
}

static void teardown(void) { free(closed); }

static void *EP(uintptr_t id) { return (void *)(id + 1); }
static uintptr_t ID(void *ep) { return (uintptr_t)ep - 1; }

static void on_close(void *arg, void *ep)
{
    cr_assert_eq(arg, (void *)&nclosed);
    atomic_fetch_add(&closed[ID(ep)], 1);
    atomic_fetch_add(&nclosed, 1);
}

static int was_closed(uintptr_t id) { return atomic_load(&closed[id]); }

static tern_epstore *mk(size_t cap, int policy)
{
    tern_epstore *s = tern_epstore_create(cap, policy, on_close, &nclosed);
    cr_assert_not_null(s);
    return s;
}

static void put(tern_epstore *s, const char *key, uintptr_t id)
{
    tern_ep_ref *r;
    void *ep;
    cr_assert_eq(tern_epstore_insert(s, key, EP(id), &ep, &r), 0, "insert %s", key);
    cr_assert_eq(ep, EP(id));
    tern_epstore_release(s, r);
}

static int has(tern_epstore *s, const char *key)
{
    void *ep;
    tern_ep_ref *r = tern_epstore_get(s, key, &ep);
    if (r)
        tern_epstore_release(s, r);
    return r != NULL;
}

TestSuite(epstore, .init = setup, .fini = teardown);

Test(epstore, key_format)
{
    char k[128];
    tern_epstore_key(k, sizeof k, "mlx5_0", "10.0.0.7:12001@mlx5_3");
    cr_assert_str_eq(k, "mlx5_0|10.0.0.7:12001@mlx5_3");
    tern_epstore_key(k, sizeof k, NULL, NULL);
    cr_assert_str_eq(k, "|");
    char tiny[4];
    tern_epstore_key(tiny, sizeof tiny, "mlx5_0", "x");
    cr_assert_str_eq(tiny, "mlx");
}

Test(epstore, get_insert_exists_release)
{
    tern_epstore *s = mk(4, TERN_EVICT_SIEVE);
    void *ep = (void *)9;
    cr_assert_null(tern_epstore_get(s, "a|p@0", &ep));
    cr_assert_null(ep);
    tern_ep_ref *r1, *r2, *r3;
    cr_assert_eq(tern_epstore_insert(s, "a|p@0", EP(1), &ep, &r1), 0);
    /* Same key again: the new one is not stored; the old one is held. */
    cr_assert_eq(tern_epstore_insert(s, "a|p@0", EP(2), &ep, &r2), TERN_ERR_EXISTS);
    cr_assert_eq(ep, EP(1));
    cr_assert_eq(r2, r1);
    r3 = tern_epstore_get(s, "a|p@0", &ep);
    cr_assert_eq(ep, EP(1));
    tern_epstore_release(s, r1);
    tern_epstore_release(s, r2);
    tern_epstore_release(s, r3);
    cr_assert_eq(was_closed(1), 0, "closed while still in the store");
    /* Insert without holding (ref NULL). */
    cr_assert_eq(tern_epstore_insert(s, "b|p@0", EP(3), NULL, NULL), 0);
    cr_assert_eq(tern_epstore_insert(s, "b|p@0", EP(4), &ep, NULL), TERN_ERR_EXISTS);
    cr_assert_eq(ep, EP(3));
    tern_epstore_stats st;
    tern_epstore_stats_get(s, &st);
    cr_assert_eq(st.hits, 1);
    cr_assert_eq(st.misses, 1);
    cr_assert_eq(st.size, 2);
    cr_assert_eq(st.capacity, 4);
    cr_assert_eq(st.evictions, 0);
    tern_epstore_destroy(s);
    cr_assert_eq(was_closed(1), 1);
    cr_assert_eq(was_closed(3), 1);
    cr_assert_eq(was_closed(2) + was_closed(4), 0, "the store closed a rejected duplicate");
}

Test(epstore, fifo_evicts_oldest)
{
    tern_epstore *s = mk(3, TERN_EVICT_FIFO);
    put(s, "A", 1);
    put(s, "B", 2);
    put(s, "C", 3);
    cr_assert(has(s, "A"));            /* a hit does not save A under FIFO */
    put(s, "D", 4);
    cr_assert_eq(was_closed(1), 1);
    cr_assert(!has(s, "A"));
    cr_assert(has(s, "B") && has(s, "C") && has(s, "D"));
    tern_epstore_destroy(s);
    cr_assert_eq(atomic_load(&nclosed), 4);
}

/* The SIEVE example: A was visited, so the hand clears it and evicts B,
 * then stays there (it never goes back) and evicts C next. */
Test(epstore, sieve_order)
{
    tern_epstore *s = mk(3, TERN_EVICT_SIEVE);
    put(s, "A", 1);
    put(s, "B", 2);
    put(s, "C", 3);
    cr_assert(has(s, "A"));
    put(s, "D", 4);
    cr_assert_eq(was_closed(2), 1, "SIEVE should evict B");
    cr_assert_eq(was_closed(1) + was_closed(3), 0);
    put(s, "E", 5);
    cr_assert_eq(was_closed(3), 1, "SIEVE should evict C next");
    cr_assert_eq(was_closed(1), 0);
    /* A's bit is cleared but the hand is past it (at D) and moves only
     * towards the newest: a scan of new keys evicts the new ones (quick
     * demotion) and A survives. */
    const char *keys[] = {"F", "G", "H", "I", "J"};
    for (int i = 0; i < 5; i++) {
        put(s, keys[i], 6 + (uintptr_t)i);
        cr_assert_eq(was_closed(4 + (uintptr_t)i), 1, "inserting %s should evict id %d",
                     keys[i], 4 + i);
        cr_assert_eq(was_closed(1), 0, "A evicted by a scan (step %d)", i);
    }
    /* Queue A, I, J with the hand at I: visit I and J, so the hand clears
     * them, wraps to the tail and evicts A. */
    cr_assert(has(s, "I") && has(s, "J"));
    put(s, "K", 11);
    cr_assert_eq(was_closed(1), 1, "the hand should wrap to the tail and evict A");
    cr_assert_eq(was_closed(9) + was_closed(10), 0);
    tern_epstore_stats st;
    tern_epstore_stats_get(s, &st);
    cr_assert_eq(st.evictions, 8);
    cr_assert_eq(st.size, 3);
    tern_epstore_destroy(s);
    for (uintptr_t i = 1; i <= 11; i++)
        cr_assert_eq(was_closed(i), 1, "endpoint %lu", (unsigned long)i);
}

/* An evicted or removed endpoint is closed only when its last user lets go. */
Test(epstore, close_waits_for_last_reference)
{
    tern_epstore *s = mk(1, TERN_EVICT_SIEVE);
    tern_ep_ref *ra, *ra2;
    void *ep;
    cr_assert_eq(tern_epstore_insert(s, "A", EP(1), &ep, &ra), 0);
    ra2 = tern_epstore_get(s, "A", &ep);
    put(s, "B", 2);                    /* evicts A while two users hold it */
    cr_assert(!has(s, "A"));
    cr_assert_eq(was_closed(1), 0, "closed while in use");
    tern_epstore_release(s, ra);
    cr_assert_eq(was_closed(1), 0, "closed while in use");
    tern_epstore_release(s, ra2);
    cr_assert_eq(was_closed(1), 1);
    /* remove: same rule */
    tern_ep_ref *rb = tern_epstore_get(s, "B", &ep);
    tern_epstore_remove(s, "B");
    tern_epstore_remove(s, "B");       /* twice: harmless */
    cr_assert(!has(s, "B"));
    cr_assert_eq(was_closed(2), 0);
    tern_epstore_release(s, rb);
    cr_assert_eq(was_closed(2), 1);
    /* remove of an unheld entry closes at once */
    put(s, "C", 3);
    tern_epstore_remove(s, "C");
    cr_assert_eq(was_closed(3), 1);
    tern_epstore_destroy(s);
    cr_assert_eq(atomic_load(&nclosed), 3);
}

/* destroy closes what is stored and what waits for a user. */
Test(epstore, destroy_closes_everything)
{
    tern_epstore *s = mk(2, TERN_EVICT_FIFO);
    tern_ep_ref *r;
    void *ep;
    cr_assert_eq(tern_epstore_insert(s, "A", EP(1), &ep, &r), 0);
    put(s, "B", 2);
    put(s, "C", 3);                    /* A evicted, still held */
    tern_epstore_destroy(s);           /* A still held: destroy closes it all the same */
    for (uintptr_t i = 1; i <= 3; i++)
        cr_assert_eq(was_closed(i), 1, "endpoint %lu", (unsigned long)i);
    tern_epstore_release(s, r); /* the last holder frees the store (ASan: no leak) */
    cr_assert_eq(was_closed(1), 1, "closed once, not again at the release");
}

/* Closing a segment drops every endpoint to that peer's NICs, and only
 * those: "a:1" must not match "a:10"; a held one closes on release. */
Test(epstore, remove_peer_drops_only_that_peer)
{
    tern_epstore *s = mk(16, TERN_EVICT_SIEVE);
    put(s, "mlx5_0|10.0.0.1:1@mlx5_0", 1);
    put(s, "mlx5_1|10.0.0.1:1@mlx5_3", 2);
    put(s, "mlx5_0|10.0.0.1:10@mlx5_0", 3);
    put(s, "mlx5_0|10.0.0.2:1@mlx5_0", 4);
    void *ep;
    tern_ep_ref *held = tern_epstore_get(s, "mlx5_1|10.0.0.1:1@mlx5_3", &ep);
    cr_assert_not_null(held);
    cr_assert_eq(tern_epstore_remove_peer(s, "10.0.0.1:1"), 2);
    cr_assert_eq(was_closed(1), 1);
    cr_assert_eq(was_closed(2), 0, "held: closed only on release");
    cr_assert_not(has(s, "mlx5_1|10.0.0.1:1@mlx5_3"));
    tern_epstore_release(s, held);
    cr_assert_eq(was_closed(2), 1);
    cr_assert(has(s, "mlx5_0|10.0.0.1:10@mlx5_0"));
    cr_assert(has(s, "mlx5_0|10.0.0.2:1@mlx5_0"));
    cr_assert_eq(tern_epstore_remove_peer(s, "10.0.0.9:1"), 0);
    tern_epstore_destroy(s);
}

/* The close callback runs outside the store's lock: it may use the store. */
static tern_epstore *reentrant;
static void close_reenter(void *arg, void *ep)
{
    (void)arg;
    void *x;
    tern_ep_ref *r = tern_epstore_get(reentrant, "B", &x);
    if (r)
        tern_epstore_release(reentrant, r);
    atomic_fetch_add(&closed[ID(ep)], 1);
}

Test(epstore, close_outside_lock, .timeout = 20)
{
    reentrant = tern_epstore_create(1, TERN_EVICT_SIEVE, close_reenter, NULL);
    cr_assert_eq(tern_epstore_insert(reentrant, "A", EP(1), NULL, NULL), 0);
    cr_assert_eq(tern_epstore_insert(reentrant, "B", EP(2), NULL, NULL), 0);
    cr_assert_eq(was_closed(1), 1);
    tern_epstore_remove(reentrant, "B");
    cr_assert_eq(was_closed(2), 1);
    tern_epstore_destroy(reentrant);
}

/* Destroy while slices still hold endpoints (engine teardown with work in
 * a transport): closing an endpoint makes the transport fail what it
 * carries, whose completions release the last references, from inside
 * the close (release_deferred, as complete() does).  Each endpoint is
 * closed exactly once, the reap at the end included. */
static tern_epstore *tearing;
static tern_ep_ref *held[3];
static void close_flushes(void *arg, void *ep)
{
    (void)arg;
    uintptr_t id = ID(ep);
    atomic_fetch_add(&closed[id], 1);
    if (id < 3 && held[id]) {
        tern_epstore_release_deferred(tearing, held[id]);
        held[id] = NULL;
    }
}

Test(epstore, destroy_while_held, .timeout = 20)
{
    tearing = tern_epstore_create(4, TERN_EVICT_SIEVE, close_flushes, NULL);
    void *ep;
    cr_assert_eq(tern_epstore_insert(tearing, "a|p:1@d", EP(0), &ep, &held[0]), 0);
    cr_assert_eq(tern_epstore_insert(tearing, "a|p:2@d", EP(1), &ep, &held[1]), 0);
    cr_assert_eq(tern_epstore_insert(tearing, "a|p:3@d", EP(2), &ep, NULL), 0);
    tern_epstore_remove(tearing, "a|p:2@d"); /* detached: only the slice holds it */
    cr_assert_eq(was_closed(1), 0);
    tern_epstore_destroy(tearing);
    for (uintptr_t i = 0; i < 3; i++)
        cr_assert_eq(was_closed(i), 1, "endpoint %lu closed %d times", (unsigned long)i,
                     was_closed(i));
}

Test(epstore, bad_input)
{
    cr_assert_null(tern_epstore_create(0, TERN_EVICT_SIEVE, on_close, NULL));
    cr_assert_null(tern_epstore_create(4, 7, on_close, NULL));
    tern_epstore *s = tern_epstore_create(4, TERN_EVICT_SIEVE, NULL, NULL); /* no callback */
    void *ep = (void *)1;
    tern_ep_ref *r = (void *)1;
    cr_assert_eq(tern_epstore_insert(s, NULL, EP(1), &ep, &r), TERN_ERR_INVAL);
    cr_assert_null(r);
    cr_assert_eq(tern_epstore_insert(s, "", EP(1), &ep, &r), TERN_ERR_INVAL);
    cr_assert_eq(tern_epstore_insert(s, "k", NULL, &ep, &r), TERN_ERR_INVAL);
    cr_assert_eq(tern_epstore_insert(NULL, "k", EP(1), &ep, &r), TERN_ERR_INVAL);
    char *big = malloc(5000);
    memset(big, 'x', 4999);
    big[4999] = '\0';
    cr_assert_eq(tern_epstore_insert(s, big, EP(1), &ep, &r), TERN_ERR_INVAL);
    cr_assert_null(tern_epstore_get(s, big, &ep));
    free(big);
    cr_assert_null(tern_epstore_get(s, NULL, &ep));
    cr_assert_null(tern_epstore_get(NULL, "k", &ep));
    tern_epstore_remove(s, NULL);
    tern_epstore_remove(NULL, "k");
    tern_epstore_release(s, NULL);
    tern_epstore_release(NULL, NULL);
    tern_epstore_stats_get(NULL, NULL);
    tern_epstore_stats st;
    tern_epstore_stats_get(NULL, &st);
    cr_assert_eq(st.capacity, 0);
    cr_assert_eq(tern_epstore_insert(s, "k", EP(1), NULL, NULL), 0);
    tern_epstore_destroy(s);           /* NULL close_fn: nothing to call */
    tern_epstore_destroy(NULL);
}

/* ---- churn: 1,000,000 inserts with random keys from 4 threads ----------- */

#define CHURN_THREADS 4
#define CHURN_PER_THREAD 250000
#define CHURN_CAP 256
#define CHURN_KEYS (1u << 14)
#define CHURN_HELD 8

static atomic_uint next_id;
static atomic_long caller_closed, inserted, over_capacity, bad_get;

struct churn_arg {
    tern_epstore *s;
    uint64_t rng;
};

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void *churn_thread(void *p)
{
    struct churn_arg *a = p;
    tern_ep_ref *held[CHURN_HELD] = {0};
    char key[64];
    for (int i = 0; i < CHURN_PER_THREAD; i++) {
        /* release the oldest hold, so evicted entries are often in use */
        int slot = i % CHURN_HELD;
        tern_epstore_release(a->s, held[slot]);
        held[slot] = NULL;
        uint64_t r = xorshift(&a->rng);
        snprintf(key, sizeof key, "mlx5_%u|10.0.0.%u:12001@mlx5_%u", (unsigned)(r % 4),
                 (unsigned)((r >> 8) % CHURN_KEYS), (unsigned)((r >> 40) % 4));
        uintptr_t id = atomic_fetch_add(&next_id, 1);
        void *ep;
        int rc = tern_epstore_insert(a->s, key, EP(id), &ep, &held[slot]);
        if (rc == TERN_ERR_EXISTS) {
            atomic_fetch_add(&closed[id], 1);     /* the caller closes its own */
            atomic_fetch_add(&caller_closed, 1);
        } else if (rc == 0) {
            atomic_fetch_add(&inserted, 1);
        } else {
            cr_log_error("insert: %d", rc);
        }
        /* and a lookup and, now and then, a removal */
        snprintf(key, sizeof key, "mlx5_%u|10.0.0.%u:12001@mlx5_%u", (unsigned)((r >> 50) % 4),
                 (unsigned)((r >> 20) % CHURN_KEYS), (unsigned)((r >> 60) % 4));
        tern_ep_ref *g = tern_epstore_get(a->s, key, &ep);
        if (g) {
            if (atomic_load(&closed[ID(ep)]) != 0)
                atomic_fetch_add(&bad_get, 1);     /* handed out after close */
            tern_epstore_release(a->s, g);
        }
        if (i % 97 == 0)
            tern_epstore_remove(a->s, key);
        if (i % 1024 == 0) {
            tern_epstore_stats st;
            tern_epstore_stats_get(a->s, &st);
            if (st.size > st.capacity)
                atomic_fetch_add(&over_capacity, 1);
        }
    }
    for (int k = 0; k < CHURN_HELD; k++)
        tern_epstore_release(a->s, held[k]);
    return NULL;
}

static void churn(int policy)
{
    tern_epstore *s = mk(CHURN_CAP, policy);
    pthread_t th[CHURN_THREADS];
    struct churn_arg a[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++) {
        a[i] = (struct churn_arg){.s = s, .rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1)};
        cr_assert_eq(pthread_create(&th[i], NULL, churn_thread, &a[i]), 0);
    }
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_join(th[i], NULL);
    tern_epstore_stats st;
    tern_epstore_stats_get(s, &st);
    cr_assert_eq(atomic_load(&over_capacity), 0, "size exceeded the capacity");
    cr_assert_eq(atomic_load(&bad_get), 0, "get returned a closed endpoint");
    cr_assert_leq(st.size, CHURN_CAP);
    long ins = atomic_load(&inserted);
    cr_assert_eq(ins + atomic_load(&caller_closed), (long)CHURN_THREADS * CHURN_PER_THREAD);
    /* Everything not in the store now has been closed by the store. */
    cr_assert_eq(atomic_load(&nclosed), ins - (long)st.size, "closed %ld, inserted %ld, size %zu",
                 atomic_load(&nclosed), ins, st.size);
    tern_epstore_destroy(s);
    cr_log_info("policy %d: %ld inserted, %ld duplicates, %lu evictions, %lu hits, %lu misses",
                policy, ins, atomic_load(&caller_closed), (unsigned long)st.evictions,
                (unsigned long)st.hits, (unsigned long)st.misses);
    /* Exactly once per endpoint, by the store or by its creator. */
    unsigned n = atomic_load(&next_id);
    for (unsigned id = 0; id < n; id++)
        cr_assert_eq(atomic_load(&closed[id]), 1, "endpoint %u closed %d times", id,
                     atomic_load(&closed[id]));
    cr_assert_eq(atomic_load(&nclosed), ins);
}

Test(epstore, churn_sieve_4_threads, .timeout = 120)
{
    churn(TERN_EVICT_SIEVE);
}

Test(epstore, churn_fifo_4_threads, .timeout = 120)
{
    churn(TERN_EVICT_FIFO);
}

/* ---- skewed workload: SIEVE's hit rate next to FIFO's ------------------- */

static double zipf_hit_rate(int policy, double alpha, size_t cap, unsigned universe,
                            unsigned requests)
{
    double *cdf = malloc(sizeof(double) * universe);
    double sum = 0;
    for (unsigned i = 0; i < universe; i++)
        cdf[i] = (sum += 1.0 / pow((double)(i + 1), alpha));
    for (unsigned i = 0; i < universe; i++)
        cdf[i] /= sum;
    /* Scatter ranks over keys so popularity is not tied to insertion order. */
    tern_epstore *s = mk(cap, policy);
    uint64_t rng = 12345;
    char key[64];
    for (unsigned q = 0; q < requests; q++) {
        double u = (double)(xorshift(&rng) >> 11) / 9007199254740992.0;
        unsigned lo = 0, hi = universe - 1;
        while (lo < hi) {
            unsigned mid = (lo + hi) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        snprintf(key, sizeof key, "mlx5_0|peer%u@mlx5_1", (lo * 2654435761u) % universe);
        void *ep;
        tern_ep_ref *r = tern_epstore_get(s, key, &ep);
        if (!r) {
            uintptr_t id = atomic_fetch_add(&next_id, 1);
            cr_assert_eq(tern_epstore_insert(s, key, EP(id), &ep, &r), 0);
        }
        tern_epstore_release(s, r);
    }
    tern_epstore_stats st;
    tern_epstore_stats_get(s, &st);
    tern_epstore_destroy(s);
    free(cdf);
    return (double)st.hits / (double)(st.hits + st.misses);
}

Test(epstore, skewed_sieve_vs_fifo)
{
    const double alphas[] = {0.8, 1.0, 1.2};
    for (int i = 0; i < 3; i++) {
        double sieve = zipf_hit_rate(TERN_EVICT_SIEVE, alphas[i], 100, 10000, 200000);
        double fifo = zipf_hit_rate(TERN_EVICT_FIFO, alphas[i], 100, 10000, 200000);
        printf("epstore zipf alpha=%.1f capacity=100 keys=10000 requests=200000: "
               "hit rate SIEVE %.4f, FIFO %.4f\n", alphas[i], sieve, fifo);
        fflush(stdout);
        cr_assert_geq(sieve, fifo, "alpha %.1f: SIEVE %.4f < FIFO %.4f", alphas[i], sieve, fifo);
    }
}
