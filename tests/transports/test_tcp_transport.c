/* tests/transports/test_tcp_transport.c: the TCP transport driven directly
 * through its vtable (tcp_harness.h): two plugin instances (a target and an
 * initiator) talk over real loopback sockets between real memory.  The
 * Criterion suite continues in test_tcp_transport_wire.c (raw wire: the
 * target against a hostile or broken peer; socket options); both build the
 * test program test_tcp_transport. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "desc/desc.h"
#include "tern/tern.h"
#include "tern/transport.h"
#include "tcp_harness.h"

TestSuite(tcp_transport, .init = load_plugin, .fini = unload_plugin, .timeout = 120);

Test(tcp_transport, identity_and_describe)
{
    cr_assert(T->caps & TERN_CAP_READ && T->caps & TERN_CAP_WRITE);
    cr_assert_not(T->caps & TERN_CAP_HANDSHAKE, "TCP needs no handshake");
    cr_assert_geq(T->struct_size, TERN_TRANSPORT_V1_0_SIZE);
    inst *a = inst_new(NULL);
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(a->ctx, blob), 0);
    cr_assert_str_eq(tern_desc_get_str(blob, "host"), "127.0.0.1");
    uint64_t port = 0;
    cr_assert_eq(tern_desc_get_u64(blob, "port", &port), 0);
    cr_assert(port > 0 && port < 65536, "ephemeral data port resolved: %lu", (unsigned long)port);
    tern_device_info dev[2];
    cr_assert_eq(T->devices(a->ctx, dev, 2), 1);
    cr_assert_str_eq(dev[0].name, "lo", "the device is the interface of the bind address");
    tern_desc_free(blob);
    inst_free(a);
}

/* ep_open with a peer NIC path ("peer@<device>") and a hand-made blob. */
static int open_dev(inst *from, tern_desc *blob, const char *nic_path, void **ep, char *err,
                    size_t errlen)
{
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "peer", .peer_nic_path = nic_path,
                        .peer_segment = blob};
    int rc = T->ep_open(from->ctx, &p, ep, err, errlen);
    if (rc == 0)
        rc = T->ep_connect(*ep, NULL, err, errlen);
    return rc;
}

/* The peer device's address (docs/protocol.md, TCP data frames): its
 * "host@<device>"/"port@<device>" when the blob has them, else the blob's
 * "host"/"port" (an older target); a device address that is one of our own
 * while the peer's main one is not is refused (a bridge with the same
 * address on both hosts). */
Test(tcp_transport, peer_device_address_from_the_blob)
{
    inst *a = inst_new(NULL), *b = inst_new(NULL);
    region r;
    region_make(b, &r, 4096);
    tern_desc *real = tern_desc_new();
    cr_assert_eq(T->segment_describe(b->ctx, real), 0);
    uint64_t port = 0;
    cr_assert_eq(tern_desc_get_u64(real, "port", &port), 0);
    uint8_t src[64];
    fill(src, sizeof src, 7);
    char err[512] = "";
    void *ep = NULL;

    /* an older target: no per-device keys, any device reaches host:port */
    cr_assert_eq(open_dev(a, real, "peer@nic1", &ep, err, sizeof err), 0, "%s", err);
    cr_expect_eq(xfer1(a, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 64, err, sizeof err),
                 0, "%s", err);
    T->ep_close(ep);

    /* the device's own port wins over the blob's main one (port 9: nothing) */
    tern_desc *multi = tern_desc_new();
    tern_desc_set_str(multi, "host", "127.0.0.1");
    tern_desc_set_u64(multi, "port", 9);
    tern_desc_set_str(multi, "host@nic1", "127.0.0.1");
    tern_desc_set_u64(multi, "port@nic1", port);
    cr_assert_eq(open_dev(a, multi, "peer@nic1", &ep, err, sizeof err), 0, "%s", err);
    cr_expect_eq(xfer1(a, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 64, err, sizeof err),
                 0, "%s", err);
    T->ep_close(ep);

    /* our own address for a device of a peer that lives elsewhere */
    tern_desc *bridge = tern_desc_new();
    tern_desc_set_str(bridge, "host", "192.0.2.1");
    tern_desc_set_u64(bridge, "port", port);
    tern_desc_set_str(bridge, "host@br9", "127.0.0.1");
    tern_desc_set_u64(bridge, "port@br9", port);
    ep = NULL;
    int rc = open_dev(a, bridge, "peer@br9", &ep, err, sizeof err);
    cr_expect_eq(rc, TERN_ERR_CONNECT, "refused: %d %s", rc, err);
    cr_expect(strstr(err, "one of this host's own"), "%s", err);
    if (ep)
        T->ep_close(ep);

    tern_desc_free(bridge);
    tern_desc_free(multi);
    tern_desc_free(real);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}

