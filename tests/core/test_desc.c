/* tests/core/test_desc.c: segment and handshake descriptors: round trips with
 * the reference's keys, and every kind of refusal naming its key path (the
 * handshake's rdma / efa keys: test_mooncake_compat.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/addrbook.h"
#include "desc/desc.h"
#include "desc/handshake_desc.h"
#include "peer/mooncake_compat.h"
#include "desc/segment_desc.h"
#include "tern/errors.h"
#include "host/topology.h"

static char err[512];

#define GID0 "fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55"
#define GID1 "fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:66"

/* A segment with an RDMA transport (2 devices, a matrix), a TCP one, and
 * three buffers given out of address order. */
static tern_segment_desc *sample(void)
{
    tern_segment_desc *d = calloc(1, sizeof *d);
    strcpy(d->name, "10.0.0.7:12001");
    strcpy(d->protocol, "rdma");
    d->tcp_data_port = 40123;
    d->timestamp = 1764489600123ull;
    d->ntransports = 2;
    d->transports = calloc(2, sizeof *d->transports);
    tern_seg_transport *r = &d->transports[0], *t = &d->transports[1];
    strcpy(r->name, "rdma");
    r->ndevices = 2;
    r->devices = calloc(2, sizeof *r->devices);
    strcpy(r->devices[0].name, "mlx5_0");
    r->devices[0].lid = 7;
    strcpy(r->devices[0].gid, GID0);
    strcpy(r->devices[1].name, "mlx5_1");
    r->devices[1].lid = 65535;
    strcpy(r->devices[1].gid, GID1);
    tern_device_info info[2] = {{.name = "mlx5_0", .numa_node = 0},
                                {.name = "mlx5_1", .numa_node = 1}};
    cr_assert_eq(tern_topology_from_json(
                     "{\"cpu:0\": [[\"mlx5_0\"], [\"mlx5_1\"]], \"cpu:1\": [[\"mlx5_1\"], "
                     "[\"mlx5_0\"]]}",
                     info, 2, 0, &r->topology, err, sizeof err),
                 0, "%s", err);
    r->addr = tern_desc_new();
    tern_desc_set_str(r->addr, "subnet", "fe80::");
    strcpy(t->name, "tcp");
    t->addr = tern_desc_new();
    tern_desc_set_u64(t->addr, "port", 40123);
    d->nbuffers = 3;
    d->buffers = calloc(3, sizeof *d->buffers);
    uint64_t addrs[3] = {0x7f0000200000ull, 0x7f0000100000ull, 0xfffffffffffe0000ull};
    uint64_t lens[3] = {1 << 20, 1 << 20, 0x10000};
    for (int i = 0; i < 3; i++) {
        tern_buffer_desc *b = &d->buffers[i];
        snprintf(b->location, sizeof b->location, "cpu:%d", i % 2);
        b->addr = addrs[i];
        b->length = lens[i];
        b->nkeys = 2;
        b->keys = calloc(2, sizeof *b->keys);
        strcpy(b->keys[0].transport, "rdma");
        b->keys[0].ndev = 2;
        for (int k = 0; k < 2; k++) {
            b->keys[0].lkey[k] = 100u + (unsigned)(10 * i + k);
            b->keys[0].rkey[k] = 0xfffffff0u + (unsigned)k;
        }
        strcpy(b->keys[1].transport, "tcp");
        b->keys[1].ndev = 0;
    }
    return d;
}

