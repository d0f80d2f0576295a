/* core/peer/spread.h: one peer's slices spread over NIC pairs by load
 * (docs/topology.md, Spreading).
 *
 * Each (local device, peer device) pair of a peer has the bytes routed to
 * it and not back yet, and a moving average of the rate it delivers while
 * busy.  A new slice goes to the pair that would finish it first:
 * (in flight + its length) / rate.  A pair with no measured rate yet counts
 * with the best rate measured on the others (so it gets tried), or, with
 * none measured, all pairs count as equal and the bytes in flight decide.
 * So two NICs of unequal speed are both kept full, each in proportion to
 * what it moves.
 *
 * Stalls: a pair with bytes in flight that completed nothing for its
 * progress deadline, while another pair of the peer completed something
 * after it last did (a link that went down resets nothing: only the
 * others' progress tells), is stalled.  The
 * data path's reaper (tern_spread_stalls) pauses it, with a cool-down that
 * doubles per stall (1 s up to 30 s), and resets its endpoint so the slices
 * on it come back and go to the other pairs.  After the cool-down the pair
 * is on probation: one slice at a time until one succeeds, which ends the
 * probation and the doubling.  A pair that fails a slice itself (its
 * connect fails, its connection breaks) is paused the same way: a NIC of
 * the peer this host cannot reach costs a probe now and then, not a
 * failed attempt per slice.
 *
 * State: a fixed table of atomics inside the segment (segments.h), no
 * lock; the races (two threads reading the same load) cost a slightly
 * uneven pick, never a wrong count. */
#ifndef TERN_CORE_SPREAD_H
#define TERN_CORE_SPREAD_H

#include <stdatomic.h>
#include <stdint.h>

#include "host/topology.h"

#define TERN_SPREAD_PAIRS 16

typedef struct tern_spread_pair {
    _Atomic uint32_t key;          /* (local dev << 16 | peer dev) + 1; 0: free slot */
    _Atomic uint64_t inflight;     /* bytes routed here and not back */
    _Atomic uint64_t rate;         /* bytes per second while busy (average); 0: unknown */
    _Atomic uint64_t last_done_ns; /* when its last slice came back */
    _Atomic uint64_t bytes;        /* bytes moved in all (tests, tern-info) */
    _Atomic uint64_t busy_since_ns; /* when in flight went from 0 to more */
    _Atomic uint64_t paused_until_ns; /* stalled: no slice before (0: not paused) */
    _Atomic uint32_t cooldown_ms;  /* the last pause; doubles per stall */
    _Atomic int probation;         /* after a pause: one slice at a time until one succeeds */
    _Atomic uint64_t win_start_ns; /* the rate sample being measured: since when */
    _Atomic uint64_t win_bytes;    /* and the bytes back since */
} tern_spread_pair;

/* The progress deadline: this long without a completion at least, or 4
 * times what the bytes in flight should take at the pair's rate. */
#define TERN_SPREAD_STALL_MIN_MS 500
#define TERN_SPREAD_COOLDOWN_MIN_MS 1000
#define TERN_SPREAD_COOLDOWN_MAX_MS 30000
/* A slice moved off stalled pairs this often without spending an attempt. */
#define TERN_SPREAD_MOVES_MAX 4

/* A pair found stalled: its devices, bytes in flight, silence and pause. */
typedef struct tern_spread_stall {
    int ldev, pdev;
    uint64_t inflight, silent_ms, pause_ms;
} tern_spread_stall;

typedef struct tern_spread {
    tern_spread_pair p[TERN_SPREAD_PAIRS];
} tern_spread;

/* Forget every pair (a segment slot opened for a peer).  Slices of the
 * previous peer still out release into the new table harmlessly. */
void tern_spread_reset(tern_spread *sp);

/* The pairs for one slice: local candidates (ltopo, lloc; only `hint` when
 * it is one of them) against the peer's (ptopo, ploc), paired by device
 * name where names match, else by position when both sides have as many,
 * else every combination.  Picks the pair with the smallest predicted
 * completion and counts len in flight on it.  Returns its slot (>= 0) with
 * *ldev, *pdev (topology indices), or -1 when there is at most one pair
 * (nothing to spread: the caller chooses as before). */
int tern_spread_pick(tern_spread *sp, tern_topology *ltopo, const char *lloc, const char *hint,
                     tern_topology *ptopo, const char *ploc, uint64_t len, int *ldev, int *pdev);

/* A slice of len bytes picked at sent_ns on slot came back (ok 1: a rate
 * sample; 0: the pair failed it, a connect or the connection, which pauses
 * the pair as a stall does unless it is paused already) or was taken back
 * for another reason (ok -1); its bytes leave the in-flight count. */
void tern_spread_done(tern_spread *sp, int slot, uint64_t len, uint64_t sent_ns, int ok);

/* Pairs that stalled by now_ns (see above): each is paused; writes up to
 * max of them, returns how many. */
int tern_spread_stalls(tern_spread *sp, uint64_t now_ns, tern_spread_stall *out, int max);

/* 1 while slot is paused (its slices are being moved off it). */
int tern_spread_paused(tern_spread *sp, int slot, uint64_t now_ns);

/* Bytes moved by the pair (local dev, peer dev) so far, 0 if unknown. */
uint64_t tern_spread_bytes(const tern_spread *sp, int ldev, int pdev);

#endif
