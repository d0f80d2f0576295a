/* transports/efa/efa_data.c: the data path: one fi_write/fi_read per
 * slice, with the provider's backpressure and the in-flight limit. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "efa_internal.h"

/* ---- data path ---------------------------------------------------------------- */

/* The remote address the provider wants: virtual, or offset from the base
 * of the peer's registration (no FI_MR_VIRT_ADDR).  -1 when unknown. */
static int efa_remote_addr(const efa_ep *e, const tern_slice *s, uint64_t *out)
{
    if (e->dev->mr_mode & FI_MR_VIRT_ADDR) {
        *out = s->remote;
        return 0;
    }
    if (efa_key_is_base(e->dev)) {
        if (s->remote < s->rkey)
            return -1;
        *out = s->remote - s->rkey;
        return 0;
    }
    for (size_t i = 0; i < e->nbases; i++)
        if (e->base_keys[i] == s->rkey && s->remote >= e->base_addrs[i]) {
            *out = s->remote - e->base_addrs[i];
            return 0;
        }
    return -1;
}

/* The call returned: it leaves the device's list of calls, and a refused
 * operation (failed != NULL) leaves the in-flight list.  An accepted one
 * may be completed and freed already, so it is not touched here. */
static void efa_post_end(efa_dev *d, efa_posting *call, efa_op *failed)
{
    pthread_mutex_lock(&d->ops_lock);
    call->prev->next = call->next;
    call->next->prev = call->prev;
    if (failed) {
        failed->prev->next = failed->next;
        failed->next->prev = failed->prev;
        failed->peer->inflight--;
        failed->peer = NULL;
    }
    pthread_mutex_unlock(&d->ops_lock);
}

/* Post under the read lock, with the operation in the in-flight list only
 * while the provider holds it.  -FI_ESHUTDOWN: the endpoint belongs to a
 * recycled generation. */
static ssize_t efa_post(efa_ep *e, efa_op *op, uint64_t raddr)
{
    efa_dev *d = e->dev;
    tern_slice *s = op->slice;
    void *desc = (void *)(uintptr_t)s->lkey;
    efa_posting call;
    ssize_t rc;
    pthread_rwlock_rdlock(&d->av_lock);
    if (e->gen != atomic_load(&d->gen) || e->peer->stale) {
        pthread_rwlock_unlock(&d->av_lock);
        return -FI_ESHUTDOWN;
    }
    if (efa_peer_dead(e->peer)) {
        pthread_rwlock_unlock(&d->av_lock);
        return -FI_ECONNRESET;
    }
    op->posted_ms = tern_kit_now_ms();
    efa_op_link(d, op, &call);
    /* A large WRITE to a shm peer with a bounce endpoint goes through the
     * provider's bounce buffers (docs/protocol.md, "efa rails"). */
    int bounce = s->opcode == TERN_OP_WRITE && e->peer->has_b &&
                 s->length >= e->ctx->shm_bounce_min;
    efa_lock(d);
    if (s->opcode == TERN_OP_WRITE)
        rc = fi_write(bounce ? d->ep_b : d->ep, s->local, s->length, desc,
                      bounce ? e->peer->fi_addr_b : e->peer->fi_addr, raddr, s->rkey,
                      &op->fctx);
    else
        rc = fi_read(d->ep, s->local, s->length, desc, e->peer->fi_addr, raddr, s->rkey,
                     &op->fctx);
    efa_unlock(d);
    if (bounce && rc == 0)
        atomic_fetch_add(&d->bounced, 1);
    efa_post_end(d, &call, rc ? op : NULL);
    pthread_rwlock_unlock(&d->av_lock);
    return rc;
}

/* Fail slice s with code and a formatted message (cut to the slice's errmsg). */
static void efa_slice_failf(efa_ctx *c, tern_slice *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void efa_slice_failf(efa_ctx *c, tern_slice *s, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    efa_slice_finish(c, s, code, msg);
}

/* Post one slice; -FI_EAGAIN is retried after reading the CQ, until the
 * I/O timeout.  A failure completes the slice with a message. */
static void efa_submit_one(efa_ep *e, tern_slice *s)
{
    efa_dev *d = e->dev;
    efa_ctx *c = e->ctx;
    uint64_t raddr, deadline;
    ssize_t rc;
    efa_op *op;
    if ((s->opcode != TERN_OP_READ && s->opcode != TERN_OP_WRITE) || s->length > d->max_msg) {
        efa_slice_failf(c, s, TERN_ERR_INVAL, "bad slice: opcode %d, length %llu (max %llu on %s)",
                        s->opcode, (unsigned long long)s->length,
                        (unsigned long long)d->max_msg, d->dinfo.name);
        return;
    }
    if (efa_remote_addr(e, s, &raddr)) {
        efa_slice_failf(c, s, TERN_ERR_RANGE,
                        "remote address %llx / key %llx of %.80s is not inside a registration "
                        "of the peer (offset addressing)",
                        (unsigned long long)s->remote, (unsigned long long)s->rkey,
                        e->peer_nic_path);
        return;
    }
    op = calloc(1, sizeof *op);
    if (!op) {
        efa_slice_finish(c, s, TERN_ERR_NOMEM, "out of memory for the operation record");
        return;
    }
    op->slice = s;
    op->ep = e;
    atomic_fetch_add(&c->inflight, 1);
    deadline = tern_kit_now_ms() + (uint64_t)c->timeout_ms;
    while ((rc = efa_post(e, op, raddr)) == -FI_EAGAIN && tern_kit_now_ms() < deadline)
        if (!efa_cq_drain(d, 0))
            sched_yield();
    if (rc == 0) {
        atomic_fetch_add(&d->posted, 1);
        return;
    }
    free(op);
    atomic_fetch_sub(&c->inflight, 1);
    atomic_fetch_add(&d->failed, 1);
    if (rc == -FI_ESHUTDOWN) {
        efa_slice_finish(c, s, TERN_ERR_CLOSED, "the device endpoint was recycled: reconnect");
        return;
    }
    if (rc == -FI_ECONNRESET) {
        efa_slice_failf(c, s, TERN_ERR_CLOSED, "peer %.80s: its process %d is gone",
                        e->peer_nic_path, e->peer->pid);
        return;
    }
    if (rc == -FI_EAGAIN)
        atomic_store(&d->wedged, 1); /* the provider took nothing for a whole timeout */
    efa_slice_failf(c, s, rc == -FI_EAGAIN ? TERN_ERR_TIMEOUT : TERN_ERR_DEVICE,
                    "fi_%s to %.80s failed: %s", s->opcode ? "write" : "read", e->peer_nic_path,
                    fi_strerror((int)-rc));
}

int efa_submit(void *ep, tern_slice *const *slices, int n)
{
    efa_ep *e = ep;
    int i;
    if (!e || !slices || n < 0)
        return TERN_ERR_INVAL;
    if (!e->peer)
        return TERN_ERR_CONNECT;
    for (i = 0; i < n; i++) {
        if (atomic_load(&e->ctx->inflight) >= e->ctx->max_inflight)
            break;
        slices[i]->ep = ep;
        slices[i]->errmsg[0] = '\0';
        efa_submit_one(e, slices[i]);
    }
    return i;
}
