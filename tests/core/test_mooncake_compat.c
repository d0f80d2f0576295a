/* tests/core/test_mooncake_compat.c: Mooncake-shaped segment descriptors read
 * as they are (docs/protocol.md, "Mooncake compatibility"), what tern
 * publishes for a Mooncake reader, the Connection body's reference keys
 * and transport inference, and the Mooncake TCP data format's codec. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc/desc.h"
#include "desc/handshake_desc.h"
#include "desc/segment_desc.h"
#include "peer/mooncake_compat.h"
#include "desc/mooncake_desc.h"
#include "tern/errors.h"
#include "host/topology.h"
#include "../transports/tcp/tcp_mooncake.h"

static char err[512];

/* What Mooncake v0.3.10's TCP transport publishes (keys sorted, newline). */
static const char *mc_0310 =
    "{\"buffers\":[{\"addr\":140245110779904,\"length\":67108864,"
    "\"name\":\"mooncake-prefill-node-0017.example:15873\"}],"
    "\"name\":\"127.0.0.1:15873\",\"protocol\":\"tcp\",\"tcp_data_port\":16321,"
    "\"timestamp\":\"2026-11-30 23:28:04.776081\"}\n";
/* v0.3.12.post1 adds tcp_proto_version and a per-buffer protocol. */
static const char *mc_0312 =
    "{\"buffers\":[{\"addr\":140245110779904,\"length\":67108864,"
    "\"name\":\"127.0.0.1:15873\",\"protocol\":\"tcp\"}],"
    "\"name\":\"127.0.0.1:15873\",\"protocol\":\"tcp\",\"tcp_data_port\":16321,"
    "\"tcp_proto_version\":2,\"timestamp\":\"2026-11-30 23:28:04.776081\"}\n";

static tern_segment_desc *decode_ok(const char *json)
{
    tern_segment_desc *d = NULL;
    int rc = tern_segment_desc_decode(json, strlen(json), &d, err, sizeof err);
    cr_assert_eq(rc, 0, "refused: %s", err);
    return d;
}

Test(mooncake_desc, v0310_tcp_read_as_is)
{
    tern_segment_desc *d = decode_ok(mc_0310);
    cr_assert_str_eq(d->name, "127.0.0.1:15873");
    cr_assert_eq(d->tcp_data_port, 16321);
    cr_assert_eq(d->nbuffers, 1);
    /* the long name stands for an unknown location */
    cr_assert_str_eq(d->buffers[0].location, "*");
    cr_assert_not_null(tern_segment_find_buffer(d, 140245110779904ull + 4096, 65536));
    cr_assert_null(tern_segment_find_buffer(d, 140245110779904ull + 67108864 - 10, 65536));
    const tern_seg_transport *t = tern_segment_find_transport(d, "tcp");
    cr_assert_not_null(t);
    cr_assert_not_null(t->topology, "no matrix: every location must reach a device");
    cr_assert_geq(tern_topology_select(t->topology, "cpu:0", 0, NULL), 0);
    cr_assert_geq(tern_topology_select(t->topology, "*", 0, NULL), 0);
    cr_assert_not_null(tern_buffer_find_keys(&d->buffers[0], "tcp"));
    /* the blob names Mooncake's format and carries the descriptor's own
     * fields for the tcp transport (v0.3.10 has no tcp_proto_version) */
    cr_assert_str_eq(tern_desc_get_str(t->addr, "wire"), "mooncake");
    cr_assert_str_eq(tern_desc_get_str(t->addr, "name"), "127.0.0.1:15873");
    uint64_t port = 0, ver = 0;
    cr_assert_eq(tern_desc_get_u64(t->addr, "tcp_data_port", &port), 0);
    cr_assert_eq(port, 16321);
    cr_assert_neq(tern_desc_get_u64(t->addr, "tcp_proto_version", &ver), 0);
    tern_segment_desc_free(d);
}

