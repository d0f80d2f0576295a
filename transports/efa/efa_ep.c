/* transports/efa/efa_ep.c: endpoints; the peers they reach are in
 * efa_peer.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "efa_internal.h"

/* ---- endpoints ------------------------------------------------------------------ */

static void efa_ep_bases(efa_ep *e, const tern_desc *seg)
{
    const char *t = seg ? e->ctx->host->desc_get_str(seg, "mr_bases") : NULL;
    size_t n = 1;
    if (!t || !*t)
        return;
    for (const char *p = t; *p; p++)
        n += *p == ',';
    e->base_keys = calloc(n, sizeof *e->base_keys);
    e->base_addrs = calloc(n, sizeof *e->base_addrs);
    if (!e->base_keys || !e->base_addrs)
        return;
    while (*t && e->nbases < n) {
        unsigned long long k, a;
        if (sscanf(t, "%llx:%llx", &k, &a) != 2)
            break;
        e->base_keys[e->nbases] = k;
        e->base_addrs[e->nbases++] = a;
        t = strchr(t, ',');
        if (!t)
            break;
        t++;
    }
}

int efa_ep_open(void *ctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    efa_ctx *c = ctx;
    efa_ep *e;
    if (!p || !out || p->local_dev < 0 || p->local_dev >= c->ndev)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                             "efa ep_open: local device %d out of range (have %d)",
                             p ? p->local_dev : -1, c->ndev);
    e = calloc(1, sizeof *e);
    if (!e)
        return TERN_ERR_NOMEM;
    e->ctx = c;
    e->dev = &c->devs[p->local_dev];
    snprintf(e->peer_nic_path, sizeof e->peer_nic_path, "%s",
             p->peer_nic_path ? p->peer_nic_path : "?");
    if (!(e->dev->mr_mode & FI_MR_VIRT_ADDR) && !efa_key_is_base(e->dev))
        efa_ep_bases(e, p->peer_segment);
    pthread_mutex_lock(&c->list_lock);
    e->next = c->eps.next;
    e->prev = &c->eps;
    c->eps.next->prev = e;
    c->eps.next = e;
    pthread_mutex_unlock(&c->list_lock);
    *out = e;
    return 0;
}

int efa_ep_describe(void *ep, tern_desc *out)
{
    efa_ep *e = ep;
    char hex[2 * EFA_ADDR_MAX + 1];
    efa_hex_encode(e->dev->addr, e->dev->addrlen, hex);
    int rc = e->ctx->host->desc_set_str(out, "efa_addr", hex);
    if (rc || !e->dev->addrlen_b)
        return rc;
    efa_hex_encode(e->dev->addr_b, e->dev->addrlen_b, hex);
    return e->ctx->host->desc_set_str(out, "efa_addr_b", hex);
}


int efa_ep_connect(void *ep, const tern_desc *peer, char *err, size_t errlen)
{
    efa_ep *e = ep;
    uint8_t addr[EFA_ADDR_MAX];
    const char *hex = peer ? e->ctx->host->desc_get_str(peer, "efa_addr") : NULL;
    if (!hex)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "handshake from %s carries no "
                             "efa_addr: is the peer's transport efa?", e->peer_nic_path);
    long n = efa_hex_decode(hex, addr, sizeof addr);
    if (n < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "efa_addr from %s is not an "
                             "even-length hex string of 1..%d bytes (got %zu characters)",
                             e->peer_nic_path, EFA_ADDR_MAX, strlen(hex));
    /* The peer's bounce endpoint (shm), used only if we have one too. */
    uint8_t addr_b[EFA_ADDR_MAX];
    const char *hex_b = e->dev->ep_b ? e->ctx->host->desc_get_str(peer, "efa_addr_b") : NULL;
    long n_b = hex_b ? efa_hex_decode(hex_b, addr_b, sizeof addr_b) : 0;
    if (n_b < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "efa_addr_b from %s is not an "
                             "even-length hex string of 1..%d bytes (got %zu characters)",
                             e->peer_nic_path, EFA_ADDR_MAX, strlen(hex_b));
    if (e->peer) {
        efa_peer_put(e->dev, e->peer);
        e->peer = NULL;
    }
    e->gen = atomic_load(&e->dev->gen);
    return efa_peer_get(e->dev, addr, (size_t)n, addr_b, (size_t)n_b, &e->peer, err, errlen);
}

void efa_ep_free(efa_ep *e)
{
    efa_ctx *c = e->ctx;
    efa_ops_abandon(e->dev, e, 0, TERN_ERR_CLOSED, "endpoint closed with the slice in flight");
    if (e->peer)
        efa_peer_put(e->dev, e->peer);
    pthread_mutex_lock(&c->list_lock);
    e->prev->next = e->next;
    e->next->prev = e->prev;
    pthread_mutex_unlock(&c->list_lock);
    free(e->base_keys);
    free(e->base_addrs);
    free(e);
}

void efa_ep_close(void *ep)
{
    if (ep)
        efa_ep_free(ep);
}
