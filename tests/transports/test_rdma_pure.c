/* Unit tests for the pure parts of the RDMA transport (transports/rdma/
 * rdma_attr.c): MTU clamp, GID choice from a given table, GID text forms,
 * and the exact ibv_qp_attr + mask of each QP transition (docs/rdma.md).  No RDMA device is needed; the VM suite (tests/system/vm) runs the
 * same code against Soft-RoCE. */
#if __has_include(<infiniband/verbs.h>)
#include <criterion/criterion.h>
#include <string.h>

#include "rdma_internal.h"

static const uint8_t GID_LL[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x08, 0x7b, 0xfc, 0xff, 0xfe, 0x15, 0x88, 0x02};
static const uint8_t GID_V4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1};
static const uint8_t GID_V6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7};

static rd_gid_entry ent(const uint8_t *raw, int type, int ndev)
{
    rd_gid_entry e;
    memset(&e, 0, sizeof e);
    if (raw)
        memcpy(e.raw, raw, 16);
    e.type = type;
    e.has_ndev = ndev;
    return e;
}

/* ---- MTU -------------------------------------------------------------------- */

Test(rdma_mtu, bytes_to_enum_and_back)
{
    const int ok[] = {256, 512, 1024, 2048, 4096};
    const enum ibv_mtu want[] = {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096};
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(rd_mtu_from_bytes(ok[i]), want[i], "mtu %d", ok[i]);
        cr_expect_eq(rd_mtu_to_bytes(want[i]), ok[i]);
    }
}

Test(rdma_mtu, refuses_other_sizes)
{
    const int64_t bad[] = {0, -1, 1, 128, 255, 300, 1500, 4095, 8192, 9000, 1LL << 40};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(rd_mtu_from_bytes(bad[i]), 0, "mtu %lld accepted", (long long)bad[i]);
    cr_expect_eq(rd_mtu_to_bytes((enum ibv_mtu)0), 0);
    cr_expect_eq(rd_mtu_to_bytes((enum ibv_mtu)6), 0);
}

Test(rdma_mtu, path_mtu_is_the_smaller)
{
    /* rxe on a 1500-byte netdev reports 1024: a 4096 config must not win. */
    cr_expect_eq(rd_path_mtu(IBV_MTU_1024, IBV_MTU_4096), IBV_MTU_1024);
    cr_expect_eq(rd_path_mtu(IBV_MTU_4096, IBV_MTU_1024), IBV_MTU_1024);
    cr_expect_eq(rd_path_mtu(IBV_MTU_4096, IBV_MTU_4096), IBV_MTU_4096);
    cr_expect_eq(rd_path_mtu(IBV_MTU_256, IBV_MTU_2048), IBV_MTU_256);
    cr_expect_eq(rd_path_mtu((enum ibv_mtu)0, IBV_MTU_2048), IBV_MTU_2048);
}

/* ---- GID choice -------------------------------------------------------------- */

Test(rdma_gid, rxe_table_picks_the_ipv4_entry)
{
    /* What rxe on kernel 6.1 shows: 0 link-local, 1 ::ffff:10.77.0.1. */
    rd_gid_entry t[4] = {ent(GID_LL, IBV_GID_TYPE_ROCE_V2, 1),
                                ent(GID_V4, IBV_GID_TYPE_ROCE_V2, 1), ent(NULL, -1, 0),
                                ent(NULL, -1, 0)};
    cr_expect_eq(rd_gid_choose(t, 4), 1);
}

Test(rdma_gid, order_of_preference)
{
    rd_gid_entry v6_no = ent(GID_V6, IBV_GID_TYPE_ROCE_V2, 0);
    rd_gid_entry v6_nd = ent(GID_V6, IBV_GID_TYPE_ROCE_V2, 1);
    rd_gid_entry v4_no = ent(GID_V4, IBV_GID_TYPE_ROCE_V2, 0);
    rd_gid_entry v4_nd = ent(GID_V4, IBV_GID_TYPE_ROCE_V2, 1);
    cr_expect_eq(rd_gid_rank(&v4_nd), 0);
    cr_expect_eq(rd_gid_rank(&v4_no), 1);
    cr_expect_eq(rd_gid_rank(&v6_nd), 2);
    cr_expect_eq(rd_gid_rank(&v6_no), 3);

    rd_gid_entry a[4] = {v6_no, v6_nd, v4_no, v4_nd};
    cr_expect_eq(rd_gid_choose(a, 4), 3, "IPv4 on a netdev first");
    cr_expect_eq(rd_gid_choose(a, 3), 2, "then IPv4 without a netdev");
    cr_expect_eq(rd_gid_choose(a, 2), 1, "then IPv6 on a netdev");
    cr_expect_eq(rd_gid_choose(a, 1), 0, "then IPv6 without");
}

