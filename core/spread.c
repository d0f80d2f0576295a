/* core/spread.c: NIC pairs by load (see spread.h). */
#include "spread.h"

#include <string.h>

#include "util.h"

/* A sample weighs 1/8 in the average: a few slices follow a change of
 * rate, one odd interval does not swing it. */
#define SPREAD_EWMA_SHIFT 3

void tern_spread_reset(tern_spread *sp)
{
    for (int i = 0; i < TERN_SPREAD_PAIRS; i++) {
        atomic_store(&sp->p[i].key, 0);
        atomic_store(&sp->p[i].inflight, 0);
        atomic_store(&sp->p[i].rate, 0);
        atomic_store(&sp->p[i].last_done_ns, 0);
        atomic_store(&sp->p[i].bytes, 0);
    }
}

static uint32_t spread_key(int ldev, int pdev)
{
    return ((uint32_t)ldev << 16 | (uint32_t)pdev) + 1;
}

/* The slot of a pair, claimed on first use; -1 when the table is full. */
static int spread_slot(tern_spread *sp, int ldev, int pdev)
{
    uint32_t key = spread_key(ldev, pdev);
    for (int i = 0; i < TERN_SPREAD_PAIRS; i++) {
        uint32_t k = atomic_load_explicit(&sp->p[i].key, memory_order_acquire);
        if (k == key)
            return i;
        if (k == 0) {
            uint32_t zero = 0;
            if (atomic_compare_exchange_strong(&sp->p[i].key, &zero, key) || zero == key)
                return i;
        }
    }
    return -1;
}

typedef struct spread_cand {
    int ldev, pdev;
} spread_cand;

/* The pairs: same names, else by position, else every combination. */
static int spread_pairs(tern_topology *lt, const int *l, int nl, tern_topology *pt,
                        const int *p, int np, spread_cand *out)
{
    int n = 0;
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < np && n < TERN_SPREAD_PAIRS; j++)
            if (!strcmp(tern_topology_device_name(lt, l[i]), tern_topology_device_name(pt, p[j])))
                out[n++] = (spread_cand){l[i], p[j]};
    if (n > 0)
        return n;
    if (nl == np) {
        for (int i = 0; i < nl && n < TERN_SPREAD_PAIRS; i++)
            out[n++] = (spread_cand){l[i], p[i]};
        return n;
    }
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < np && n < TERN_SPREAD_PAIRS; j++)
            out[n++] = (spread_cand){l[i], p[j]};
    return n;
}

/* The local candidates: the hint alone when it is one of them. */
static int spread_local(tern_topology *lt, const char *lloc, const char *hint, int *l)
{
    int nl = tern_topology_candidates(lt, lloc, l, TERN_MAX_DEVICES);
    if (hint && *hint)
        for (int i = 0; i < nl; i++)
            if (!strcmp(tern_topology_device_name(lt, l[i]), hint)) {
                l[0] = l[i];
                return 1;
            }
    return nl;
}

int tern_spread_pick(tern_spread *sp, tern_topology *ltopo, const char *lloc, const char *hint,
                     tern_topology *ptopo, const char *ploc, uint64_t len, int *ldev, int *pdev)
{
    int l[TERN_MAX_DEVICES], p[TERN_MAX_DEVICES];
    if (!sp || !ltopo || !ptopo)
        return -1;
    int nl = spread_local(ltopo, lloc, hint, l);
    int np = tern_topology_candidates(ptopo, ploc, p, TERN_MAX_DEVICES);
    if (nl * np <= 1)
        return -1;
    spread_cand c[TERN_SPREAD_PAIRS];
    int n = spread_pairs(ltopo, l, nl, ptopo, p, np, c);
    if (n <= 1)
        return -1;
    int slot[TERN_SPREAD_PAIRS];
    uint64_t best_rate = 0;
    for (int i = 0; i < n; i++) {
        slot[i] = spread_slot(sp, c[i].ldev, c[i].pdev);
        uint64_t r = slot[i] >= 0 ? atomic_load(&sp->p[slot[i]].rate) : 0;
        if (r > best_rate)
            best_rate = r;
    }
    /* Predicted completion in ns: (in flight + len) / rate; one rate for
     * all while none is known (then the bytes in flight decide). */
    int best = -1;
    double best_t = 0;
    for (int i = 0; i < n; i++) {
        if (slot[i] < 0)
            continue;
        tern_spread_pair *q = &sp->p[slot[i]];
        uint64_t r = atomic_load(&q->rate);
        double rate = (double)(r ? r : best_rate ? best_rate : 1);
        double t = (double)(atomic_load(&q->inflight) + len) / rate;
        if (best < 0 || t < best_t) {
            best = i;
            best_t = t;
        }
    }
    if (best < 0)
        return -1;
    atomic_fetch_add(&sp->p[slot[best]].inflight, len);
    *ldev = c[best].ldev;
    *pdev = c[best].pdev;
    return slot[best];
}

/* Subtract without going below 0 (a slot reset while slices were out). */
static void spread_sub(_Atomic uint64_t *v, uint64_t n)
{
    uint64_t cur = atomic_load(v);
    while (!atomic_compare_exchange_weak(v, &cur, cur > n ? cur - n : 0))
        ;
}

void tern_spread_done(tern_spread *sp, int slot, uint64_t len, uint64_t sent_ns, int ok)
{
    if (!sp || slot < 0 || slot >= TERN_SPREAD_PAIRS)
        return;
    tern_spread_pair *q = &sp->p[slot];
    spread_sub(&q->inflight, len);
    if (!ok)
        return;
    atomic_fetch_add(&q->bytes, len);
    /* Delivery rate: the bytes over the time since the later of its start
     * and the pair's previous completion (the pipe was busy since then). */
    uint64_t now = tern_now_ns();
    uint64_t prev = atomic_exchange(&q->last_done_ns, now);
    uint64_t from = prev > sent_ns ? prev : sent_ns;
    if (now <= from)
        return;
    uint64_t sample = (uint64_t)((double)len * 1e9 / (double)(now - from));
    uint64_t r = atomic_load(&q->rate);
    atomic_store(&q->rate, r ? r - (r >> SPREAD_EWMA_SHIFT) + (sample >> SPREAD_EWMA_SHIFT)
                             : sample);
}

uint64_t tern_spread_bytes(const tern_spread *sp, int ldev, int pdev)
{
    uint32_t key = spread_key(ldev, pdev);
    for (int i = 0; sp && i < TERN_SPREAD_PAIRS; i++)
        if (atomic_load(&sp->p[i].key) == key)
            return atomic_load(&sp->p[i].bytes);
    return 0;
}