Test(tcp_transport, write_read_roundtrip_sizes)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    size_t cap = (16u << 20) + 4096;
    region r;
    region_make(tg, &r, cap);
    uint8_t *src = malloc(cap), *dst = malloc(cap);
    void *ep = ep_to(in, tg);
    const size_t sizes[] = {1, 4096, 65536, 65537, (16u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        fill(src, n, (unsigned)i + 1);
        memset(dst, 0, n);
        uint64_t at = (uint64_t)(uintptr_t)r.buf + (i % 2) * 7; /* odd offsets too */
        char msg[128];
        cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, at, n, msg, sizeof msg), 0, "write %zu: %s",
                     n, msg);
        cr_assert_eq(memcmp(r.buf + (i % 2) * 7, src, n), 0, "target memory after WRITE %zu", n);
        cr_assert_eq(xfer1(in, ep, TERN_READ, dst, at, n, msg, sizeof msg), 0, "read %zu: %s", n,
                     msg);
        cr_assert_eq(memcmp(dst, src, n), 0, "READ back of %zu bytes differs", n);
    }
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}

/* Many slices in flight on the pool at once, writes then reads, in a ring
 * bigger than the initial one. */
Test(tcp_transport, pipelined_many_slices)
{
    inst *tg = inst_new(NULL), *in = inst_new("connections", "3", NULL);
    const int n = 600;
    const size_t bs = 65536 + 17;
    region r;
    region_make(tg, &r, (size_t)n * bs);
    uint8_t *src = malloc((size_t)n * bs), *dst = calloc((size_t)n, bs);
    fill(src, (size_t)n * bs, 9);
    void *ep = ep_to(in, tg);
    tern_slice **s = calloc((size_t)n, sizeof *s);
    for (int i = 0; i < n; i++)
        s[i] = mk(TERN_WRITE, src + (size_t)i * bs, (uint64_t)(uintptr_t)(r.buf + (size_t)i * bs),
                  bs);
    run_slices(in, ep, s, n, 30000);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(s[i]->status, 0, "slice %d: %s", i, s[i]->errmsg);
        free(s[i]);
        s[i] = mk(TERN_READ, dst + (size_t)i * bs, (uint64_t)(uintptr_t)(r.buf + (size_t)i * bs),
                  bs);
    }
    run_slices(in, ep, s, n, 30000);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(s[i]->status, 0, "slice %d: %s", i, s[i]->errmsg);
        free(s[i]);
    }
    cr_assert_eq(memcmp(src, dst, (size_t)n * bs), 0);
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    free(s);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}

/* Every request outside the registered window is refused and the memory
 * around the window is untouched; the connection stays usable. */
