/* core/spread.h: one peer's slices spread over NIC pairs by load
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
 * State: a fixed table of atomics inside the segment (segments.h), no
 * lock; the races (two threads reading the same load) cost a slightly
 * uneven pick, never a wrong count. */
#ifndef TERN_CORE_SPREAD_H
#define TERN_CORE_SPREAD_H

#include <stdatomic.h>
#include <stdint.h>

#include "topology.h"

#define TERN_SPREAD_PAIRS 16

typedef struct tern_spread_pair {
    _Atomic uint32_t key;          /* (local dev << 16 | peer dev) + 1; 0: free slot */
    _Atomic uint64_t inflight;     /* bytes routed here and not back */
    _Atomic uint64_t rate;         /* bytes per second while busy (average); 0: unknown */
    _Atomic uint64_t last_done_ns; /* when its last slice came back */
    _Atomic uint64_t bytes;        /* bytes moved in all (tests, tern-info) */
} tern_spread_pair;

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

/* A slice of len bytes picked at sent_ns on slot came back: ok adds a rate
 * sample; either way its bytes leave the in-flight count. */
void tern_spread_done(tern_spread *sp, int slot, uint64_t len, uint64_t sent_ns, int ok);

/* Bytes moved by the pair (local dev, peer dev) so far, 0 if unknown. */
uint64_t tern_spread_bytes(const tern_spread *sp, int ldev, int pdev);

#endif
