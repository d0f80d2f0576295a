/* transports/efa/efa_ep.c: endpoints and the peers they reach: one AV
 * entry per peer address, shared by the endpoints that use it. */
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
#include "tern/tern.h"

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
    if (!p || !out || p->local_dev < 0 || p->local_dev >= c->ndev) {
        snprintf(err, errlen, "efa ep_open: local device %d out of range (have %d)",
                 p ? p->local_dev : -1, c->ndev);
        return TERN_ERR_INVAL;
    }
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
    return e->ctx->host->desc_set_str(out, "efa_addr", hex);
}

/* A shm peer that died holding its region's lock makes fi_write spin
 * forever on it, so shm peers are checked for life before each post (same
 * pid namespace: CMA needs it anyway).  efa_shm_pid() reads the pid.  A
 * process that has exited but whose parent has not reaped it yet (a zombie)
 * still answers kill(pid, 0), so the check polls a pidfd, which becomes
 * readable at exit; kill() is the fallback where pidfd_open is refused. */
int efa_peer_dead(const efa_peer *p)
{
    if (p->pid <= 0)
        return 0;
    if (p->pidfd >= 0) {
        struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) > 0;
    }
    return kill(p->pid, 0) != 0 && errno == ESRCH;
}

static int efa_pidfd_open(int pid)
{
#ifdef SYS_pidfd_open
    return pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
#else
    (void)pid;
    return -1;
#endif
}

void efa_peer_free(efa_peer *p)
{
    if (p->pidfd >= 0)
        close(p->pidfd);
    free(p);
}

/* Insert addr in the device's AV once; endpoints to the same peer share
 * it.  Lock order everywhere: av_lock, then ops_lock. */
static int efa_peer_get(efa_dev *d, const uint8_t *addr, size_t len, efa_peer **out,
                        char *err, size_t errlen)
{
    efa_peer *p;
    *out = NULL;
    pthread_mutex_lock(&d->ops_lock);
    for (p = d->peers; p; p = p->next)
        if (p->addrlen == len && !memcmp(p->addr, addr, len))
            break;
    if (p)
        p->refs++;
    pthread_mutex_unlock(&d->ops_lock);
    if (p) {
        *out = p;
        return 0;
    }
    if ((p = calloc(1, sizeof *p)) == NULL)
        return TERN_ERR_NOMEM;
    memcpy(p->addr, addr, len);
    p->addrlen = len;
    p->pid = efa_shm_pid(p->addr, len);
    p->pidfd = efa_pidfd_open(p->pid);
    pthread_rwlock_wrlock(&d->av_lock);
    efa_lock(d);
    int n = fi_av_insert(d->av, p->addr, 1, &p->fi_addr, 0, NULL);
    efa_unlock(d);
    if (n == 1) {
        p->refs = 1;
        p->gen = atomic_load(&d->gen);
        pthread_mutex_lock(&d->ops_lock);
        p->next = d->peers;
        d->peers = p;
        pthread_mutex_unlock(&d->ops_lock);
    }
    pthread_rwlock_unlock(&d->av_lock);
    if (n != 1) {
        snprintf(err, errlen,
                 "fi_av_insert of the peer's efa_addr on %s failed (%s): is the peer "
                 "using the same provider (%s)?",
                 d->dinfo.name, n < 0 ? fi_strerror(-n) : "address not accepted",
                 d->ctx->prov_name);
        efa_peer_free(p);
        return TERN_ERR_CONNECT;
    }
    *out = p;
    return 0;
}

static void efa_peer_put(efa_dev *d, efa_peer *p)
{
    efa_peer *gone = NULL;
    pthread_mutex_lock(&d->ops_lock);
    if (--p->refs == 0 && p->stale) {
        efa_peer_free(p);
    } else if (p->refs == 0 && p->inflight == 0) {
        gone = efa_peer_unlink_locked(d, p);
    }
    pthread_mutex_unlock(&d->ops_lock);
    if (gone)
        efa_peer_remove(d, gone);
}

int efa_ep_connect(void *ep, const tern_desc *peer, char *err, size_t errlen)
{
    efa_ep *e = ep;
    uint8_t addr[EFA_ADDR_MAX];
    const char *hex = peer ? e->ctx->host->desc_get_str(peer, "efa_addr") : NULL;
    if (!hex) {
        snprintf(err, errlen, "handshake from %s carries no efa_addr: is the peer's transport "
                 "efa?", e->peer_nic_path);
        return TERN_ERR_PROTOCOL;
    }
    long n = efa_hex_decode(hex, addr, sizeof addr);
    if (n < 0) {
        snprintf(err, errlen, "efa_addr from %s is not an even-length hex string of 1..%d "
                 "bytes (got %zu characters)", e->peer_nic_path, EFA_ADDR_MAX, strlen(hex));
        return TERN_ERR_PROTOCOL;
    }
    if (e->peer) {
        efa_peer_put(e->dev, e->peer);
        e->peer = NULL;
    }
    e->gen = atomic_load(&e->dev->gen);
    return efa_peer_get(e->dev, addr, (size_t)n, &e->peer, err, errlen);
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
