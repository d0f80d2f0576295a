/* transports/rdma/rdma_data.c: the data path: slices cut into work
 * requests and posted round-robin over an endpoint's QPs within the QP and
 * CQ limits, and the worker's CQ polling that hands finished slices back
 * through the host service complete(). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "rdma_internal.h"
#include "rdma_plugin.h"
#include "tern/transport.h"

/* ---- data path ------------------------------------------------------------ */

/* Post what fits (ep->lock held). */
static void rd_pump(rd_ep *ep)
{
    rd_dev *d = ep->dev;
    while (ep->q_head && ep->state == EP_CONNECTED) {
        tern_slice *s = ep->q_head;
        int qi = -1;
        for (int k = 0; k < ep->nqp; k++) {
            int i = (int)((ep->rr + (unsigned)k) % (unsigned)ep->nqp);
            if (ep->outstanding[i] < d->max_wr) {
                qi = i;
                break;
            }
        }
        if (qi < 0)
            return;
        if (atomic_fetch_add(&d->posted, 1) >= d->cq_size) {
            atomic_fetch_sub(&d->posted, 1);
            atomic_store(&d->starved, 1);
            return;
        }
        uint64_t off = s_off(s), len = s->length - off;
        if (len > d->piece)
            len = d->piece;
        struct ibv_sge sge = {.addr = (uintptr_t)s->local + off, .length = (uint32_t)len,
                              .lkey = (uint32_t)s->lkey};
        struct ibv_send_wr wr, *bad = NULL;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = (uintptr_t)s;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = s->opcode == TERN_OP_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = s->remote + off;
        wr.wr.rdma.rkey = (uint32_t)s->rkey;
        int rc = ibv_post_send(ep->qp[qi], &wr, &bad);
        if (rc != 0) {
            atomic_fetch_sub(&d->posted, 1);
            snprintf(ep->fail_msg, sizeof ep->fail_msg, "rdma: ibv_post_send on %s QP %u: %s",
                     d->name, ep->qp[qi]->qp_num, strerror(rc > 0 ? rc : errno));
            RD_LOG(ep->ctx, TERN_LOG_ERROR, "%s", ep->fail_msg);
            ep->state = EP_FAILED;
            rd_fail_queue(ep, TERN_ERR_DEVICE, ep->fail_msg);
            rd_qps_to_err(ep);
            return;
        }
        ep->outstanding[qi]++;
        ep->total++;
        ep->rr = (unsigned)qi + 1;
        s_set_off(s, off + len);
        if (s_off(s) >= s->length) {
            ep->q_head = S_NEXT(s);
            if (!ep->q_head)
                ep->q_tail = NULL;
            S_NEXT(s) = NULL;
        }
    }
}

int rd_submit(void *vep, tern_slice *const *slices, int n)
{
    rd_ep *ep = vep;
    if (!ep || n < 0 || (n > 0 && !slices))
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&ep->lock);
    if (ep->state != EP_CONNECTED) {
        int st = ep->state;
        pthread_mutex_unlock(&ep->lock);
        if (st == EP_FAILED)
            RD_LOG(ep->ctx, TERN_LOG_DEBUG, "rdma: submit to failed endpoint %s: %s",
                   ep->peer_nic_path, ep->fail_msg);
        return st == EP_CLOSING ? TERN_ERR_CLOSED : st == EP_FAILED ? TERN_ERR_DEVICE
                                                                   : TERN_ERR_INVAL;
    }
    tern_slice *now = NULL; /* finished at once: bad opcode, empty */
    for (int i = 0; i < n; i++) {
        tern_slice *s = slices[i];
        s->status = 0;
        s->transferred = 0;
        s->errmsg[0] = '\0';
        S_EP(s) = ep;
        s_set_off(s, 0);
        S_NEXT(s) = NULL;
        if ((s->opcode != TERN_OP_READ && s->opcode != TERN_OP_WRITE) || !s->local || s->length == 0) {
            if (s->length != 0 || (s->opcode != TERN_OP_READ && s->opcode != TERN_OP_WRITE))
                rd_slice_fail(s, TERN_ERR_INVAL, "rdma: slice with a bad opcode or no local address");
            S_NEXT(s) = now;
            now = s;
            continue;
        }
        s_set_left(s, rd_wr_count(s->length, ep->dev->piece));
        if (ep->q_tail)
            S_NEXT(ep->q_tail) = s;
        else
            ep->q_head = s;
        ep->q_tail = s;
    }
    rd_pump(ep);
    pthread_mutex_unlock(&ep->lock);
    while (now) {
        tern_slice *next = S_NEXT(now);
        rd_done_push(ep->ctx, now);
        now = next;
    }
    return n;
}