Test(tcp_transport, range_checks_refuse_and_leave_memory_alone)
{
    inst *tg = inst_new(NULL), *in = inst_new("connections", "1", NULL);
    region r;
    region_make(tg, &r, 1 << 20);
    uint8_t *src = malloc(4 << 20), *dst = malloc(4 << 20);
    memset(src, 0x3C, 4 << 20);
    memset(dst, 0x77, 4 << 20);
    void *ep = ep_to(in, tg);
    uint64_t b = (uint64_t)(uintptr_t)r.buf, e = b + r.len;
    struct { uint64_t addr, len; const char *what; } bad[] = {
        {b - 1, 16, "starts one byte below"},
        {b - GUARD, GUARD, "entirely below"},
        {e - 16, 17, "ends one byte past the end"},
        {e, 1, "starts at the end"},
        {b, r.len + 1, "one byte longer than the buffer"},
        {b - 4096, (2 << 20), "covers the whole buffer and more"},
        {UINT64_MAX - 15, 64, "addr + len overflows"},
        {b + 4096, UINT64_MAX - 100, "huge length overflows"},
        {0, 4096, "NULL page"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t len = bad[i].len > (4 << 20) ? 4096 : bad[i].len;
        if (bad[i].len > (4 << 20)) {
            /* A huge length cannot be backed locally: READ only (no payload). */
            char msg[128];
            int st = xfer1(in, ep, TERN_READ, dst, bad[i].addr, bad[i].len, msg, sizeof msg);
            cr_assert_eq(st, TERN_ERR_RANGE, "READ %s: status %d", bad[i].what, st);
            continue;
        }
        char msg[128];
        int st = xfer1(in, ep, TERN_WRITE, src, bad[i].addr, len, msg, sizeof msg);
        cr_assert_eq(st, TERN_ERR_RANGE, "WRITE %s: status %d (%s)", bad[i].what, st, msg);
        cr_assert(strstr(msg, "not inside a buffer registered"), "message: %s", msg);
        st = xfer1(in, ep, TERN_READ, dst, bad[i].addr, len, msg, sizeof msg);
        cr_assert_eq(st, TERN_ERR_RANGE, "READ %s: status %d", bad[i].what, st);
        for (uint64_t k = 0; k < len; k++)
            cr_assert_eq(dst[k], 0x77, "a refused READ wrote local memory");
    }
    region_check_canaries(&r);
    for (size_t i = 0; i < r.len; i++)
        cr_assert_eq(r.buf[i], 0, "a refused WRITE changed registered memory at %zu", i);
    /* Same connection still works after drained refusals. */
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, r.len, NULL, 0), 0);
    cr_assert_eq(xfer1(in, ep, TERN_READ, dst, e - 100, 100, NULL, 0), 0);
    cr_assert_eq(memcmp(dst, src, 100), 0);
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}

Test(tcp_transport, deregistered_buffer_is_refused)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 65536);
    uint8_t src[4096];
    memset(src, 1, sizeof src);
    void *ep = ep_to(in, tg);
    uint64_t b = (uint64_t)(uintptr_t)r.buf;
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, sizeof src, NULL, 0), 0);
    cr_assert_eq(T->mr_deregister(tg->ctx, r.mr), 0);
    r.mr = NULL;
    memset(r.buf, 0, 4096);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, sizeof src, NULL, 0), TERN_ERR_RANGE);
    cr_assert_eq(xfer1(in, ep, TERN_READ, src, b, sizeof src, NULL, 0), TERN_ERR_RANGE);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(r.buf[i], 0, "a deregistered buffer was written");
    /* Registered again: accepted again. */
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(tg->ctx, r.buf, 65536, &k, &r.mr, err, sizeof err), 0);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b + 100, sizeof src, NULL, 0), 0);
    T->ep_close(ep);
    region_free(tg, &r);
    inst_free(in);
    inst_free(tg);
}

Test(tcp_transport, registration_table_rules)
{
    inst *a = inst_new(NULL);
    uint8_t *m = malloc(1 << 16);
    void *mr1, *mr2, *mr3, *x;
    tern_mr_keys k;
    char err[256] = "";
    cr_assert_eq(T->mr_register(a->ctx, m + 4096, 4096, &k, &mr1, err, sizeof err), 0);
    cr_assert_eq(T->mr_register(a->ctx, m + 4096 * 3, 4096, &k, &mr2, err, sizeof err), 0);
    cr_assert_eq(T->mr_register(a->ctx, m + 4095, 2, &k, &x, err, sizeof err), TERN_ERR_EXISTS);
    cr_assert(strstr(err, "overlaps"), "%s", err);
    cr_assert_eq(T->mr_register(a->ctx, m + 8191, 1, &k, &x, err, sizeof err), TERN_ERR_EXISTS);
    cr_assert_eq(T->mr_register(a->ctx, m, 1 << 16, &k, &x, err, sizeof err), TERN_ERR_EXISTS);
    cr_assert_eq(T->mr_register(a->ctx, m + 8192, 4096, &k, &mr3, err, sizeof err), 0,
                 "adjacent ranges are fine");
    cr_assert_eq(T->mr_register(a->ctx, m, 0, &k, &x, err, sizeof err), TERN_ERR_INVAL);
    cr_assert_eq(T->mr_register(a->ctx, (void *)(uintptr_t)(UINTPTR_MAX - 10), 100, &k, &x, err,
                                sizeof err), TERN_ERR_INVAL, "wrapping range refused");
    cr_assert_eq(T->mr_deregister(a->ctx, mr2), 0);
    cr_assert_eq(T->mr_deregister(a->ctx, mr1), 0);
    cr_assert_eq(T->mr_deregister(a->ctx, mr3), 0);
    inst_free(a);
    free(m);
}