Test(mooncake_desc, string_timestamp_becomes_a_content_generation)
{
    char other_time[1024], other_buf[1024];
    snprintf(other_time, sizeof other_time, "%s", mc_0310);
    memcpy(strstr(other_time, "23:28:04"), "23:29:59", 8);
    snprintf(other_buf, sizeof other_buf, "%s", mc_0310);
    memcpy(strstr(other_buf, "67108864"), "67108800", 8);
    tern_segment_desc *a = decode_ok(mc_0310), *b = decode_ok(other_time),
                      *c = decode_ok(other_buf);
    cr_assert_neq(a->timestamp, 0);
    cr_assert_eq(a->timestamp, b->timestamp, "same content, another time: same generation");
    cr_assert_neq(a->timestamp, c->timestamp, "another buffer: a new generation");
    tern_segment_desc_free(a);
    tern_segment_desc_free(b);
    tern_segment_desc_free(c);
}

Test(mooncake_desc, v0312_advertises_format_2)
{
    tern_segment_desc *d = decode_ok(mc_0312);
    const tern_seg_transport *t = tern_segment_find_transport(d, "tcp");
    uint64_t ver = 0;
    cr_assert_eq(tern_desc_get_u64(t->addr, "tcp_proto_version", &ver), 0);
    cr_assert_eq(ver, 2);
    cr_assert_str_eq(d->buffers[0].location, "127.0.0.1:15873");
    tern_segment_desc_free(d);
}