Test(segment, round_trip_keeps_every_field)
{
    tern_segment_desc *d = sample();
    char *json = tern_segment_desc_encode(d);
    cr_assert_not_null(json);
    /* The reference's keys are all there at the top level. */
    json_object *o = json_tokener_parse(json);
    const char *keys[] = {"name", "protocol", "devices", "buffers", "priority_matrix",
                          "tcp_data_port", "timestamp", "transports"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_assert(json_object_object_get_ex(o, keys[i], NULL), "missing %s in %s", keys[i],
                  json);
    json_object_put(o);

    tern_segment_desc *e = NULL;
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &e, err, sizeof err), 0, "%s",
                 err);
    cr_assert_str_eq(e->name, d->name);
    cr_assert_str_eq(e->protocol, "rdma");
    cr_assert_eq(e->tcp_data_port, 40123);
    cr_assert_eq(e->timestamp, 1764489600123ull);
    cr_assert_eq(e->nbuffers, 3);
    cr_assert_eq(e->buffers[0].addr, 0x7f0000100000ull, "decoded buffers are sorted");
    cr_assert_eq(e->buffers[2].addr, 0xfffffffffffe0000ull);
    const tern_buffer_keys *k = tern_buffer_find_keys(&e->buffers[1], "rdma");
    cr_assert_not_null(k);
    cr_assert_eq(k->ndev, 2);
    cr_assert_eq(k->lkey[1], 101);
    cr_assert_eq(k->rkey[1], 0xfffffff1u);
    cr_assert_not_null(tern_buffer_find_keys(&e->buffers[1], "tcp"));
    cr_assert_null(tern_buffer_find_keys(&e->buffers[1], "efa"));
    cr_assert_eq(e->ntransports, 2);
    const tern_seg_transport *r = tern_segment_find_transport(e, "rdma");
    cr_assert_not_null(r);
    cr_assert_eq(r->ndevices, 2);
    cr_assert_eq(r->devices[1].lid, 65535);
    cr_assert_str_eq(r->devices[0].gid, GID0);
    cr_assert_not_null(r->topology);
    cr_assert_eq(tern_topology_device_count(r->topology), 2);
    cr_assert_str_eq(tern_desc_get_str(r->addr, "subnet"), "fe80::");
    uint64_t port = 0;
    cr_assert_eq(tern_desc_get_u64(tern_segment_find_transport(e, "tcp")->addr, "port", &port),
                 0);
    cr_assert_eq(port, 40123);
    cr_assert_null(tern_segment_find_transport(e, "efa"));
    /* Encoding the decoded form gives the same text. */
    char *again = tern_segment_desc_encode(e);
    tern_segment_desc *f = NULL;
    cr_assert_eq(tern_segment_desc_decode(again, strlen(again), &f, err, sizeof err), 0, "%s",
                 err);
    char *third = tern_segment_desc_encode(f);
    cr_assert_str_eq(again, third);
    free(json);
    free(again);
    free(third);
    tern_segment_desc_free(d);
    tern_segment_desc_free(e);
    tern_segment_desc_free(f);
}

Test(segment, reference_descriptor_without_tern_keys)
{
    const char *ref =
        "{\"name\":\"192.168.3.76:12001\",\"protocol\":\"rdma\","
        "\"devices\":[{\"name\":\"mlx5_3\",\"lid\":0,\"gid\":\"" GID0 "\"}],"
        "\"priority_matrix\":{\"cpu:0\":[[\"mlx5_3\"],[]]},"
        "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":140000000000,\"length\":4096,"
        "\"lkey\":[1234],\"rkey\":[5678]}]}";
    tern_segment_desc *d = NULL;
    cr_assert_eq(tern_segment_desc_decode(ref, strlen(ref), &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d->ntransports, 1);
    cr_assert_str_eq(d->transports[0].name, "rdma");
    cr_assert_str_eq(d->transports[0].devices[0].name, "mlx5_3");
    cr_assert_not_null(d->transports[0].topology);
    const tern_buffer_keys *k = tern_buffer_find_keys(&d->buffers[0], "rdma");
    cr_assert_not_null(k, "top-level lkey/rkey belong to the protocol");
    cr_assert_eq(k->rkey[0], 5678);
    tern_segment_desc_free(d);
}

Test(segment, find_buffer_is_exact_and_overflow_safe)
{
    tern_segment_desc *d = sample();
    char *json = tern_segment_desc_encode(d);
    tern_segment_desc *e = NULL;
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &e, err, sizeof err), 0, "%s",
                 err);
    uint64_t a = 0x7f0000100000ull;
    cr_assert_eq(tern_segment_find_buffer(e, a, 1 << 20), &e->buffers[0]);
    cr_assert_eq(tern_segment_find_buffer(e, a + 100, 10), &e->buffers[0]);
    cr_assert_null(tern_segment_find_buffer(e, a - 1, 2), "starts before");
    cr_assert_null(tern_segment_find_buffer(e, a + (1 << 20) - 1, 2), "runs past the end");
    cr_assert_eq(tern_segment_find_buffer(e, a + (1 << 20), 16), &e->buffers[1], "adjacent");
    cr_assert_null(tern_segment_find_buffer(e, 0xfffffffffffe0000ull, UINT64_MAX),
                   "addr+len overflow");
    cr_assert_eq(tern_segment_find_buffer(e, 0xfffffffffffe0000ull, 0x10000), &e->buffers[2]);
    cr_assert_null(tern_segment_find_buffer(e, 0x1000, 1));
    free(json);
    tern_segment_desc_free(d);
    tern_segment_desc_free(e);
}

