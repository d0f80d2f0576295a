/* core/peer/spread.c: NIC pairs by load (see spread.h). */
#include "peer/spread.h"

#include <string.h>

#include "base/util.h"

/* A sample weighs 1/8 in the average: a few samples follow a change of
 * rate, one odd window does not swing it. */
#define SPREAD_EWMA_SHIFT 3
/* A rate sample covers at least this long: completions come in bursts
 * (several connections, replies read together), so the time between two
 * of them says little. */
#define SPREAD_WINDOW_NS 50000000ull

void tern_spread_reset(tern_spread *sp)
{
    for (int i = 0; i < TERN_SPREAD_PAIRS; i++) {
        atomic_store(&sp->p[i].key, 0);
        atomic_store(&sp->p[i].inflight, 0);
        atomic_store(&sp->p[i].rate, 0);
        atomic_store(&sp->p[i].last_done_ns, 0);
        atomic_store(&sp->p[i].bytes, 0);
        atomic_store(&sp->p[i].busy_since_ns, 0);
        atomic_store(&sp->p[i].paused_until_ns, 0);
        atomic_store(&sp->p[i].cooldown_ms, 0);
        atomic_store(&sp->p[i].probation, 0);
        atomic_store(&sp->p[i].win_start_ns, 0);
        atomic_store(&sp->p[i].win_bytes, 0);
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

/* Index (into slot[]) of the pair with the smallest predicted completion
 * in ns, (in flight + len) / rate, the rate unknown counting as best_rate
 * (all equal while none is known: then the bytes in flight decide).  With
 * strict, paused pairs and busy ones on probation sit out.  -1: none. */
static int spread_best(tern_spread *sp, const int *slot, int n, uint64_t len,
                       uint64_t best_rate, uint64_t now, int strict)
{
    int best = -1;
    double best_t = 0;
    for (int i = 0; i < n; i++) {
        if (slot[i] < 0)
            continue;
        tern_spread_pair *q = &sp->p[slot[i]];
        if (strict && (atomic_load(&q->paused_until_ns) > now ||
                       (atomic_load(&q->probation) && atomic_load(&q->inflight) > 0)))
            continue;
        uint64_t r = atomic_load(&q->rate);
        double rate = (double)(r ? r : best_rate ? best_rate : 1);
        double t = (double)(atomic_load(&q->inflight) + len) / rate;
        if (best < 0 || t < best_t) {
            best = i;
            best_t = t;
        }
    }
    return best;
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
    uint64_t now = tern_now_ns();
    int best = spread_best(sp, slot, n, len, best_rate, now, 1);
    if (best < 0) /* every pair paused: one of them all the same */
        best = spread_best(sp, slot, n, len, best_rate, now, 0);
    if (best < 0)
        return -1;
    if (atomic_fetch_add(&sp->p[slot[best]].inflight, len) == 0)
        atomic_store(&sp->p[slot[best]].busy_since_ns, now);
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

static uint64_t spread_pause(tern_spread_pair *q, uint64_t now_ns);

void tern_spread_done(tern_spread *sp, int slot, uint64_t len, uint64_t sent_ns, int ok)
{
    if (!sp || slot < 0 || slot >= TERN_SPREAD_PAIRS)
        return;
    tern_spread_pair *q = &sp->p[slot];
    spread_sub(&q->inflight, len);
    if (ok == 0 && atomic_load(&q->paused_until_ns) <= tern_now_ns())
        spread_pause(q, tern_now_ns()); /* it failed there (a probe: a longer pause) */
    if (ok <= 0)
        return;
    atomic_fetch_add(&q->bytes, len);
    if (atomic_load(&q->probation)) { /* it moves again */
        atomic_store(&q->probation, 0);
        atomic_store(&q->cooldown_ms, 0);
    }
    /* Delivery rate while busy: the bytes that came back over a window of
     * at least SPREAD_WINDOW_NS.  A slice sent after the previous
     * completion found the pair idle: the window starts again with it. */
    uint64_t now = tern_now_ns();
    uint64_t prev = atomic_exchange(&q->last_done_ns, now);
    uint64_t start = atomic_load(&q->win_start_ns);
    if (!start || sent_ns > prev) {
        atomic_store(&q->win_start_ns, sent_ns < now ? sent_ns : now);
        atomic_store(&q->win_bytes, len);
        return;
    }
    uint64_t bytes = atomic_fetch_add(&q->win_bytes, len) + len;
    if (now < start + SPREAD_WINDOW_NS)
        return;
    atomic_store(&q->win_start_ns, now);
    atomic_store(&q->win_bytes, 0);
    uint64_t sample = (uint64_t)((double)bytes * 1e9 / (double)(now - start));
    uint64_t r = atomic_load(&q->rate);
    atomic_store(&q->rate, r ? r - (r >> SPREAD_EWMA_SHIFT) + (sample >> SPREAD_EWMA_SHIFT)
                             : sample);
}

int tern_spread_paused(tern_spread *sp, int slot, uint64_t now_ns)
{
    return sp && slot >= 0 && slot < TERN_SPREAD_PAIRS &&
           atomic_load(&sp->p[slot].paused_until_ns) > now_ns;
}

/* When q last moved: its last completion, or when it became busy. */
static uint64_t spread_progress(tern_spread_pair *q)
{
    uint64_t a = atomic_load(&q->last_done_ns), b = atomic_load(&q->busy_since_ns);
    return a > b ? a : b;
}

/* q's deadline in ns: 4 x its bytes in flight at its rate, at least the
 * floor (a pair without a rate gets the floor). */
static uint64_t spread_deadline(tern_spread_pair *q, uint64_t inflight)
{
    uint64_t r = atomic_load(&q->rate), floor = (uint64_t)TERN_SPREAD_STALL_MIN_MS * 1000000u;
    uint64_t t = r ? (uint64_t)((double)inflight * 4e9 / (double)r) : 0;
    return t > floor ? t : floor;
}

/* Pause q: the cool-down doubles from the minimum up to the maximum. */
static uint64_t spread_pause(tern_spread_pair *q, uint64_t now_ns)
{
    uint32_t c = atomic_load(&q->cooldown_ms);
    c = c ? c * 2 : TERN_SPREAD_COOLDOWN_MIN_MS;
    if (c > TERN_SPREAD_COOLDOWN_MAX_MS)
        c = TERN_SPREAD_COOLDOWN_MAX_MS;
    atomic_store(&q->cooldown_ms, c);
    atomic_store(&q->paused_until_ns, now_ns + (uint64_t)c * 1000000u);
    atomic_store(&q->probation, 1);
    return c;
}

int tern_spread_stalls(tern_spread *sp, uint64_t now_ns, tern_spread_stall *out, int max)
{
    int n = 0;
    for (int i = 0; sp && i < TERN_SPREAD_PAIRS && n < max; i++) {
        tern_spread_pair *q = &sp->p[i];
        uint32_t key = atomic_load(&q->key);
        uint64_t inflight = atomic_load(&q->inflight);
        if (!key || !inflight || atomic_load(&q->paused_until_ns) > now_ns)
            continue;
        uint64_t last = spread_progress(q), dl = spread_deadline(q, inflight);
        if (now_ns < last + dl)
            continue;
        /* Did another pair complete something since this one last did?
         * Then the peer answers, and the silence is this pair's.  (Not
         * "within the deadline": the others may have finished all they had
         * and wait for requests this pair holds up.) */
        int others = 0;
        for (int j = 0; j < TERN_SPREAD_PAIRS && !others; j++)
            others = j != i && atomic_load(&sp->p[j].key) &&
                     atomic_load(&sp->p[j].last_done_ns) > last;
        if (!others)
            continue; /* the whole peer is silent: the peer's own healing */
        uint64_t pause = spread_pause(q, now_ns);
        out[n++] = (tern_spread_stall){(int)((key - 1) >> 16), (int)((key - 1) & 0xffff),
                                       inflight, (now_ns - last) / 1000000u, pause};
    }
    return n;
}

uint64_t tern_spread_bytes(const tern_spread *sp, int ldev, int pdev)
{
    uint32_t key = spread_key(ldev, pdev);
    for (int i = 0; sp && i < TERN_SPREAD_PAIRS; i++)
        if (atomic_load(&sp->p[i].key) == key)
            return atomic_load(&sp->p[i].bytes);
    return 0;
}
