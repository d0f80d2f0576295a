#define _GNU_SOURCE
/* Notifications across two processes (tests/support/helpers/api_peer.c receives):
 * - a notification riding on a batch is never observed before its data:
 *   10,000 rounds, each checked byte for byte by the receiver at receipt;
 * - 2,000 notifications sent faster than they are read: every one is
 *   either delivered or refused to the sender with an error, never lost. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "integration_common.h"
#include "tern/tern.h"

#define PEER TERN_BUILD_DIR "/bin/tern-test-api-peer"

static const char *yaml = "server_name: 127.0.0.1:0\n"
                          "metadata: p2p\n"
                          "transports:\n"
                          "  - name: tcp\n"
                          "    slice_size: 16K\n"
                          "log_level: warn\n";

/* The peer program with up to two arguments (a2 may be NULL); its READY
 * line names its server. */
static void start(it_peer *p, const char *a1, const char *a2)
{
    char *argv[] = {(char *)PEER, (char *)a1, (char *)a2, NULL};
    peer_spawn(p, argv);
    char buf[256];
    peer_line(p, buf, sizeof buf, 30000);
    cr_assert_eq(sscanf(buf, "READY %127s", p->name), 1, "%s", buf);
}

static tern_engine *mk(void)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "test_api_twoproc", err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    return e;
}

static uint8_t pattern(unsigned k, size_t i) { return (uint8_t)(k * 131u + (i >> 12) * 7u + 1u); }

Test(api_twoproc, batch_notification_never_before_its_data, .timeout = 590)
{
    enum { LEN = 128 << 10, NREQ = 4, ROUNDS = 10000 };
    char arg[32];
    snprintf(arg, sizeof arg, "%d", LEN);
    it_peer p;
    start(&p, "recv", arg);
    tern_engine *e = mk();
    tern_segment_id s = tern_segment_open(e, p.name);
    cr_assert_geq(s, 0, "%s", tern_engine_last_error(e));
    tern_buffer_info dst;
    cr_assert_eq(tern_segment_buffer_find(e, s, "dst", &dst), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(dst.length, LEN);
    uint8_t *src = aligned_alloc(4096, 2 * LEN);
    cr_assert_eq(tern_register_memory(e, src, 2 * LEN, NULL), 0);
    tern_batch *b = tern_batch_alloc(e, NREQ);
    unsigned stale = 0;
    for (unsigned k = 0; k < ROUNDS; k++) {
        uint8_t *from = src + (k % 2) * LEN;
        for (size_t i = 0; i < LEN; i++)
            from[i] = pattern(k, i);
        /* Scattered: the last block first, so the first bytes to land
         * are not the ones a premature check would look at last. */
        tern_request r[NREQ];
        for (int q = 0; q < NREQ; q++) {
            size_t off = (size_t)(NREQ - 1 - q) * (LEN / NREQ);
            r[q] = (tern_request){TERN_WRITE, from + off, s, dst.addr + off, LEN / NREQ, 0};
        }
        char msg[300];
        snprintf(msg, sizeof msg, "round %u %s", k, tern_engine_server_name(e));
        cr_assert_eq(tern_batch_submit_with_notify(b, r, NREQ, s, "round", msg), NREQ);
        cr_assert_eq(tern_batch_wait(b, 30000), 0, "round %u: %s", k, tern_engine_last_error(e));
        char name[16], ack[64];
        cr_assert_eq(tern_notify_recv_wait(e, NULL, 0, name, sizeof name, ack, sizeof ack, 30000),
                     1, "round %u: no ack", k);
        unsigned got;
        int bad;
        cr_assert_eq(sscanf(ack, "%u %d", &got, &bad), 2, "%s", ack);
        cr_assert_eq(got, k);
        stale += (unsigned)bad;
        cr_assert_eq(tern_batch_reset(b), 0);
    }
    cr_assert_eq(tern_notify_send(e, s, "done", ""), 0);
    char res[128];
    peer_line(&p, res, sizeof res, 30000);
    unsigned rounds, badr;
    cr_assert_eq(sscanf(res, "RESULT rounds=%u bad=%u", &rounds, &badr), 2, "%s", res);
    cr_assert_eq(rounds, ROUNDS);
    cr_assert_eq(badr, 0, "%u rounds had a stale byte at receipt", badr);
    cr_assert_eq(stale, 0);
    cr_assert_eq(peer_reap(&p), 0);
    cr_assert_eq(tern_batch_free(b), 0);
    tern_engine_destroy(e);
    free(src);
}

Test(api_twoproc, flood_is_delivered_or_refused_never_dropped, .timeout = 300)
{
    enum { N = 2000 };
    it_peer p;
    start(&p, "flood", NULL);
    tern_engine *e = mk();
    tern_segment_id s = tern_segment_open(e, p.name);
    cr_assert_geq(s, 0, "%s", tern_engine_last_error(e));
    unsigned ok = 0, busy = 0;
    char msg[64];
    for (unsigned i = 0; i < N; i++) {
        snprintf(msg, sizeof msg, "n%u", i);
        int rc = tern_notify_send(e, s, "flood", msg);
        if (rc == 0)
            ok++;
        else if (rc == TERN_ERR_BUSY)
            busy++;
        else
            cr_assert_fail("send %u: %d %s", i, rc, tern_engine_last_error(e));
    }
    cr_assert_eq(ok + busy, N);
    cr_assert_gt(busy, 0, "the receiver read nothing: its queue (%d) must have refused some",
                 TERN_NOTIFY_QUEUE);
    tern_notify_stats st;
    tern_notify_stats_get(e, &st);
    cr_assert_eq(st.sent, ok);
    cr_assert_eq(st.send_failed, busy);
    fprintf(p.in, "GO\n");
    fflush(p.in);
    char res[128];
    peer_line(&p, res, sizeof res, 60000);
    unsigned received, refused;
    cr_assert_eq(sscanf(res, "RECEIVED %u REFUSED %u", &received, &refused), 2, "%s", res);
    cr_assert_eq(received, ok, "accepted %u, received %u: a silent drop", ok, received);
    cr_assert_eq(refused, busy);
    cr_assert_eq(peer_reap(&p), 0);
    tern_engine_destroy(e);
}