/* Requests the instance's data server has read (its query's "served N"). */
static unsigned long served(inst *in)
{
    char out[512] = "";
    cr_assert_eq(T->query(in->ctx, "", out, sizeof out), 0);
    const char *p = strstr(out, "served ");
    cr_assert_not_null(p, "no \"served\" count in: %s", out);
    return strtoul(p + 7, NULL, 10);
}

/* The target goes away with slices in flight: they all come back failed
 * (no hang); the same endpoint then fails fast; a new target works. */
Test(tcp_transport, broken_connection_fails_in_flight_then_recovers)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    const size_t bs = 8u << 20;
    const int n = 32;
    region r;
    region_make(tg, &r, bs);
    uint8_t *src = malloc(bs);
    fill(src, bs, 3);
    void *ep = ep_to(in, tg);
    tern_slice *s[32];
    for (int i = 0; i < n; i++)
        s[i] = mk(TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, bs);
    cr_assert_eq(T->submit(ep, s, n), n);
    /* Some in flight: the target has read a first request header (of 32 x
     * 8 MiB); waiting for that event, not for a fixed time. */
    for (uint64_t w0 = now_ms(); served(tg) == 0;) {
        cr_assert_lt(now_ms() - w0, 10000, "the target never saw a request");
        usleep(1000);
    }
    T->fini(tg->ctx); /* the target disappears: its sockets close */
    tg->ctx = NULL;
    uint64_t t0 = now_ms();
    int got = 0, failed = 0;
    tern_slice *done[64];
    while (got < n) {
        cr_assert(now_ms() - t0 < 10000, "slices hang after the target went away (%d/%d)", got, n);
        int k = inst_poll(in, done, 64, 100);
        for (int i = 0; i < k; i++)
            if (done[i]->status != 0) {
                failed++;
                cr_assert(done[i]->errmsg[0], "a failed slice carries a message");
            }
        got += k;
    }
    cr_assert_gt(failed, 0, "the target went away before all 256 MiB were written");
    /* The dead peer: new connections are refused at once. */
    char msg[128];
    int st = xfer1(in, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 16, msg, sizeof msg);
    cr_assert(st == TERN_ERR_CONNECT || st == TERN_ERR_CLOSED, "status %d (%s)", st, msg);
    T->ep_close(ep);
    /* Another target works with the same initiator instance. */
    inst *tg2 = inst_new(NULL);
    region r2;
    region_make(tg2, &r2, 1 << 20);
    void *ep2 = ep_to(in, tg2);
    cr_assert_eq(xfer1(in, ep2, TERN_WRITE, src, (uint64_t)(uintptr_t)r2.buf, 1 << 20, NULL, 0),
                 0);
    cr_assert_eq(memcmp(r2.buf, src, 1 << 20), 0);
    T->ep_close(ep2);
    region_free(tg2, &r2);
    inst_free(tg2);
    for (int i = 0; i < n; i++)
        free(s[i]);
    r.mr = NULL; /* its instance is gone */
    region_free(tg, &r);
    free(tg);
    inst_free(in);
    free(src);
}

/* After an idle gap the persistent connections still carry a burst. */
Test(tcp_transport, burst_after_idle)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 1024 * 4096);
    uint8_t *src = malloc(1024 * 4096);
    fill(src, 1024 * 4096, 5);
    void *ep = ep_to(in, tg);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 8, NULL, 0), 0);
    sleep(2);
    tern_slice *s[1024];
    for (int i = 0; i < 1024; i++)
        s[i] = mk(TERN_WRITE, src + i * 4096, (uint64_t)(uintptr_t)(r.buf + i * 4096), 4096);
    run_slices(in, ep, s, 1024, 20000);
    for (int i = 0; i < 1024; i++) {
        cr_assert_eq(s[i]->status, 0, "slice %d after idle: %s", i, s[i]->errmsg);
        free(s[i]);
    }
    cr_assert_eq(memcmp(r.buf, src, 1024 * 4096), 0);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    inst_free(in);
    inst_free(tg);
}