Test(mooncake_desc, still_refuses_what_is_wrong)
{
    static const char *bad[][2] = {
        {"{\"name\":\"h:1\",\"protocol\":\"tcp\",\"timestamp\":\"x\",\"buffers\":[{\"name\":"
         "\"n\",\"addr\":\"12\",\"length\":1}]}",
         "buffers[0].addr"},
        {"{\"name\":\"h:1\",\"protocol\":\"tcp\",\"tcp_data_port\":70000,\"buffers\":[]}",
         "tcp_data_port"},
        {"{\"name\":\"h:1\",\"protocol\":\"tcp\",\"buffers\":[{\"name\":\"n\",\"addr\":"
         "18446744073709551000,\"length\":4096}]}",
         "overflows"},
        {"{\"protocol\":\"tcp\",\"buffers\":[]}", "name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tern_segment_desc *d = NULL;
        int rc = tern_segment_desc_decode(bad[i][0], strlen(bad[i][0]), &d, err, sizeof err);
        cr_assert_eq(rc, TERN_ERR_PROTOCOL, "accepted: %s", bad[i][0]);
        cr_assert(strstr(err, bad[i][1]), "message \"%s\" lacks \"%s\"", err, bad[i][1]);
        cr_assert_null(d);
    }
}

Test(mooncake_desc, rdma_descriptor_with_string_timestamp)
{
    const char *j = "{\"buffers\":[{\"addr\":4096,\"length\":8192,\"lkey\":[5],\"name\":"
                    "\"cpu:0\",\"rkey\":[6]}],\"devices\":[{\"gid\":"
                    "\"fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55\",\"lid\":0,\"name\":"
                    "\"rxe0\"}],\"name\":\"10.0.0.2:15001\",\"priority_matrix\":{\"cpu:0\":"
                    "[[\"rxe0\"],[]]},\"protocol\":\"rdma\",\"tcp_data_port\":0,\"timestamp\":"
                    "\"2026-11-30 23:28:04.776081\"}\n";
    tern_segment_desc *d = decode_ok(j);
    cr_assert_eq(d->ntransports, 1);
    cr_assert_str_eq(d->transports[0].name, "rdma");
    cr_assert_eq(tern_buffer_find_keys(&d->buffers[0], "rdma")->rkey[0], 6);
    tern_segment_desc_free(d);
}

/* A transport's "publish.<key>" becomes the top-level <key>, the first
 * transport winning; the descriptor's own keys cannot be published over. */
Test(mooncake_desc, tern_publishes_what_mooncake_reads)
{
    tern_segment_desc d;
    tern_seg_transport t[2];
    memset(&d, 0, sizeof d);
    memset(t, 0, sizeof t);
    strcpy(d.name, "127.0.0.1:12001");
    strcpy(d.protocol, "tcp");
    strcpy(t[0].name, "tcp");
    strcpy(t[1].name, "other");
    t[0].addr = tern_desc_new();
    t[1].addr = tern_desc_new();
    tern_desc_set_u64(t[0].addr, "port", 40000);
    tern_desc_set_u64(t[0].addr, "publish.tcp_data_port", 40001);
    tern_desc_set_u64(t[0].addr, "publish.tcp_proto_version", 2);
    tern_desc_set_u64(t[1].addr, "publish.tcp_data_port", 50001);
    tern_desc_set_str(t[1].addr, "publish.name", "forged:1");
    d.transports = t;
    d.ntransports = 2;
    char *json = tern_segment_desc_encode(&d);
    json_object *o = json_tokener_parse(json), *v;
    cr_assert(json_object_object_get_ex(o, "tcp_proto_version", &v), "%s", json);
    cr_assert_eq(json_object_get_int(v), 2);
    cr_assert(json_object_object_get_ex(o, "tcp_data_port", &v));
    cr_assert_eq(json_object_get_int(v), 40001, "%s", json);
    cr_assert(json_object_object_get_ex(o, "name", &v));
    cr_assert_str_eq(json_object_get_string(v), "127.0.0.1:12001");
    cr_assert(json_object_object_get_ex(o, "protocol", &v));
    cr_assert_str_eq(json_object_get_string(v), "tcp");
    cr_assert_null(strstr(json, "publish."), "a publish key stayed in a blob: %s", json);
    cr_assert_not_null(strstr(json, "\"port\":40000"), "%s", json);
    json_object_put(o);
    free(json);
    tern_desc_free(t[0].addr);
    tern_desc_free(t[1].addr);
    d.ntransports = 0; /* without a publishing transport: the default */
    d.tcp_data_port = 7;
    json = tern_segment_desc_encode(&d);
    cr_assert_null(strstr(json, "tcp_proto_version"));
    cr_assert_not_null(strstr(json, "\"tcp_data_port\":7"), "%s", json);
    free(json);
}

/* A published value the core's decoder would refuse (a port out of range,
 * a handshake_addrs) stays out: the descriptor must stay readable. */
Test(mooncake_desc, unreadable_publish_is_left_out)
{
    tern_segment_desc d, *back = NULL;
    tern_seg_transport t;
    char err[256];
    memset(&d, 0, sizeof d);
    memset(&t, 0, sizeof t);
    strcpy(d.name, "127.0.0.1:12001");
    strcpy(t.name, "tcp");
    t.addr = tern_desc_new();
    tern_desc_set_u64(t.addr, "publish.tcp_data_port", 70000);
    tern_desc_set_str(t.addr, "publish.handshake_addrs", "h:1");
    d.transports = &t;
    d.ntransports = 1;
    d.tcp_data_port = 7;
    char *json = tern_segment_desc_encode(&d);
    cr_assert_not_null(strstr(json, "\"tcp_data_port\":7"), "%s", json);
    cr_assert_null(strstr(json, "handshake_addrs"), "%s", json);
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &back, err, sizeof err), 0, "%s",
                 err);
    tern_segment_desc_free(back);
    free(json);
    tern_desc_free(t.addr);
}

/* "publish.<key>" in a received blob (no tern encoder leaves one) is
 * dropped when decoded: it cannot reach the top level of a descriptor
 * this side encodes again, and decode -> encode -> decode is stable. */
Test(mooncake_desc, received_publish_keys_are_dropped)
{
    static const char in[] = "{\"name\":\"h:1\",\"protocol\":\"tcp\",\"buffers\":[],"
                             "\"tcp_data_port\":7,\"transports\":[{\"name\":\"tcp\",\"addr\":"
                             "{\"port\":9,\"publish.tcp_data_port\":5,\"publish.x\":1}}]}";
    tern_segment_desc *d = NULL, *d2 = NULL;
    char err[256];
    cr_assert_eq(tern_segment_desc_decode(in, strlen(in), &d, err, sizeof err), 0, "%s", err);
    uint64_t v;
    cr_assert_neq(tern_desc_get_u64(d->transports[0].addr, "publish.tcp_data_port", &v), 0);
    cr_assert_eq(tern_desc_get_u64(d->transports[0].addr, "port", &v), 0);
    cr_assert_eq(v, 9);
    char *json = tern_segment_desc_encode(d);
    cr_assert_null(strstr(json, "\"x\""), "%s", json);
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &d2, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(d2->tcp_data_port, 7, "%s", json);
    tern_segment_desc_free(d2);
    tern_segment_desc_free(d);
    free(json);
}

