/* tests/core/test_spread.c: a peer's slices over NIC pairs (core/peer/spread.c,
 * docs/topology.md, Spreading and Stalled NIC pairs): pairing, the pick by
 * predicted completion, stalls, pause and probation. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "peer/spread.h"
#include "host/topology.h"
#include "base/util.h"

#define MIB (1ull << 20)
#define AB "{\"*\": [[\"a\", \"b\"], []]}" /* devices a and b, everywhere */

static tern_spread sp;

/* A topology of the named devices, all preferred everywhere. */
static tern_topology *topo(const char *json)
{
    tern_topology *t = NULL;
    char err[256];
    cr_assert_eq(tern_topology_from_json(json, NULL, 0, 0, &t, err, sizeof err), 0, "%s", err);
    return t;
}

static int pick(tern_topology *l, tern_topology *p, uint64_t len, int *ld, int *pd)
{
    return tern_spread_pick(&sp, l, "*", NULL, p, "*", len, ld, pd);
}

Test(spread, one_pair_is_not_spread)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo("{\"*\": [[\"eth0\"], []]}"), *p = topo("{\"*\": [[\"eth0\"], []]}");
    int ld, pd;
    cr_expect_eq(pick(l, p, MIB, &ld, &pd), -1);
    tern_topology_free(l);
    tern_topology_free(p);
}

Test(spread, pairs_by_name_then_by_position)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo("{\"*\": [[\"nic0\", \"nic1\"], []]}");
    tern_topology *p = topo("{\"*\": [[\"nic1\", \"nic0\"], []]}");
    int ld, pd;
    for (int i = 0; i < 8; i++) {
        cr_assert_geq(pick(l, p, MIB, &ld, &pd), 0);
        cr_expect_str_eq(tern_topology_device_name(l, ld), tern_topology_device_name(p, pd),
                         "same names pair up");
    }
    tern_topology_free(p);
    p = topo("{\"*\": [[\"mlx5_0\", \"mlx5_1\"], []]}");
    tern_spread_reset(&sp);
    for (int i = 0; i < 8; i++) {
        cr_assert_geq(pick(l, p, MIB, &ld, &pd), 0);
        cr_expect_eq(ld, pd, "no common name: by position");
    }
    tern_topology_free(l);
    tern_topology_free(p);
}

/* No rate known: the bytes in flight decide, so the pairs alternate. */
Test(spread, equal_pairs_share_evenly)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd, n[2] = {0, 0};
    for (int i = 0; i < 100; i++) {
        cr_assert_geq(pick(l, p, MIB, &ld, &pd), 0);
        n[ld]++;
    }
    cr_expect_eq(n[0], 50);
    cr_expect_eq(n[1], 50);
    tern_topology_free(l);
    tern_topology_free(p);
}

/* A pair measured 4 times as fast gets about 4 times the bytes. */
Test(spread, faster_pair_gets_more)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd, n[2] = {0, 0};
    int s0 = pick(l, p, MIB, &ld, &pd), s1 = pick(l, p, MIB, &ld, &pd);
    cr_assert(s0 >= 0 && s1 >= 0 && s0 != s1);
    tern_spread_done(&sp, s0, MIB, 0, -1);
    tern_spread_done(&sp, s1, MIB, 0, -1);
    atomic_store(&sp.p[s0].rate, 400 * MIB);
    atomic_store(&sp.p[s1].rate, 100 * MIB);
    for (int i = 0; i < 100; i++) {
        int s = pick(l, p, MIB, &ld, &pd);
        n[s == s0 ? 0 : 1]++;
    }
    cr_expect(n[0] >= 78 && n[0] <= 82, "fast pair %d of 100 slices", n[0]);
    tern_topology_free(l);
    tern_topology_free(p);
}

/* Samples come from windows of completions: a pair that moved 10 MiB in
 * about 100 ms measures about 100 MiB/s. */
Test(spread, rate_is_measured_over_a_window)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd;
    int s = pick(l, p, MIB, &ld, &pd);
    uint64_t t0 = tern_now_ns();
    tern_spread_done(&sp, s, MIB, t0, 1); /* opens the window */
    for (int i = 0; i < 10; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        tern_spread_done(&sp, s, MIB, t0, 1);
    }
    uint64_t r = atomic_load(&sp.p[s].rate);
    cr_expect(r > 60 * MIB && r < 140 * MIB, "rate %llu B/s", (unsigned long long)r);
    cr_expect_eq(tern_spread_bytes(&sp, ld, pd), 11 * MIB, "every byte that came back counts");
    cr_expect_eq(tern_spread_bytes(&sp, ld, pd == 0 ? 1 : 0), 0, "not a pair");
    tern_topology_free(l);
    tern_topology_free(p);
}

/* A silent pair while the other completes: stalled, paused, avoided, then
 * probed one slice at a time; a good probe ends it, a failed one pauses
 * it for twice as long. */
