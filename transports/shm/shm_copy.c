/* transports/shm/shm_copy.c: one chunk's copy (the checks of both ranges,
 * announced in our table so deregistrations wait for it, then
 * process_vm_writev / readv), and the end of an endpoint's life.  Below
 * the pool (shm_pool.c), which calls it, and below shm.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "shm_internal.h"

#define RELAY_MIN_SLOTS 4

void shm_ep_unref(shm_ep *ep)
{
    if (atomic_fetch_sub(&ep->refs, 1) != 1)
        return;
    shm_remote_fini(&ep->remote);
    shm_maps_fini(&ep->maps);
    shm_relay_tx_fini(&ep->tx);
    shm_relay_rx_stop(ep->rx);
    pthread_mutex_destroy(&ep->lock);
    pthread_cond_destroy(&ep->idle);
    ep->ctx->host->free(ep);
}

/* process_vm_writev / readv of len bytes, looping over partial transfers. */
static int move(shm_ep *ep, int op, uint8_t *local, uint64_t remote, uint64_t len, char *msg,
                size_t msglen)
{
    pid_t pid = (pid_t)ep->peer.pid;
    while (len > 0) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t n = op == TERN_OP_WRITE ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                                    : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EFAULT;
            if (e == ESRCH)
                return tern_kit_errf(msg, msglen, TERN_ERR_CLOSED, "shm: peer process %ld is gone",
                            (long)pid);
            if (e == EFAULT)
                return tern_kit_errf(msg, msglen, TERN_ERR_RANGE, "shm: 0x%llx+%llu is not mapped in "
                            "process %ld", (unsigned long long)remote,
                            (unsigned long long)len, (long)pid);
            char why[400];
            shm_ident_explain(pid, e, why, sizeof why);
            return tern_kit_errf(msg, msglen, TERN_ERR_UNREACHABLE, "shm: %s", why);
        }
        local += n;
        remote += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

/* The copy is announced in our table's slot before either range is
 * checked, so a deregistration on either side waits for it (shm_drain.c). */
static int copy_chunk(shm_ep *ep, int slot, tern_slice *s, uint64_t off, uint64_t len,
                      char *msg, size_t msglen)
{
    shm_local *l = &ep->ctx->local;
    uint8_t *local = (uint8_t *)s->local + off;
    uint64_t remote = s->remote + off, seq = 0;
    if (!shm_local_covers(l, slot, s->lkey, (uintptr_t)local, len))
        return tern_kit_errf(msg, msglen, TERN_ERR_RANGE, "shm: local %p+%llu not registered with lkey "
                    "%llu", (void *)local, (unsigned long long)len, (unsigned long long)s->lkey);
    /* The peer's CURRENT table, read now: a range it unregistered is refused. */
    shm_entry hit;
    int rc = shm_remote_check(&ep->remote, s->rkey, remote, len, &seq, &hit, msg, msglen);
    if (rc)
        return rc;
    shm_copy_checked(l, slot, seq);
    /* The peer's registration mapped here (shm_map.c): a plain memcpy. */
    uint8_t *base = NULL;
    int m = shm_maps_get(&ep->maps, ep->ctx->host, &ep->remote, (pid_t)ep->peer.pid, &hit, &base);
    if (m >= 0) {
        uint8_t *peer = base + (remote - hit.addr);
        if (s->opcode == TERN_OP_WRITE)
            shm_copy_stream(peer, local, len);
        else
            shm_copy_stream(local, peer, len);
        shm_maps_put(&ep->maps, m);
        atomic_fetch_add(&ep->ctx->mapped_bytes, len);
        return 0;
    }
    /* Private memory: through the peer's relay when it serves one (two
     * copies on two CPUs, no page pinned), else cross-memory attach.  A
     * chunk of fewer than RELAY_MIN_SLOTS slots keeps cross-memory attach:
     * its pieces are too few to overlap the two halves, and the hand-over
     * to the target's thread then costs more than the pinning (64 KiB
     * blocks: 3.9-4.4 GB/s through the relay, 5.1-6.4 by attach). */
    shm_ctx *ctx = ep->ctx;
    if (len >= RELAY_MIN_SLOTS * (uint64_t)ctx->opt.relay_slot_size && atomic_load(&ep->tx.on)) {
        rc = shm_relay_copy(&ep->tx, s->opcode, local, s->rkey, remote, len,
                            ctx->opt.relay_timeout_ms, msg, msglen);
        if (rc != SHM_RELAY_AGAIN) {
            if (rc == 0)
                atomic_fetch_add(&ctx->relay_bytes, len);
            return rc;
        }
        ctx->host->log(ctx->host->host, TERN_LOG_WARN, "%s; copies to process %ld use "
                       "cross-memory attach from now on", msg + 5, (long)ep->peer.pid);
    }
    atomic_fetch_add(&ctx->cma_bytes, len);
    return move(ep, s->opcode, local, remote, len, msg, msglen);
}

/* running goes up BEFORE closing is read, and ep_close sets closing before
 * it reads running: one of the two sees the other. */
int shm_copy_chunk(shm_ep *ep, tern_slice *s, uint64_t off, uint64_t len, char *msg,
                   size_t msglen)
{
    atomic_fetch_add(&ep->running, 1);
    int rc;
    if (atomic_load(&ep->closing)) {
        rc = tern_kit_errf(msg, msglen, TERN_ERR_CLOSED, "shm: endpoint closed");
    } else {
        int slot = shm_copy_begin(&ep->ctx->local, ep->peer.instance);
        rc = copy_chunk(ep, slot, s, off, len, msg, msglen);
        shm_copy_end(&ep->ctx->local, slot);
    }
    /* Only a closing endpoint has a waiter (ep_close sets closing before
     * it reads running), so the common path takes no lock. */
    if (atomic_fetch_sub(&ep->running, 1) == 1 && atomic_load(&ep->closing)) {
        pthread_mutex_lock(&ep->lock);
        pthread_cond_broadcast(&ep->idle);
        pthread_mutex_unlock(&ep->lock);
    }
    return rc;
}