Test(mooncake_handshake, connection_transport_inferred)
{
    const char *mc = "{\"local_gid\":\"fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55\","
                     "\"local_lid\":0,\"local_nic_path\":\"10.0.0.1:15001@rxe0\","
                     "\"peer_nic_path\":\"10.0.0.2:15002@rxe0\",\"qp_num\":[17,18],"
                     "\"reply_msg\":\"\"}\n";
    tern_handshake_desc hd;
    tern_mooncake_hs mk;
    cr_assert_eq(tern_mooncake_hs_decode(mc, strlen(mc), &hd, &mk, err, sizeof err), 0, "%s",
                 err);
    cr_assert_str_eq(tern_mooncake_infer_transport(&hd, &mk), "rdma");
    tern_handshake_desc_clear(&hd);
    const char *own = "{\"transport\":\"efa\",\"local_nic_path\":\"a@b\",\"peer_nic_path\":"
                      "\"c@d\",\"efa_addr\":\"00ff\"}";
    cr_assert_eq(tern_mooncake_hs_decode(own, strlen(own), &hd, &mk, err, sizeof err), 0);
    cr_assert_str_eq(tern_mooncake_infer_transport(&hd, &mk), "efa");
    tern_handshake_desc_clear(&hd);
    const char *mc_efa = "{\"local_nic_path\":\"a@b\",\"peer_nic_path\":\"c@d\","
                         "\"efa_addr\":\"00ff\"}";
    cr_assert_eq(tern_mooncake_hs_decode(mc_efa, strlen(mc_efa), &hd, &mk, err, sizeof err), 0);
    cr_assert_str_eq(tern_mooncake_infer_transport(&hd, &mk), "efa");
    tern_handshake_desc_clear(&hd);
}

#define GID0 "fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55"

/* The body's bytes: the transport's own keys first, then the generic and
 * the reference keys interleaved in Mooncake's order. */
Test(mooncake_handshake, body_round_trip_in_mooncake_order)
{
    tern_handshake_desc h = {0};
    tern_mooncake_hs mk = {.local_lid = 65535, .nqp = 3, .qp_num = {0, 17, UINT32_MAX}};
    strcpy(h.transport, "rdma");
    strcpy(h.local_nic_path, "10.0.0.7:12001@mlx5_0");
    strcpy(h.peer_nic_path, "10.0.0.8:12001@mlx5_3");
    strcpy(mk.local_gid, GID0);
    h.fields = tern_desc_new();
    tern_desc_set_u64(h.fields, "mtu", 4096);
    char *json = tern_mooncake_hs_encode(&h, &mk);
    cr_assert_str_eq(json, "{\"mtu\":4096,\"transport\":\"rdma\",\"local_nic_path\":"
                           "\"10.0.0.7:12001@mlx5_0\",\"local_lid\":65535,\"local_gid\":\"" GID0
                           "\",\"peer_nic_path\":\"10.0.0.8:12001@mlx5_3\",\"qp_num\":[0,17,"
                           "4294967295],\"reply_msg\":\"\"}");
    tern_handshake_desc g;
    tern_mooncake_hs gk;
    cr_assert_eq(tern_mooncake_hs_decode(json, strlen(json), &g, &gk, err, sizeof err), 0, "%s",
                 err);
    cr_assert_str_eq(g.local_nic_path, h.local_nic_path);
    cr_assert_str_eq(g.transport, "rdma");
    cr_assert_eq(gk.local_lid, 65535);
    cr_assert_str_eq(gk.local_gid, GID0);
    cr_assert_eq(gk.nqp, 3);
    cr_assert_eq(gk.qp_num[2], UINT32_MAX);
    cr_assert_str_eq(gk.efa_addr, "");
    free(json);
    strcpy(mk.efa_addr, "00ff");
    json = tern_mooncake_hs_encode(&h, &mk);
    cr_assert(strstr(json, "\"reply_msg\":\"\",\"efa_addr\":\"00ff\"}"), "%s", json);
    free(json);
    tern_handshake_desc_clear(&h);
    tern_handshake_desc_clear(&g);
}

