/* tests/system/test_shm_fallback.c: the same-host transport together with the
 * core's reaction to it.
 *  - A peer shm cannot reach (another pid namespace): shm returns
 *    TERN_ERR_UNREACHABLE and the core moves the peer to the next transport
 *    both sides list (tcp), which moves the data.
 *  - A peer that restarts at the same address is reached again on the SAME
 *    open segment: the core refetches its descriptor once the old process
 *    is gone.
 * Both rest on the core's negotiation fallback and segment healing. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#define IT_FILL_MUL 2654435761u
#define IT_FILL_SHIFT 9
#include "integration_common.h"
#include "shm_common.h"

TestSuite(shm_fallback, .timeout = 240);

Test(shm_fallback, peer_in_another_pid_namespace_falls_back_to_tcp)
{
    it_peer p;
    shm_peer_start_in_pid_ns(&p);
    tern_engine *e = shm_engine_new("shm,tcp", "test_shm_fallback");
    tern_segment_id seg = tern_segment_open(e, p.name);
    cr_assert_geq(seg, 0, "open %s: %s", p.name, tern_engine_last_error(e));
    const uint64_t n = (4u << 20) + 3;
    uint8_t *src = local_buf(e, n), *dst = local_buf(e, n);
    fill(src, n, 41);
    memset(dst, 0, n);
    write_read_back(e, seg, src, dst, p.a + 5, n, "the data moved after the fallback");
    char xp[32] = "";
    cr_assert_eq(tern_segment_transport(e, seg, xp, sizeof xp), 0);
    cr_assert_str_eq(xp, "tcp", "after shm said unreachable the segment uses %s", xp);
    peer_check_canaries(&p);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(shm_fallback, restarted_peer_reached_again_on_the_same_segment)
{
    /* "fixed": the restarted peer's buffers are at the same addresses, so
     * the old descriptor still covers them and only the process changed. */
    it_peer p;
    char *argv[] = {(char *)SHM_PEER_PATH, "shm,tcp", "127.0.0.1:0", "fixed", NULL};
    peer_startv(&p, argv);
    tern_engine *e = shm_engine_new("shm,tcp", "test_shm_fallback");
    tern_segment_id seg = open_expect(e, &p, "shm");
    uint8_t *src = local_buf(e, 1 << 20), *dst = local_buf(e, 1 << 20);
    fill(src, 1 << 20, 1);
    write_read_back(e, seg, src, dst, p.a, 1 << 20, "before the restart");
    char name[128];
    snprintf(name, sizeof name, "%s", p.name);
    kill(p.pid, SIGKILL);
    peer_reap(&p);
    it_peer q;
    char *argv2[] = {(char *)SHM_PEER_PATH, "shm,tcp", name, "fixed", NULL};
    peer_startv(&q, argv2);
    cr_assert_eq(q.a, p.a, "the restarted peer's buffer moved");
    /* The first request may still meet the old process's endpoint and fail;
     * one of the next three must reach the new process. */
    fill(src, 1 << 20, 2);
    char msg[512] = "";
    tern_status st = TERN_FAILED;
    for (int i = 0; i < 3 && st != TERN_COMPLETED; i++)
        st = one(e, seg, TERN_WRITE, src, q.a, 1 << 20, msg, sizeof msg);
    cr_assert_eq(st, TERN_COMPLETED, "the restarted peer was not reached again: %s", msg);
    cr_assert_eq(one(e, seg, TERN_READ, dst, q.a, 1 << 20, msg, sizeof msg), TERN_COMPLETED,
                 "%s", msg);
    cr_assert_eq(memcmp(src, dst, 1 << 20), 0, "after the restart the data differs");
    char xp[32] = "";
    cr_assert_eq(tern_segment_transport(e, seg, xp, sizeof xp), 0);
    cr_assert_str_eq(xp, "shm", "the restarted peer is reached over %s", xp);
    peer_check_canaries(&q);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&q);
}