/* Decoding `json` must fail with TERN_ERR_PROTOCOL and a message containing want. */
static void refuse(const char *json, const char *want)
{
    tern_segment_desc *d = (tern_segment_desc *)0x1;
    err[0] = '\0';
    int rc = tern_segment_desc_decode(json, strlen(json), &d, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_PROTOCOL, "accepted: %s", json);
    cr_assert_null(d);
    cr_assert(strstr(err, want), "message \"%s\" lacks \"%s\"", err, want);
}

#define HEAD "{\"name\":\"h:1\",\"protocol\":\"tcp\","

Test(segment, refusals_name_the_key)
{
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":0,\"length\":4096},"
                "{\"name\":\"cpu:0\",\"addr\":8192,\"length\":0},"
                "{\"name\":\"cpu:0\",\"addr\":1,\"length\":1},"
                "{\"name\":\"cpu:0\",\"addr\":100000,\"length\":-5}]}",
           "buffers[3].length: expected an unsigned 64-bit integer, got -5");
    refuse(HEAD "\"devices\":[{\"name\":\"mlx5_0\",\"lid\":70000,\"gid\":\"\"}],"
                "\"buffers\":[]}",
           "devices[0].lid: expected an unsigned 16-bit integer, got 70000");
    refuse("{\"protocol\":\"tcp\",\"buffers\":[]}", "name: missing mandatory key");
    refuse(HEAD "\"tcp_data_port\":5}", "buffers: missing mandatory key");
    refuse("{\"name\":12,\"protocol\":\"tcp\",\"buffers\":[]}",
           "name: expected a string, got 12");
    refuse(HEAD "\"buffers\":{}}", "buffers: expected an array");
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":\"0x1000\",\"length\":1}]}",
           "buffers[0].addr: expected an integer, got \"0x1000\"");
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":1.5,\"length\":1}]}",
           "buffers[0].addr: expected an integer");
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":18446744073709551615,"
                "\"length\":2}]}",
           "buffers[0]: addr 0xffffffffffffffff + length 2 overflows");
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":0,\"length\":100},"
                "{\"name\":\"cpu:0\",\"addr\":50,\"length\":100}]}",
           "overlaps");
    /* (tern's shape: a Mooncake-shaped descriptor, without "transports",
     * may carry long names; see test_mooncake_compat.c) */
    refuse(HEAD "\"transports\":[],"
                "\"buffers\":[{\"name\":\"cpu:0-this-location-is-far-too-long-for-it\","
                "\"addr\":0,\"length\":1}]}",
           "buffers[0].name: string of 42 bytes, at most 31");
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":0,\"length\":1,"
                "\"lkey\":[1,2],\"rkey\":[1]}]}",
           "buffers[0]: lkey has 2 entries but rkey has 1");
    refuse(HEAD "\"buffers\":[{\"name\":\"cpu:0\",\"addr\":0,\"length\":1,"
                "\"keys\":{\"rdma\":{\"lkey\":[-1],\"rkey\":[1]}}}]}",
           "buffers[0].keys.rdma.lkey[0]: expected an unsigned 64-bit integer, got -1");
    refuse(HEAD "\"devices\":[{\"name\":\"mlx5_0\",\"lid\":1,\"gid\":\"fe:80:zz\"}],"
                "\"buffers\":[]}",
           "devices[0].gid: expected 16 bytes as colon-separated hex");
    refuse(HEAD "\"buffers\":[],\"transports\":[{\"devices\":[]}]}",
           "transports[0].name: missing mandatory key");
    refuse(HEAD "\"buffers\":[],\"transports\":[{\"name\":\"tcp\",\"addr\":[1]}]}",
           "transports[0].addr: expected an object");
    refuse(HEAD "\"buffers\":[],\"tcp_data_port\":65536}",
           "tcp_data_port: expected an unsigned 16-bit integer, got 65536");
    refuse("{\"name\":\"h:1\"", "invalid JSON");
    refuse("{\"name\":\"h:1\",\"protocol\":\"tcp\",\"buffers\":[]} trailing", "trailing data");
    refuse("[1,2,3]", "expected a JSON object");
    refuse("", "empty descriptor");
}