static void hs_refuse(const char *json, const char *want)
{
    tern_handshake_desc g;
    tern_mooncake_hs mk;
    err[0] = '\0';
    cr_assert_eq(tern_mooncake_hs_decode(json, strlen(json), &g, &mk, err, sizeof err),
                 TERN_ERR_PROTOCOL, "accepted: %s", json);
    cr_assert_null(g.fields);
    cr_assert_eq(mk.nqp, 0);
    cr_assert(strstr(err, want), "message \"%s\" lacks \"%s\"", err, want);
}

#define HS "{\"local_nic_path\":\"a:1@x\",\"peer_nic_path\":\"b:1@y\","

Test(mooncake_handshake, refusals_name_the_key)
{
    hs_refuse(HS "\"qp_num\":[1,4294967296]}",
              "qp_num[1]: expected an unsigned 32-bit integer, got 4294967296");
    hs_refuse(HS "\"qp_num\":[-1]}", "qp_num[0]: expected an unsigned 32-bit integer, got -1");
    hs_refuse(HS "\"qp_num\":\"1\"}", "qp_num: expected an array");
    hs_refuse(HS "\"local_lid\":65536}",
              "local_lid: expected an unsigned 16-bit integer, got 65536");
    hs_refuse(HS "\"local_gid\":\"fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44\"}",
              "local_gid: expected 16 bytes as colon-separated hex");
    hs_refuse(HS "\"local_gid\":\"fe-80-00-00-00-00-00-00-02-11-22-ff-fe-33-44-55\"}",
              "local_gid: expected 16 bytes");
    hs_refuse(HS "\"qp_num\":[1,2],\"efa_addr\":5}", "efa_addr: expected a string");
    /* The generic keys are read first: the same key is named as before. */
    hs_refuse(HS "\"local_lid\":-1,\"reply_msg\":3}", "reply_msg: expected a string");
    hs_refuse("{\"peer_nic_path\":\"b:1@y\",\"local_lid\":-1}",
              "local_nic_path: missing mandatory key");
    char big[1200];
    int off = snprintf(big, sizeof big, HS "\"qp_num\":[");
    for (int i = 0; i < 65; i++)
        off += snprintf(big + off, sizeof big - (size_t)off, "%s%d", i ? "," : "", i);
    snprintf(big + off, sizeof big - (size_t)off, "]}");
    hs_refuse(big, "qp_num: 65 entries, at most 64");
}

Test(mooncake_wire, header_and_status_layout)
{
    uint8_t h[TCP_MC_HDR_SIZE];
    tcp_mc_hdr_encode(h, 0x0102030405060708ull, 0x1112131415161718ull, 0x81);
    static const uint8_t want[24] = {8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15,
                                     0x14, 0x13, 0x12, 0x11, 0x81, 0, 0, 0, 0, 0, 0, 0};
    cr_assert_arr_eq(h, want, 24);
    uint64_t size, addr;
    uint8_t op;
    tcp_mc_hdr_decode(h, &size, &addr, &op);
    cr_assert_eq(size, 0x0102030405060708ull);
    cr_assert_eq(addr, 0x1112131415161718ull);
    cr_assert_eq(op, 0x81);
    uint8_t st[8];
    tcp_mc_status_encode(st, TCP_MC_STATUS_REFUSED);
    static const uint8_t wst[8] = {1, 0, 0, 0, 'V', 'T', 'C', 'M'};
    cr_assert_arr_eq(st, wst, 8);
    cr_assert_eq(tcp_mc_status_decode(st), TCP_MC_STATUS_REFUSED);
}