Test(rdma_gid, ties_go_to_the_lowest_index)
{
    rd_gid_entry a[3] = {ent(GID_LL, IBV_GID_TYPE_ROCE_V2, 1),
                                ent(GID_V4, IBV_GID_TYPE_ROCE_V2, 1),
                                ent(GID_V4, IBV_GID_TYPE_ROCE_V2, 1)};
    cr_expect_eq(rd_gid_choose(a, 3), 1);
}

Test(rdma_gid, skips_roce_v1_unknown_and_empty)
{
    rd_gid_entry a[4] = {ent(GID_V4, IBV_GID_TYPE_ROCE_V1, 1), ent(GID_V4, -1, 1),
                                ent(NULL, IBV_GID_TYPE_ROCE_V2, 1),
                                ent(GID_V6, IBV_GID_TYPE_ROCE_V2, 0)};
    cr_expect_eq(rd_gid_rank(&a[0]), -1);
    cr_expect_eq(rd_gid_rank(&a[1]), -1);
    cr_expect_eq(rd_gid_rank(&a[2]), -1, "an all-zero GID is an empty slot");
    cr_expect_eq(rd_gid_choose(a, 4), 3);
    cr_expect_eq(rd_gid_choose(a, 3), -1, "nothing usable");
    cr_expect_eq(rd_gid_choose(a, 0), -1);
    cr_expect_eq(rd_gid_choose(NULL, 5), -1);
}

Test(rdma_gid, infiniband_port_uses_its_ib_gid)
{
    rd_gid_entry a[2] = {ent(GID_LL, IBV_GID_TYPE_IB, 0), ent(NULL, IBV_GID_TYPE_IB, 0)};
    cr_expect_eq(rd_gid_choose(a, 2), 0);
}

Test(rdma_gid, sysfs_type_text)
{
    cr_expect_eq(rd_gid_type_parse("RoCE v2"), IBV_GID_TYPE_ROCE_V2);
    cr_expect_eq(rd_gid_type_parse("RoCE V2\n"), IBV_GID_TYPE_ROCE_V2);
    cr_expect_eq(rd_gid_type_parse("IB/RoCE v1"), IBV_GID_TYPE_ROCE_V1);
    cr_expect_eq(rd_gid_type_parse("IB"), IBV_GID_TYPE_IB);
    cr_expect_eq(rd_gid_type_parse("IBX"), -1);
    cr_expect_eq(rd_gid_type_parse(""), -1);
    cr_expect_eq(rd_gid_type_parse(NULL), -1);
}

/* ---- GID text forms ---------------------------------------------------------- */

Test(rdma_gid_text, handshake_form_round_trip)
{
    char s[48];
    uint8_t back[16];
    rd_gid_format(GID_LL, s);
    cr_expect_str_eq(s, "fe:80:00:00:00:00:00:00:08:7b:fc:ff:fe:15:88:02");
    cr_assert_eq(rd_gid_parse(s, back), 0);
    cr_expect_eq(memcmp(back, GID_LL, 16), 0);
    cr_assert_eq(rd_gid_parse("FE:80:00:00:00:00:00:00:08:7B:FC:FF:FE:15:88:02", back), 0);
    cr_expect_eq(memcmp(back, GID_LL, 16), 0);
}