/* "handshake_addrs": kept through a round trip, checked on the way in. */
Test(segment, handshake_addrs_round_trip_and_refusals)
{
    tern_segment_desc d;
    memset(&d, 0, sizeof d);
    strcpy(d.name, "198.18.0.2:4000");
    strcpy(d.protocol, "tcp");
    strcpy(d.hs_addrs[0], "198.18.1.2:4000");
    strcpy(d.hs_addrs[1], "[2001:db8:1::2]:4000");
    d.n_hs_addrs = 2;
    d.buffers = NULL;
    char *json = tern_segment_desc_encode(&d);
    cr_assert_not_null(strstr(json, "\"handshake_addrs\":[\"198.18.1.2:4000\""), "%s", json);
    tern_segment_desc *back = NULL;
    char err[256];
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &back, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(back->n_hs_addrs, 2);
    cr_assert_str_eq(back->hs_addrs[1], "[2001:db8:1::2]:4000");
    tern_segment_desc_free(back);
    free(json);
    refuse(HEAD "\"buffers\":[],\"handshake_addrs\":[\"no-port\"]}",
           "handshake_addrs[0]: expected \"host:port\", got \"no-port\"");
    refuse(HEAD "\"buffers\":[],\"handshake_addrs\":[7]}",
           "handshake_addrs[0]: expected \"host:port\", got 7");
    refuse(HEAD "\"buffers\":[],\"handshake_addrs\":\"198.18.1.2:1\"}",
           "handshake_addrs: expected an array");
    char many[2048] = HEAD "\"buffers\":[],\"handshake_addrs\":[";
    for (int i = 0; i < TERN_DESC_MAX_HS_ADDRS + 1; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"10.0.0.%d:1\"",
                 i ? "," : "", i);
    strcat(many, "]}");
    refuse(many, "handshake_addrs: 17 addresses, at most 16");
}

/* The address book: the name first until another address answers, that
 * one first from then on; a name it does not know gives nothing. */
Test(segment, address_book_order)
{
    tern_addrbook *b = tern_addrbook_new();
    char out[TERN_DESC_MAX_HS_ADDRS + 1][TERN_DESC_HS_ADDR_MAX];
    char alts[2][TERN_DESC_HS_ADDR_MAX] = {"10.1.0.2:9", "10.2.0.2:9"};
    cr_assert_eq(tern_addrbook_order(b, "10.0.0.2:9", out, 17), 0);
    tern_addrbook_note(b, "10.0.0.2:9", (const char (*)[TERN_DESC_HS_ADDR_MAX])alts, 2);
    cr_assert_eq(tern_addrbook_order(b, "10.0.0.2:9", out, 17), 3);
    cr_assert_str_eq(out[0], "10.0.0.2:9");
    cr_assert_str_eq(out[2], "10.2.0.2:9");
    tern_addrbook_answered(b, "10.0.0.2:9", "10.2.0.2:9");
    cr_assert_eq(tern_addrbook_order(b, "10.0.0.2:9", out, 17), 3);
    cr_assert_str_eq(out[0], "10.2.0.2:9");
    cr_assert_str_eq(out[1], "10.0.0.2:9");
    cr_assert_str_eq(out[2], "10.1.0.2:9");
    tern_addrbook_note(b, "10.0.0.2:9", NULL, 0); /* the descriptor lists none now */
    cr_assert_eq(tern_addrbook_order(b, "10.0.0.2:9", out, 17), 0);
    tern_addrbook_free(b);
}

