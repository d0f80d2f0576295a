/* tests/transports/test_tcp_auth_bind.c: with a shared secret, the TCP data
 * connection's proofs name both segments (docs/protocol.md, TCP data
 * frames, Authentication), and the Mooncake wire is never used:
 *  - an initiator that asked for segment T but holds the address of engine
 *    T2 (another engine's descriptor under T's name) fails authentication,
 *    and nothing lands in T2, while the same instance asking for T2 by its
 *    own name moves verified data;
 *  - a peer blob with "wire": "mooncake" is refused at ep_open when a secret
 *    is configured, and opened without one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "desc/desc.h"
#include "tcp_harness.h"
#include "tern/errors.h"

TestSuite(tcp_auth_bind, .init = load_plugin, .fini = unload_plugin, .timeout = 60);

static tern_auth *secret(void)
{
    tern_auth *a = NULL;
    char err[256];
    const char *s = "tcp-bind-test-shared-secret";
    cr_assert_eq(tern_auth_from_secret(s, strlen(s), &a, err, sizeof err), 0, "%s", err);
    return a;
}

/* An endpoint from `from` to the data port `to` advertises, asking for
 * segment `asked`; *rc is ep_connect's result (the connection and its
 * proof happen there). */
static void *ep_asking(inst *from, inst *to, const char *asked, int *rc, char *err,
                       size_t errlen)
{
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(to->ctx, blob), 0);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = asked, .peer_segment = blob};
    void *ep = NULL;
    cr_assert_eq(T->ep_open(from->ctx, &p, &ep, err, errlen), 0, "ep_open: %s", err);
    *rc = T->ep_connect(ep, NULL, err, errlen);
    tern_desc_free(blob);
    return ep;
}

Test(tcp_auth_bind, another_engines_address_fails_the_proof)
{
    tern_auth *a = secret();
    inst *t2 = inst_new_auth(a, "127.0.0.1:2002"), *in = inst_new_auth(a, "127.0.0.1:2001");
    region r;
    region_make(t2, &r, 1 << 20);
    memset(r.buf, 0, 1 << 20);
    uint8_t *src = malloc(1 << 20), *back = malloc(1 << 20);
    fill(src, 1 << 20, 7);
    char msg[128] = "";
    /* legitimate: asked for T2 by its own name */
    char err[512] = "";
    int rc = 0;
    void *ok = ep_asking(in, t2, "127.0.0.1:2002", &rc, err, sizeof err);
    cr_assert_eq(rc, 0, "legitimate connect: %s", err);
    cr_assert_eq(xfer1(in, ok, TERN_WRITE, src, (uintptr_t)r.buf, 1 << 20, msg, sizeof msg), 0,
                 "legitimate write: %s", msg);
    cr_assert_eq(xfer1(in, ok, TERN_READ, back, (uintptr_t)r.buf, 1 << 20, msg, sizeof msg), 0,
                 "legitimate read: %s", msg);
    cr_assert_eq(memcmp(back, src, 1 << 20), 0, "legitimate read-back differs");
    memset(r.buf, 0, 1 << 20);
    /* attack: asked for T, holding T2's address */
    void *bad = ep_asking(in, t2, "127.0.0.1:2003", &rc, err, sizeof err);
    cr_log_info("connect to T through T2's address: %d %s", rc, err);
    cr_assert_eq(rc, TERN_ERR_AUTH, "the connection meant for T was not refused (%d): %s", rc,
                 err);
    cr_assert(strstr(err, "not segment 127.0.0.1:2003"), "%s", err);
    tern_slice *w = mk(TERN_WRITE, src, (uintptr_t)r.buf, 1 << 20);
    cr_assert_lt(T->submit(bad, &w, 1), 0, "the refused endpoint took a write");
    free(w);
    for (size_t i = 0; i < (1u << 20); i++)
        cr_assert_eq(r.buf[i], 0, "bytes meant for T landed in T2");
    /* and the legitimate endpoint still works beside it */
    cr_assert_eq(xfer1(in, ok, TERN_WRITE, src, (uintptr_t)r.buf, 1 << 20, msg, sizeof msg), 0,
                 "legitimate write after the attack: %s", msg);
    cr_assert_eq(memcmp(r.buf, src, 1 << 20), 0);
    region_check_canaries(&r);
    T->ep_close(bad);
    T->ep_close(ok);
    region_free(t2, &r);
    free(src);
    free(back);
    inst_free(in);
    inst_free(t2);
    tern_auth_free(a);
}

static int open_mooncake_blob(inst *in, char *err, size_t errlen)
{
    tern_desc *blob = tern_desc_new();
    tern_desc_set_str(blob, "wire", "mooncake");
    tern_desc_set_str(blob, "name", "127.0.0.1:2009");
    tern_desc_set_u64(blob, "tcp_data_port", 9); /* nothing is sent there: refused before */
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "127.0.0.1:2009",
                        .peer_segment = blob};
    void *ep = NULL;
    int rc = T->ep_open(in->ctx, &p, &ep, err, errlen);
    if (rc == 0)
        T->ep_close(ep);
    tern_desc_free(blob);
    return rc;
}

Test(tcp_auth_bind, mooncake_wire_refused_with_a_secret)
{
    tern_auth *a = secret();
    inst *with = inst_new_auth(a, "127.0.0.1:2001"), *without = inst_new(NULL);
    char err[512] = "";
    int rc = open_mooncake_blob(with, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_AUTH, "a Mooncake-wire blob was opened with a secret (%d): %s", rc,
                 err);
    cr_assert(strstr(err, "127.0.0.1:2009") && strstr(err, "auth_secret_file"), "%s", err);
    cr_assert_eq(open_mooncake_blob(without, err, sizeof err), 0,
                 "without a secret the Mooncake wire stays available: %s", err);
    inst_free(with);
    inst_free(without);
    tern_auth_free(a);
}