static const char *rd_op_name(const tern_slice *s)
{
    return s->opcode == TERN_OP_READ ? "READ" : "WRITE";
}

/* One completion (worker thread).  Returns the endpoint when it must be
 * destroyed now (closing and drained). */
static rd_ep *rd_complete(rd_dev *d, const struct ibv_wc *wc)
{
    tern_slice *s = (tern_slice *)(uintptr_t)wc->wr_id;
    rd_ep *ep = S_EP(s);
    atomic_fetch_sub(&d->posted, 1);
    pthread_mutex_lock(&ep->lock);
    for (int i = 0; i < ep->nqp; i++)
        if (ep->qp[i] && ep->qp[i]->qp_num == wc->qp_num) {
            ep->outstanding[i]--;
            break;
        }
    ep->total--;
    if (wc->status != IBV_WC_SUCCESS) {
        char msg[512];
        int code = ep->state == EP_CLOSING
                       ? tern_kit_errf(msg, sizeof msg, TERN_ERR_CLOSED,
                                       "rdma: endpoint to %s closed with the %s in flight",
                                       ep->peer_nic_path, rd_op_name(s))
                       : tern_kit_errf(msg, sizeof msg, TERN_ERR_DEVICE,
                                       "rdma: %s on %s QP %u to %s: %s (vendor err 0x%x)",
                                       rd_op_name(s), d->name, wc->qp_num, ep->peer_nic_path,
                                       ibv_wc_status_str(wc->status), wc->vendor_err);
        rd_slice_fail(s, code, msg);
        if (ep->state == EP_CONNECTED) {
            RD_LOG(ep->ctx, TERN_LOG_ERROR, "%s; endpoint marked failed", msg);
            snprintf(ep->fail_msg, sizeof ep->fail_msg, "%s", msg);
            ep->state = EP_FAILED;
            rd_fail_queue(ep, TERN_ERR_DEVICE, msg);
            rd_qps_to_err(ep);
        }
    }
    s_set_left(s, s_left(s) - 1);
    if (s_left(s) == 0) {
        s->transferred = s->status == 0 ? s->length : 0;
        rd_done_push(ep->ctx, s);
    }
    rd_pump(ep);
    if (ep->total == 0)
        pthread_cond_broadcast(&ep->drained);
    int destroy = ep->state == EP_CLOSING && ep->total == 0 && !ep->closer;
    pthread_mutex_unlock(&ep->lock);
    return destroy ? ep : NULL;
}

/* CQ room came back: let every waiting endpoint of this device post. */
static void rd_unstarve(rd_dev *d)
{
    if (!atomic_exchange(&d->starved, 0))
        return;
    rd_ctx *c = d->ctx;
    pthread_mutex_lock(&c->lock);
    for (rd_ep *ep = c->eps; ep; ep = ep->next) {
        if (ep->dev != d)
            continue;
        pthread_mutex_lock(&ep->lock);
        rd_pump(ep);
        pthread_mutex_unlock(&ep->lock);
    }
    pthread_mutex_unlock(&c->lock);
}

void *rd_worker(void *arg)
{
    rd_dev *d = arg;
    rd_ctx *c = d->ctx;
    struct ibv_wc wc[RD_WC_BATCH];
    int armed = 0;
    while (!atomic_load(&c->stop)) {
        int n = ibv_poll_cq(d->cq, RD_WC_BATCH, wc);
        if (n < 0) {
            RD_LOG(c, TERN_LOG_ERROR, "rdma: ibv_poll_cq(%s) failed", d->name);
            usleep(10000);
            continue;
        }
        if (n == 0) {
            if (!armed) {
                /* Arm, then poll again: a completion between the poll and
                 * the arm would otherwise wait for the next one. */
                ibv_req_notify_cq(d->cq, 0);
                armed = 1;
                continue;
            }
            struct pollfd pfd = {.fd = d->chan->fd, .events = POLLIN};
            if (poll(&pfd, 1, 100) > 0) {
                struct ibv_cq *cq;
                void *cqctx;
                if (ibv_get_cq_event(d->chan, &cq, &cqctx) == 0) {
                    ibv_ack_cq_events(cq, 1);
                    armed = 0;
                }
            }
            continue;
        }
        for (int i = 0; i < n; i++) {
            rd_ep *dead = rd_complete(d, &wc[i]);
            if (dead)
                rd_ep_destroy(dead);
        }
        rd_unstarve(d);
    }
    return NULL;
}
