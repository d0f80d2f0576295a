/* The RDMA integration suite: runs INSIDE the Soft-RoCE VM (tests/system/vm/
 * run-in-vm.sh, registered by tests/system/vm/vm.cmake as the CTest test rdma_vm).
 *
 * Each test forks: the parent and the child are two independent processes,
 * each loading libtern-rdma.so through the real loader (YAML config ->
 * tern_plugins_load) and registering its own buffer.  They exchange the
 * handshake descriptors (JSON, as the engine would) over a socketpair; the
 * child plays the passive side (ep_open passive, ep_connect with the
 * active side's descriptor, reply with its own descriptor and reply_msg),
 * the parent the active side.  Data moves over rxe0 with RDMA WRITE/READ
 * and is checked byte for byte by the side that owns the memory.
 *
 * The harness (sides, pairs, messages) is rdma_vm_pair.c; the concurrency
 * case is rdma_vm_concurrent.c.  Outside the VM (no rxe0) every test skips
 * and says why. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "desc/desc.h"
#include "plugin/plugin.h"
#include "rdma_vm_pair.h"
#include "tern/tern.h"
#include "tern/transport.h"

/* ---- the tests ---------------------------------------------------------------
 * Few process pairs (each start loads libibverbs over 9p under emulation,
 * which costs seconds), several checks per pair. */

TestSuite(rdma_vm, .timeout = 240);

static void close_in_flight(pair *pr)
{
    enum { N = 256 };
    static tern_slice sl[N];
    tern_slice *ptr[N];
    for (int i = 0; i < N; i++) {
        sl[i] = (tern_slice){.struct_size = sizeof sl[i], .opcode = TERN_WRITE,
                             .local = pr->a.buf + (uint64_t)i * SLICE,
                             .remote = pr->peer_buf + (uint64_t)i * SLICE, .length = SLICE,
                             .lkey = pr->a.keys.lkey[0], .rkey = pr->peer_rkey};
        ptr[i] = &sl[i];
    }
    int k = pr->a.t->submit(pr->a.ep, ptr, N);
    cr_assert_eq(k, N);
    pr->a.t->ep_close(pr->a.ep);
    pr->a.ep = NULL;
    int back = 0, ok = 0, closed = 0;
    time_t dl = time(NULL) + 60;
    while (back < N && time(NULL) < dl) {
        tern_slice *d[64];
        int got = vm_poll(d, 64, 100);
        for (int i = 0; i < got; i++) {
            back++;
            if (d[i]->status == 0)
                ok++;
            else if (d[i]->status == TERN_ERR_CLOSED)
                closed++;
        }
    }
    cr_expect_eq(back, N, "%d of %d slices came back", back, N);
    cr_expect_eq(ok + closed, N, "ok %d + closed %d != %d", ok, closed, N);
    /* How many finish before the close is a matter of timing (an idle host
     * completes all 256): what must hold is that none is lost. */
    cr_log_info("ep_close with 256 slices in flight: %d done, %d failed with TERN_ERR_CLOSED",
                ok, closed);
}

Test(rdma_vm, two_qps_write_read_sizes_error_reset_close)
{
    pair pr;
    char err[512] = "";
    pair_start(&pr, "max_wr: 8", "");
    cr_assert_eq(pair_connect(&pr, 0, err, sizeof err), 0, "connect: %s", err);

    /* WRITE and READ byte-exact at the data-path sizes, aligned and odd. */
    const uint64_t sizes[] = {1, 4096, 65536, 65537, BIG};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        write_read(&pr, sizes[i], 0, 0, 10 + i);
        write_read(&pr, sizes[i], 1, 3, 20 + i);
    }
    cr_log_info("WRITE+READ byte-exact at 1, 4096, 65536, 65537, %u bytes (2 QPs)", BIG);

    /* A wrong rkey: the peer NAKs, the slice fails with the verbs status. */
    fill(pr.a.buf, 4096, 42);
    int rc = xfer(&pr.a, TERN_WRITE, 0, pr.peer_buf, pr.peer_rkey ^ 0x5a5a00, 4096, err,
                  sizeof err);
    cr_expect_eq(rc, TERN_ERR_DEVICE, "rc %d: %s", rc, err);
    cr_expect(strstr(err, "remote access error") != NULL, "errmsg: %s", err);
    cr_log_info("completion error text: %s", err);
    /* The endpoint is down now: new work is refused so the core goes elsewhere. */
    tern_slice x = {.struct_size = sizeof x, .opcode = TERN_WRITE, .local = pr.a.buf,
                    .remote = pr.peer_buf, .length = 8, .lkey = pr.a.keys.lkey[0],
                    .rkey = pr.peer_rkey};
    tern_slice *px = &x;
    cr_expect_eq(pr.a.t->submit(pr.a.ep, &px, 1), TERN_ERR_DEVICE);

    /* Reset both sides (QPs back to RESET), handshake again, move data. */
    cr_assert_eq(pr.a.t->ep_reset(pr.a.ep), 0);
    msg_send(pr.fd, "RESET");
    char *r = msg_recv(pr.fd);
    cr_assert(r);
    cr_expect_str_eq(r, "RC 0");
    free(r);
    cr_assert_eq(pair_connect(&pr, 1, err, sizeof err), 0, "reconnect: %s", err);
    write_read(&pr, 65537, 0, 0, 43);

    /* Close with work in flight: every slice comes back, done or CLOSED. */
    close_in_flight(&pr);
    pair_stop(&pr);
}