Test(segment, absurd_sizes_are_refused)
{
    /* TERN_DESC_MAX_BUFFERS + 1 buffers. */
    size_t n = TERN_DESC_MAX_BUFFERS + 1, cap = n * 48 + 128, off = 0;
    char *s = malloc(cap);
    off += (size_t)snprintf(s, cap, HEAD "\"buffers\":[");
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(s + off, cap - off, "%s{\"name\":\"*\",\"addr\":%zu,\"length\":1}",
                                i ? "," : "", i * 2);
    snprintf(s + off, cap - off, "]}");
    refuse(s, "buffers: 65537 buffers, at most 65536");
    /* 65 devices. */
    off = (size_t)snprintf(s, cap, HEAD "\"buffers\":[],\"devices\":[");
    for (int i = 0; i < 65; i++)
        off += (size_t)snprintf(s + off, cap - off, "%s{\"name\":\"d%d\"}", i ? "," : "", i);
    snprintf(s + off, cap - off, "]}");
    refuse(s, "devices: 65 devices, at most 64");
    /* 65 keys per device list. */
    off = (size_t)snprintf(s, cap, HEAD "\"buffers\":[{\"name\":\"*\",\"addr\":0,\"length\":1,"
                                        "\"lkey\":[");
    for (int i = 0; i < 65; i++)
        off += (size_t)snprintf(s + off, cap - off, "%s%d", i ? "," : "", i);
    snprintf(s + off, cap - off, "],\"rkey\":[]}]}");
    refuse(s, "buffers[0].lkey: 65 entries, at most 64");
    /* A 300-byte segment name. */
    char name[301];
    memset(name, 'a', 300);
    name[300] = '\0';
    snprintf(s, cap, "{\"name\":\"%s\",\"protocol\":\"tcp\",\"buffers\":[]}", name);
    refuse(s, "name: string of 300 bytes, at most 255");
    free(s);
}

/* ---- handshake descriptor ---- */