Test(spread, stall_pause_and_probation)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd;
    int s0 = pick(l, p, MIB, &ld, &pd), s1 = pick(l, p, MIB, &ld, &pd);
    uint64_t now = tern_now_ns(), ms = 1000000;
    tern_spread_stall st[4];
    cr_expect_eq(tern_spread_stalls(&sp, now, st, 4), 0, "nobody silent yet");
    /* s1 completes long after s0 went busy; s0 says nothing */
    atomic_store(&sp.p[s0].busy_since_ns, now - 2000 * ms);
    atomic_store(&sp.p[s1].last_done_ns, now - 10 * ms);
    cr_assert_eq(tern_spread_stalls(&sp, now, st, 4), 1);
    cr_expect_eq(st[0].ldev, ld == 0 ? 1 : 0);
    cr_expect_eq(st[0].pause_ms, TERN_SPREAD_COOLDOWN_MIN_MS);
    cr_expect(tern_spread_paused(&sp, s0, now));
    cr_expect_eq(tern_spread_stalls(&sp, now, st, 4), 0, "a paused pair is not found again");
    /* the slices on s0 come back failed while it is paused: no new pause */
    tern_spread_done(&sp, s0, MIB, 0, 0);
    cr_expect_eq(atomic_load(&sp.p[s0].cooldown_ms), TERN_SPREAD_COOLDOWN_MIN_MS);
    for (int i = 0; i < 5; i++) /* s0 is idle now, yet paused */
        cr_expect_eq(pick(l, p, MIB, &ld, &pd), s1, "the paused pair sits out");
    /* the pause ends: one probe on s0, not two */
    atomic_store(&sp.p[s0].paused_until_ns, 0);
    cr_expect_eq(pick(l, p, 1, &ld, &pd), s0, "the probe (s1 is loaded)");
    cr_expect_eq(pick(l, p, 1, &ld, &pd), s1, "one slice at a time on probation");
    tern_spread_done(&sp, s0, 1, tern_now_ns(), 0); /* the probe failed */
    cr_expect(tern_spread_paused(&sp, s0, tern_now_ns()));
    cr_expect_eq(atomic_load(&sp.p[s0].cooldown_ms), 2 * TERN_SPREAD_COOLDOWN_MIN_MS);
    atomic_store(&sp.p[s0].paused_until_ns, 0);
    cr_expect_eq(pick(l, p, 1, &ld, &pd), s0);
    tern_spread_done(&sp, s0, 1, tern_now_ns(), 1); /* it moves again */
    cr_expect_eq(atomic_load(&sp.p[s0].probation), 0);
    cr_expect_eq(atomic_load(&sp.p[s0].cooldown_ms), 0);
    tern_topology_free(l);
    tern_topology_free(p);
}

/* A pair that fails a slice itself (a connect, a broken connection) is
 * paused like a stalled one; a slice taken back for another reason is not
 * its fault. */
Test(spread, pair_failure_pauses)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd;
    int s0 = pick(l, p, MIB, &ld, &pd), s1 = pick(l, p, MIB, &ld, &pd);
    tern_spread_done(&sp, s1, MIB, 0, -1);
    cr_expect_not(tern_spread_paused(&sp, s1, tern_now_ns()));
    tern_spread_done(&sp, s0, MIB, 0, 0);
    cr_expect(tern_spread_paused(&sp, s0, tern_now_ns()));
    cr_expect_eq(atomic_load(&sp.p[s0].cooldown_ms), TERN_SPREAD_COOLDOWN_MIN_MS);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(pick(l, p, MIB, &ld, &pd), s1);
    tern_topology_free(l);
    tern_topology_free(p);
}

/* The whole peer silent: no pair is singled out (the peer's own healing). */
Test(spread, silent_peer_is_not_a_stalled_pair)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd;
    int s0 = pick(l, p, MIB, &ld, &pd), s1 = pick(l, p, MIB, &ld, &pd);
    uint64_t now = tern_now_ns(), ms = 1000000;
    atomic_store(&sp.p[s0].busy_since_ns, now - 2000 * ms);
    atomic_store(&sp.p[s1].busy_since_ns, now - 2000 * ms);
    tern_spread_stall st[4];
    cr_expect_eq(tern_spread_stalls(&sp, now, st, 4), 0);
    tern_topology_free(l);
    tern_topology_free(p);
}

/* Paused everywhere: the pick still goes somewhere. */
Test(spread, all_paused_still_picks)
{
    tern_spread_reset(&sp);
    tern_topology *l = topo(AB), *p = topo(AB);
    int ld, pd;
    int s0 = pick(l, p, MIB, &ld, &pd), s1 = pick(l, p, MIB, &ld, &pd);
    uint64_t far = tern_now_ns() + 60000000000ull;
    atomic_store(&sp.p[s0].paused_until_ns, far);
    atomic_store(&sp.p[s1].paused_until_ns, far);
    cr_expect_geq(pick(l, p, MIB, &ld, &pd), 0);
    tern_topology_free(l);
    tern_topology_free(p);
}