Test(rdma_gid_text, handshake_form_refuses_garbage)
{
    uint8_t g[16];
    const char *bad[] = {
        NULL, "", "fe80::1", "fe:80:00:00:00:00:00:00:08:7b:fc:ff:fe:15:88",
        "fe:80:00:00:00:00:00:00:08:7b:fc:ff:fe:15:88:02:", "fe-80:00:00:00:00:00:00:08:7b:fc:ff:fe:15:88:02",
        "fe:80:00:00:00:00:00:00:08:7b:fc:ff:fe:15:88:0g", "fe:80:00:00:00:00:00:00:08:7b:fc:ff:fe:15:8:802",
        "0000:0000:0000:0000:0000:ffff:0a4d:0001",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(rd_gid_parse(bad[i], g), -1, "accepted '%s'", bad[i] ? bad[i] : "NULL");
}

Test(rdma_gid_text, sysfs_form)
{
    uint8_t g[16];
    cr_assert_eq(rd_gid_parse_sysfs("0000:0000:0000:0000:0000:ffff:0a4d:0001\n", g), 0);
    cr_expect_eq(memcmp(g, GID_V4, 16), 0);
    cr_expect_eq(rd_gid_parse_sysfs("0000:0000:0000", g), -1);
    cr_expect_eq(rd_gid_parse_sysfs("0000:0000:0000:0000:0000:ffff:0a4d:0001:", g), -1);
    cr_expect_eq(rd_gid_parse_sysfs(NULL, g), -1);
}

/* ---- QP transitions: the exact attributes and masks ------------------------------ */

static rd_qp_cfg cfg_for(enum ibv_mtu active, enum ibv_mtu mtu, int tc)
{
    rd_qp_cfg c = {.port_num = 1, .pkey_index = 0, .sgid_index = 1,
                          .traffic_class = tc, .active_mtu = active, .mtu = mtu};
    return c;
}

Test(rdma_qp, any_to_reset)
{
    struct ibv_qp_attr a;
    memset(&a, 0xab, sizeof a);
    cr_expect_eq(rd_attr_reset(&a), IBV_QP_STATE);
    cr_expect_eq(a.qp_state, IBV_QPS_RESET);
    cr_expect_eq(a.port_num, 0, "the attribute struct is zeroed first");
}

Test(rdma_qp, reset_to_init)
{
    rd_qp_cfg c = cfg_for(IBV_MTU_4096, IBV_MTU_4096, -1);
    c.port_num = 2;
    c.pkey_index = 3;
    struct ibv_qp_attr a;
    memset(&a, 0xab, sizeof a);
    int mask = rd_attr_init(&c, &a);
    cr_expect_eq(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    cr_expect_eq(a.qp_state, IBV_QPS_INIT);
    cr_expect_eq(a.port_num, 2);
    cr_expect_eq(a.pkey_index, 3);
    cr_expect_eq(a.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    cr_expect_eq(a.path_mtu, 0);
}

Test(rdma_qp, init_to_rtr)
{
    rd_qp_cfg c = cfg_for(IBV_MTU_1024, IBV_MTU_4096, -1);
    rd_peer_qp p = {.lid = 0x1234, .qp_num = 0x11};
    memcpy(p.gid, GID_V4, 16);
    struct ibv_qp_attr a;
    memset(&a, 0xab, sizeof a);
    int mask = rd_attr_rtr(&c, &p, &a);
    cr_expect_eq(mask, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
    cr_expect_eq(a.qp_state, IBV_QPS_RTR);
    cr_expect_eq(a.path_mtu, IBV_MTU_1024, "clamped to the port's active MTU");
    cr_expect_eq(memcmp(a.ah_attr.grh.dgid.raw, GID_V4, 16), 0);
    cr_expect_eq(a.ah_attr.grh.sgid_index, 1);
    cr_expect_eq(a.ah_attr.grh.hop_limit, 16);
    cr_expect_eq(a.ah_attr.grh.traffic_class, 0, "unset traffic class stays 0");
    cr_expect_eq(a.ah_attr.grh.flow_label, 0);
    cr_expect_eq(a.ah_attr.dlid, 0x1234);
    cr_expect_eq(a.ah_attr.sl, 0);
    cr_expect_eq(a.ah_attr.src_path_bits, 0);
    cr_expect_eq(a.ah_attr.static_rate, 0);
    cr_expect_eq(a.ah_attr.is_global, 1);
    cr_expect_eq(a.ah_attr.port_num, 1);
    cr_expect_eq(a.dest_qp_num, 0x11);
    cr_expect_eq(a.rq_psn, 0);
    cr_expect_eq(a.max_dest_rd_atomic, 16);
    cr_expect_eq(a.min_rnr_timer, 12);
    cr_expect_eq(a.timeout, 0, "RTS attributes are not set at RTR");
}

Test(rdma_qp, init_to_rtr_with_traffic_class_and_small_mtu)
{
    rd_qp_cfg c = cfg_for(IBV_MTU_4096, IBV_MTU_2048, 106);
    rd_peer_qp p = {.lid = 0, .qp_num = 0xabcdef};
    memcpy(p.gid, GID_LL, 16);
    struct ibv_qp_attr a;
    rd_attr_rtr(&c, &p, &a);
    cr_expect_eq(a.path_mtu, IBV_MTU_2048, "the configured mtu when smaller");
    cr_expect_eq(a.ah_attr.grh.traffic_class, 106);
    cr_expect_eq(a.dest_qp_num, 0xabcdef);
}

Test(rdma_qp, init_to_rtr_takes_the_peers_smaller_mtu)
{
    rd_qp_cfg c = cfg_for(IBV_MTU_4096, IBV_MTU_4096, -1);
    rd_peer_qp p = {.qp_num = 1, .mtu = IBV_MTU_256};
    struct ibv_qp_attr a;
    rd_attr_rtr(&c, &p, &a);
    cr_expect_eq(a.path_mtu, IBV_MTU_256);
    p.mtu = IBV_MTU_4096;
    c.mtu = IBV_MTU_1024;
    rd_attr_rtr(&c, &p, &a);
    cr_expect_eq(a.path_mtu, IBV_MTU_1024, "a larger peer MTU changes nothing");
    p.mtu = (enum ibv_mtu)0;
    rd_attr_rtr(&c, &p, &a);
    cr_expect_eq(a.path_mtu, IBV_MTU_1024, "no peer MTU: ours");
    p.mtu = (enum ibv_mtu)9;
    rd_attr_rtr(&c, &p, &a);
    cr_expect_eq(a.path_mtu, IBV_MTU_1024, "a nonsense peer MTU is ignored");
}

Test(rdma_qp, rtr_to_rts)
{
    struct ibv_qp_attr a;
    memset(&a, 0xab, sizeof a);
    int mask = rd_attr_rts(&a);
    cr_expect_eq(mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    cr_expect_eq(a.qp_state, IBV_QPS_RTS);
    cr_expect_eq(a.timeout, 14);
    cr_expect_eq(a.retry_cnt, 7);
    cr_expect_eq(a.rnr_retry, 7);
    cr_expect_eq(a.sq_psn, 0);
    cr_expect_eq(a.max_rd_atomic, 16);
    cr_expect_eq(a.path_mtu, 0);
}

Test(rdma_qp, step_messages_name_what_to_check)
{
    cr_expect_str_eq(rd_step_message(TERN_RDMA_STEP_RESET), "Failed to modify QP to RESET");
    cr_expect_str_eq(rd_step_message(TERN_RDMA_STEP_INIT),
                     "Failed to modify QP to INIT, check local context port num");
    cr_expect_str_eq(rd_step_message(TERN_RDMA_STEP_RTR),
                     "Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num");
    cr_expect_str_eq(rd_step_message(TERN_RDMA_STEP_RTS), "Failed to modify QP to RTS");
    cr_expect_str_eq(rd_step_message((rd_step)42), "Failed to modify QP");
}

/* ---- handshake and options -------------------------------------------------- */

Test(rdma_misc, qp_count_mismatch_is_refused_with_its_message)
{
    char err[256] = "";
    cr_expect_eq(rd_check_qp_count(2, 2, "10.0.0.1:12001@rxe0", err, sizeof err), 0);
    cr_expect_str_eq(err, "");
    cr_expect_eq(rd_check_qp_count(2, 3, "10.0.0.1:12001@rxe0", err, sizeof err),
                 TERN_ERR_REFUSED);
    cr_expect(strstr(err, "QP count mismatch") != NULL, "%s", err);
    cr_expect(strstr(err, "10.0.0.1:12001@rxe0 has 3 QPs") != NULL, "%s", err);
    cr_expect(strstr(err, "this side has 2") != NULL, "%s", err);
    cr_expect(strstr(err, "qp_per_endpoint") != NULL, "%s", err);
    char tiny[8];
    cr_expect_eq(rd_check_qp_count(1, 4, NULL, tiny, sizeof tiny), TERN_ERR_REFUSED);
    cr_expect_eq(strlen(tiny), 7u);
    cr_expect_eq(rd_check_qp_count(1, 4, NULL, NULL, 0), TERN_ERR_REFUSED);
}

Test(rdma_misc, device_allow_list)
{
    const char *const allow[] = {"mlx5_0", "rxe0"};
    cr_expect(rd_device_allowed(NULL, 0, "anything"));
    cr_expect(rd_device_allowed(allow, 0, "anything"));
    cr_expect(rd_device_allowed(allow, 2, "rxe0"));
    cr_expect(!rd_device_allowed(allow, 2, "rxe1"));
    cr_expect(!rd_device_allowed(allow, 2, "mlx5"));
    cr_expect(!rd_device_allowed(allow, 2, NULL));
}

Test(rdma_misc, work_requests_per_slice)
{
    cr_expect_eq(rd_wr_count(0, 4096), 1u);
    cr_expect_eq(rd_wr_count(1, 0), 1u);
    cr_expect_eq(rd_wr_count(4096, 4096), 1u);
    cr_expect_eq(rd_wr_count(4097, 4096), 2u);
    cr_expect_eq(rd_wr_count((16u << 20) + 3, 65536), 257u);
}
#else
#include <criterion/criterion.h>
Test(rdma_pure, skipped)
{
    cr_skip_test("libibverbs headers not installed (libibverbs-dev): the RDMA transport is not built");
}
#endif