Test(handshake_desc, round_trip_with_generic_keys_and_extras)
{
    tern_handshake_desc h = {0};
    strcpy(h.transport, "rdma");
    strcpy(h.local_nic_path, "10.0.0.7:12001@mlx5_0");
    strcpy(h.peer_nic_path, "10.0.0.8:12001@mlx5_3");
    h.fields = tern_desc_new();
    tern_desc_set_u64(h.fields, "mtu", 4096);
    char *json = tern_handshake_desc_encode(&h);
    json_object *o = json_tokener_parse(json);
    const char *keys[] = {"local_nic_path", "peer_nic_path", "reply_msg", "transport", "mtu"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_assert(json_object_object_get_ex(o, keys[i], NULL), "missing %s in %s", keys[i],
                  json);
    /* The rdma / efa keys are the Mooncake code's (test_mooncake_compat). */
    cr_assert(!json_object_object_get_ex(o, "qp_num", NULL), "%s", json);
    json_object_put(o);
    tern_handshake_desc g;
    cr_assert_eq(tern_handshake_desc_decode(json, strlen(json), &g, err, sizeof err), 0, "%s",
                 err);
    cr_assert_str_eq(g.local_nic_path, h.local_nic_path);
    cr_assert_str_eq(g.peer_nic_path, h.peer_nic_path);
    cr_assert_str_eq(g.transport, "rdma");
    cr_assert_str_eq(g.reply_msg, "");
    uint64_t mtu = 0;
    cr_assert_eq(tern_desc_get_u64(g.fields, "mtu", &mtu), 0, "transport keys survive");
    cr_assert_eq(mtu, 4096);
    free(json);
    tern_handshake_desc_clear(&h);
    tern_handshake_desc_clear(&g);
    cr_assert_null(g.fields);
}

Test(handshake_desc, refusal_with_only_reply_msg_is_accepted)
{
    const char *j = "{\"reply_msg\":\"no such device mlx5_9\",\"unknown\":[1,{}]}";
    tern_handshake_desc g;
    cr_assert_eq(tern_handshake_desc_decode(j, strlen(j), &g, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(g.reply_msg, "no such device mlx5_9");
    tern_handshake_desc_clear(&g);
}

static void hs_refuse(const char *json, const char *want)
{
    tern_handshake_desc g;
    err[0] = '\0';
    cr_assert_eq(tern_handshake_desc_decode(json, strlen(json), &g, err, sizeof err),
                 TERN_ERR_PROTOCOL, "accepted: %s", json);
    cr_assert_null(g.fields);
    cr_assert(strstr(err, want), "message \"%s\" lacks \"%s\"", err, want);
}

#define HS "{\"local_nic_path\":\"a:1@x\",\"peer_nic_path\":\"b:1@y\","

Test(handshake_desc, refusals_name_the_key)
{
    hs_refuse("{\"peer_nic_path\":\"b:1@y\"}", "local_nic_path: missing mandatory key");
    hs_refuse(HS "\"reply_msg\":5}", "reply_msg: expected a string");
    hs_refuse(HS "\"transport\":[]}", "transport: expected a string");
    char big[1200];
    char path[400];
    memset(path, 'p', 399);
    path[399] = '\0';
    snprintf(big, sizeof big, "{\"local_nic_path\":\"%s\",\"peer_nic_path\":\"b\"}", path);
    hs_refuse(big, "local_nic_path: string of 399 bytes, at most 319");
    hs_refuse("{\"local_nic_path\":\"a\\u0000b\",\"peer_nic_path\":\"b\"}", "no NUL");
    hs_refuse("not json", "invalid JSON");
}

/* ---- malformed input never crashes, leaks or is half-accepted ---- */

/* Deterministic xorshift so a failure is reproducible. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static void mutate(char *s, size_t n)
{
    static const char pool[] = "{}[]\":,-0123456789eE.tfn \\u\x01\xff";
    int edits = 1 + (int)(rnd() % 4);
    for (int i = 0; i < edits; i++)
        s[rnd() % n] = pool[rnd() % (sizeof pool - 1)];
}

Test(fuzz, mutated_descriptors_decode_or_refuse_cleanly, .timeout = 120)
{
    tern_segment_desc *d = sample();
    char *seg = tern_segment_desc_encode(d);
    tern_segment_desc_free(d);
    tern_handshake_desc h = {0};
    tern_mooncake_hs mk = {.local_lid = 3, .nqp = 2, .qp_num = {7, 8}};
    strcpy(h.local_nic_path, "a:1@mlx5_0");
    strcpy(h.peer_nic_path, "b:1@mlx5_1");
    strcpy(mk.local_gid, GID0);
    char *hs = tern_mooncake_hs_encode(&h, &mk);
    size_t sl = strlen(seg), hl = strlen(hs);
    char *buf = malloc(sl + 1);
    int accepted = 0, refused = 0;
    for (int i = 0; i < 20000; i++) {
        const char *src = i % 2 ? seg : hs;
        size_t n = i % 2 ? sl : hl;
        memcpy(buf, src, n);
        mutate(buf, n);
        size_t len = i % 7 == 0 ? rnd() % n : n; /* sometimes truncated too */
        if (i % 2) {
            tern_segment_desc *o = NULL;
            err[0] = '\0'; /* each refusal must write its own message */
            int rc = tern_segment_desc_decode(buf, len, &o, err, sizeof err);
            cr_assert(rc == 0 || rc == TERN_ERR_PROTOCOL, "rc %d", rc);
            cr_assert(rc == 0 ? o != NULL : (o == NULL && err[0]),
                      "case %d: a refused descriptor without a message", i);
            if (o) {
                /* Whatever is accepted is coherent: sorted, non-overlapping buffers. */
                for (size_t b = 1; b < o->nbuffers; b++)
                    cr_assert_geq(o->buffers[b].addr,
                                  o->buffers[b - 1].addr + o->buffers[b - 1].length);
                accepted++;
            } else {
                refused++;
            }
            tern_segment_desc_free(o);
        } else {
            tern_handshake_desc o;
            err[0] = '\0';
            int rc = tern_mooncake_hs_decode(buf, len, &o, &mk, err, sizeof err);
            cr_assert(rc == 0 || rc == TERN_ERR_PROTOCOL, "rc %d", rc);
            cr_assert(rc == 0 || err[0], "case %d: a refused handshake without a message", i);
            rc == 0 ? accepted++ : refused++;
            tern_handshake_desc_clear(&o);
        }
    }
    cr_log_info("fuzz: %d accepted, %d refused", accepted, refused);
    cr_assert_gt(refused, 0);
    cr_assert_gt(accepted, 0);
    free(buf);
    free(seg);
    free(hs);
}