Test(rdma_vm, four_qps_small_queues_split_slices_mtu)
{
    /* 4 QPs, 4 outstanding requests each, 16 KiB per request: a 16 MiB
     * transfer needs ~1000 requests, so most wait in the queue and each
     * 64 KiB slice is spread over several QPs.  The sides ask for different
     * MTUs (1024 / 256): both must use 256. */
    pair pr;
    char err[512] = "";
    pair_start(&pr, "qp_per_endpoint: 4;max_wr: 4;slice_size: 16K;mtu: 1024;devices: [rxe0]",
               "qp_per_endpoint: 4;max_wr: 4;slice_size: 16K;mtu: 256");
    tern_device_info dev[4];
    int n = pr.a.t->devices(pr.a.ctx, dev, 4);
    cr_assert_eq(n, 1);
    cr_expect_str_eq(dev[0].name, "rxe0");
    cr_expect_str_eq(dev[0].gid, "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01",
                     "the automatic GID is the IPv4 one");
    cr_assert_eq(pair_connect(&pr, 0, err, sizeof err), 0, "connect: %s", err);
    char q[1024] = "";
    cr_assert_eq(pr.a.t->query(pr.a.ctx, "", q, sizeof q), 0);
    cr_expect(strstr(q, "4 QP(s) each") != NULL, "%s", q);
    write_read(&pr, BIG, 5, 7, 31);
    write_read(&pr, 65537, 0, 1, 32);
    write_read(&pr, 1, 0, 0, 33);
    cr_log_info("WRITE+READ byte-exact over 4 QPs, max_wr 4, 16 KiB requests, path MTU 256");
    pair_stop(&pr);
}

Test(rdma_vm, qp_count_mismatch_malformed_descriptors_allow_list)
{
    pair pr;
    char err[512] = "";
    pair_start(&pr, "qp_per_endpoint: 2", "qp_per_endpoint: 3");
    int rc = pair_connect(&pr, 0, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_REFUSED, "rc %d: %s", rc, err);
    cr_expect(strstr(err, "QP count mismatch") && strstr(err, "has 2 QPs per endpoint") &&
                  strstr(err, "this side has 3") && strstr(err, "qp_per_endpoint"),
              "reply_msg from the passive side: %s", err);
    cr_log_info("passive side's reply_msg: %s", err);

    /* The active side refuses a 3-QP descriptor by itself too. */
    tern_desc *d = tern_desc_new();
    uint32_t qpn[3] = {1, 2, 3};
    tern_desc_set_u32_array(d, "qp_num", qpn, 3);
    tern_desc_set_u64(d, "local_lid", 0);
    tern_desc_set_str(d, "local_gid", "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01");
    err[0] = '\0';
    rc = pr.a.t->ep_connect(pr.a.ep, d, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_REFUSED);
    cr_expect(strstr(err, "QP count mismatch") && strstr(err, "has 3 QPs") &&
                  strstr(err, "this side has 2"), "%s", err);
    tern_desc_free(d);

    /* Malformed descriptors: refused with the key named, nothing posted. */
    const char *cases[][2] = {
        {"{}", "qp_num"},
        {"{\"qp_num\":[1,2],\"local_gid\":\"fe:80\"}", "local_lid"},
        {"{\"qp_num\":[1,2],\"local_lid\":70000,\"local_gid\":\"x\"}", "local_lid"},
        {"{\"qp_num\":[1,2],\"local_lid\":0,\"local_gid\":\"fe:80\"}", "local_gid"},
        {"{\"qp_num\":[1,\"x\"],\"local_lid\":0}", "qp_num"},
        {"{\"qp_num\":[1,2],\"local_lid\":0,\"local_gid\":"
         "\"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01\",\"mtu\":1500}", "mtu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct json_object *j = json_tokener_parse(cases[i][0]);
        err[0] = '\0';
        rc = pr.a.t->ep_connect(pr.a.ep, (const tern_desc *)j, err, sizeof err);
        cr_expect_eq(rc, TERN_ERR_PROTOCOL, "%s -> %d", cases[i][0], rc);
        cr_expect(strstr(err, cases[i][1]) != NULL, "%s -> %s", cases[i][0], err);
        json_object_put(j);
    }
    cr_expect_eq(pr.a.t->ep_connect(pr.a.ep, NULL, err, sizeof err), TERN_ERR_PROTOCOL);
    tern_slice x = {.struct_size = sizeof x, .opcode = TERN_WRITE, .local = pr.a.buf, .length = 8};
    tern_slice *px = &x;
    cr_expect_lt(pr.a.t->submit(pr.a.ep, &px, 1), 0, "submit on an unconnected endpoint");
    pair_stop(&pr);

    /* An allow-list that names no present device: no device, said clearly. */
    side s;
    rc = side_open(&s, "devices: [mlx5_9]", err, sizeof err);
    cr_expect_lt(rc, 0);
    cr_expect(strstr(err, "no usable RDMA device") != NULL, "%s", err);
    cr_log_info("allow-list without a match: %s", err);
    side_close(&s);
}

Test(rdma_vm, wrong_gid_index_fails_init_to_rtr)
{
    /* GID 3 of rxe0 is an empty slot (0 is fe80::, 1 the IPv4 one). */
    pair pr;
    char err[512] = "";
    pair_start(&pr, "", "gid_index: 3");
    int rc = pair_connect(&pr, 0, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_REFUSED, "rc %d: %s", rc, err);
    const char *want = "Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num: ";
    cr_expect(strncmp(err, want, strlen(want)) == 0 && strlen(err) > strlen(want),
              "reply_msg: %s", err);
    cr_log_info("passive side's reply_msg: %s", err);
    pair_stop(&pr);
}
