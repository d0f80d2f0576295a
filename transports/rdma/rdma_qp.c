/* transports/rdma/rdma_qp.c: endpoints and their RC QPs: creation, the
 * RESET -> INIT -> RTR -> RTS transitions with the attributes rdma_attr.c
 * builds (docs/rdma.md), reset, error and close. */
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

/* ---- endpoints ------------------------------------------------------------ */

static struct ibv_qp *rd_qp_create(rd_ep *ep)
{
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = ep->dev->cq;
    a.recv_cq = ep->dev->cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 0;
    a.cap.max_send_wr = (uint32_t)ep->dev->max_wr;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    return ibv_create_qp(ep->dev->pd, &a);
}

void rd_ep_destroy(rd_ep *ep)
{
    rd_ctx *c = ep->ctx;
    pthread_mutex_lock(&c->lock);
    if (ep->prev)
        ep->prev->next = ep->next;
    else if (c->eps == ep)
        c->eps = ep->next;
    if (ep->next)
        ep->next->prev = ep->prev;
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < ep->nqp; i++)
        if (ep->qp[i])
            ibv_destroy_qp(ep->qp[i]);
    pthread_mutex_destroy(&ep->lock);
    pthread_cond_destroy(&ep->drained);
    rd_free(c, ep);
}

int rd_ep_open(void *ctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    rd_ctx *c = ctx;
    if (!p || !out || p->local_dev < 0 || p->local_dev >= c->ndev)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                             "rdma: ep_open: local device %d out of range 0..%d",
                             p ? p->local_dev : -1, c->ndev - 1);
    rd_ep *ep = rd_alloc(c, sizeof *ep);
    if (!ep)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
    ep->ctx = c;
    ep->dev = &c->devs[p->local_dev];
    ep->nqp = c->qp_per_ep;
    snprintf(ep->peer_nic_path, sizeof ep->peer_nic_path, "%s",
             p->peer_nic_path ? p->peer_nic_path : "?");
    pthread_mutex_init(&ep->lock, NULL);
    pthread_cond_init(&ep->drained, NULL);
    for (int i = 0; i < ep->nqp; i++) {
        ep->qp[i] = rd_qp_create(ep);
        if (!ep->qp[i]) {
            int e = errno;
            rd_ep_destroy(ep);
            return tern_kit_errf(
                err, errlen, TERN_ERR_DEVICE,
                "rdma: ibv_create_qp on %s (QP %d of %d, max_wr %d): %s; check "
                "transports.rdma.max_wr and qp_per_endpoint against the device limits",
                c->devs[p->local_dev].name, i + 1, c->qp_per_ep, ep->dev->max_wr, strerror(e));
        }
        ep->qp_state[i] = IBV_QPS_RESET;
    }
    pthread_mutex_lock(&c->lock);
    ep->next = c->eps;
    if (c->eps)
        c->eps->prev = ep;
    c->eps = ep;
    pthread_mutex_unlock(&c->lock);
    *out = ep;
    return 0;
}

int rd_ep_describe(void *vep, tern_desc *out)
{
    rd_ep *ep = vep;
    const tern_host_services *h = ep->ctx->host;
    uint32_t qpn[TERN_RDMA_MAX_QP];
    char gid[48];
    pthread_mutex_lock(&ep->lock);
    for (int i = 0; i < ep->nqp; i++)
        qpn[i] = ep->qp[i] ? ep->qp[i]->qp_num : 0;
    int n = ep->nqp;
    pthread_mutex_unlock(&ep->lock);
    rd_gid_format(ep->dev->gid, gid);
    int rc = h->desc_set_u64(out, "local_lid", ep->dev->port_attr.lid);
    if (rc == 0)
        rc = h->desc_set_str(out, "local_gid", gid);
    if (rc == 0)
        rc = h->desc_set_u32_array(out, "qp_num", qpn, (size_t)n);
    if (rc == 0)
        rc = h->desc_set_u64(out, "mtu", (uint64_t)rd_mtu_to_bytes(rd_path_mtu(
                                              ep->dev->port_attr.active_mtu, ep->ctx->mtu)));
    return rc;
}

/* One QP transition; on failure the step's message plus strerror. */
static int rd_modify(rd_ep *ep, int i, rd_step step, struct ibv_qp_attr *a, int mask,
                     char *err, size_t errlen)
{
    int rc = ibv_modify_qp(ep->qp[i], a, mask);
    if (rc == 0) {
        ep->qp_state[i] = a->qp_state;
        return 0;
    }
    int e = rc > 0 ? rc : (errno ? errno : EINVAL);
    tern_kit_errf(err, errlen, TERN_ERR_DEVICE, "%s: %s", rd_step_message(step), strerror(e));
    RD_LOG(ep->ctx, TERN_LOG_ERROR, "rdma: %s QP %u to %s: %s", ep->dev->name, ep->qp[i]->qp_num,
           ep->peer_nic_path, err ? err : strerror(e));
    return TERN_ERR_DEVICE;
}

/* All QPs back to RESET (ep->lock held, nothing in flight).  A QP the
 * device will not reset is destroyed and recreated (new qp_num: the next
 * ep_describe shows it). */
static int rd_qps_to_reset(rd_ep *ep, char *err, size_t errlen)
{
    struct ibv_qp_attr a;
    for (int i = 0; i < ep->nqp; i++) {
        if (ep->qp_state[i] == IBV_QPS_RESET)
            continue; /* a fresh QP is already RESET */
        int mask = rd_attr_reset(&a);
        if (rd_modify(ep, i, TERN_RDMA_STEP_RESET, &a, mask, err, errlen) == 0)
            continue;
        ibv_destroy_qp(ep->qp[i]);
        ep->qp[i] = rd_qp_create(ep);
        if (!ep->qp[i])
            return tern_kit_errf(err, errlen, TERN_ERR_DEVICE,
                                 "Failed to recreate QP after a failed reset on %s: %s",
                                 ep->dev->name, strerror(errno));
        ep->qp_state[i] = IBV_QPS_RESET;
    }
    return 0;
}

static int rd_parse_peer(rd_ep *ep, const tern_desc *peer, rd_peer_qp *pq, int *nqp,
                         char *err, size_t errlen)
{
    const tern_host_services *h = ep->ctx->host;
    uint32_t qpn[TERN_RDMA_MAX_QP];
    uint64_t lid = 0;
    uint8_t gid[16];
    if (!peer)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "rdma: no handshake descriptor from %s", ep->peer_nic_path);
    int n = h->desc_get_u32_array(peer, "qp_num", qpn, TERN_RDMA_MAX_QP);
    if (n < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "rdma: handshake from %s: qp_num missing or not an array of uint32",
                             ep->peer_nic_path);
    int rc = rd_check_qp_count(ep->nqp, n, ep->peer_nic_path, err, errlen);
    if (rc < 0)
        return rc;
    if (h->desc_get_u64(peer, "local_lid", &lid) != 0 || lid > 0xffff)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "rdma: handshake from %s: local_lid missing or not a uint16",
                             ep->peer_nic_path);
    const char *g = h->desc_get_str(peer, "local_gid");
    if (!g || rd_gid_parse(g, gid) != 0)
        return tern_kit_errf(
            err, errlen, TERN_ERR_PROTOCOL,
            "rdma: handshake from %s: local_gid '%s' is not 16 colon-separated hex "
            "bytes",
            ep->peer_nic_path, g ? g : "(missing)");
    uint64_t mtu = 0; /* optional: peers that send none keep our MTU */
    enum ibv_mtu pmtu = (enum ibv_mtu)0;
    if (h->desc_get_u64(peer, "mtu", &mtu) == 0 && !(pmtu = rd_mtu_from_bytes((int64_t)mtu)))
        return tern_kit_errf(
            err, errlen, TERN_ERR_PROTOCOL,
            "rdma: handshake from %s: mtu %llu is not 256, 512, 1024, 2048 or 4096",
            ep->peer_nic_path, (unsigned long long)mtu);
    for (int i = 0; i < n; i++) {
        pq[i].mtu = pmtu;
        pq[i].lid = (uint16_t)lid;
        memcpy(pq[i].gid, gid, 16);
        pq[i].qp_num = qpn[i];
    }
    *nqp = n;
    return 0;
}

static int rd_bring_up(rd_ep *ep, const rd_peer_qp *pq, char *err, size_t errlen)
{
    rd_ctx *c = ep->ctx;
    rd_qp_cfg cfg = {
        .port_num = (uint8_t)c->port, .pkey_index = (uint16_t)c->pkey_index,
        .sgid_index = (uint8_t)ep->dev->gid_index, .traffic_class = c->traffic_class,
        .active_mtu = ep->dev->port_attr.active_mtu, .mtu = c->mtu,
    };
    struct ibv_qp_attr a;
    int rc = rd_qps_to_reset(ep, err, errlen);
    for (int i = 0; rc == 0 && i < ep->nqp; i++) {
        int mask = rd_attr_init(&cfg, &a);
        rc = rd_modify(ep, i, TERN_RDMA_STEP_INIT, &a, mask, err, errlen);
        if (rc == 0) {
            mask = rd_attr_rtr(&cfg, &pq[i], &a);
            rc = rd_modify(ep, i, TERN_RDMA_STEP_RTR, &a, mask, err, errlen);
        }
        if (rc == 0) {
            mask = rd_attr_rts(&a);
            rc = rd_modify(ep, i, TERN_RDMA_STEP_RTS, &a, mask, err, errlen);
        }
    }
    return rc;
}

int rd_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    rd_ep *ep = vep;
    rd_peer_qp pq[TERN_RDMA_MAX_QP];
    int n = 0;
    int rc = rd_parse_peer(ep, peer, pq, &n, err, errlen);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&ep->lock);
    if (ep->state == EP_CLOSING) {
        pthread_mutex_unlock(&ep->lock);
        return tern_kit_errf(err, errlen, TERN_ERR_CLOSED, "rdma: endpoint to %s is closing",
                             ep->peer_nic_path);
    }
    if (ep->total > 0) {
        pthread_mutex_unlock(&ep->lock);
        return tern_kit_errf(err, errlen, TERN_ERR_BUSY,
                             "rdma: endpoint to %s still has work in flight; reset it first",
                             ep->peer_nic_path);
    }
    rc = rd_bring_up(ep, pq, err, errlen);
    if (rc < 0) {
        char ignored[160];
        rd_qps_to_reset(ep, ignored, sizeof ignored);
        ep->state = EP_IDLE;
    } else {
        ep->state = EP_CONNECTED;
        ep->fail_msg[0] = '\0';
    }
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

/* Move every QP to ERR so posted work flushes back through the CQ. */
void rd_qps_to_err(rd_ep *ep)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    for (int i = 0; i < ep->nqp; i++)
        if (ep->qp[i] && ep->qp_state[i] != IBV_QPS_RESET && ep->qp_state[i] != IBV_QPS_ERR &&
            ibv_modify_qp(ep->qp[i], &a, IBV_QP_STATE) == 0)
            ep->qp_state[i] = IBV_QPS_ERR;
}

/* Fail what is still queued (ep->lock held); slices with pieces in flight
 * finish when those flush. */
void rd_fail_queue(rd_ep *ep, int code, const char *msg)
{
    tern_slice *s = ep->q_head;
    ep->q_head = ep->q_tail = NULL;
    while (s) {
        tern_slice *next = S_NEXT(s);
        uint64_t unposted = rd_wr_count(s->length - s_off(s), ep->dev->piece);
        rd_slice_fail(s, code, msg);
        s_set_left(s, s_left(s) - unposted);
        if (s_left(s) == 0) {
            s->transferred = 0;
            rd_done_push(ep->ctx, s);
        }
        s = next;
    }
}

void rd_ep_close(void *vep)
{
    rd_ep *ep = vep;
    if (!ep)
        return;
    pthread_mutex_lock(&ep->lock);
    ep->state = EP_CLOSING;
    rd_fail_queue(ep, TERN_ERR_CLOSED, "rdma: endpoint closed before the slice was posted");
    rd_qps_to_err(ep);
    /* Wait (bounded) for what is in flight to flush back through the
     * worker: the core may free its endpoint bookkeeping as soon as this
     * returns (engine teardown), so those completions must not come
     * later.  Not on the device's own worker: it delivers them.  While
     * this thread waits, it alone destroys the endpoint (ep->closer keeps
     * the worker from doing it too); otherwise the worker does, when its
     * last completion brings total to 0. */
    if (ep->total > 0 && !pthread_equal(pthread_self(), ep->dev->worker)) {
        struct timespec dl = tern_kit_deadline(RD_DRAIN_MS);
        ep->closer = 1;
        while (ep->total > 0)
            if (pthread_cond_timedwait(&ep->drained, &ep->lock, &dl) == ETIMEDOUT)
                break;
        ep->closer = 0;
        if (ep->total > 0)
            RD_LOG(ep->ctx, TERN_LOG_WARN, "rdma: close of the endpoint to %s: %d requests "
                   "did not flush in %d ms; it is freed after the last one",
                   ep->peer_nic_path, ep->total, RD_DRAIN_MS);
    }
    int now = ep->total == 0;
    pthread_mutex_unlock(&ep->lock);
    if (now)
        rd_ep_destroy(ep); /* else the worker does, after the last flush */
}

int rd_ep_reset(void *vep)
{
    rd_ep *ep = vep;
    pthread_mutex_lock(&ep->lock);
    if (ep->state == EP_CLOSING) {
        pthread_mutex_unlock(&ep->lock);
        return TERN_ERR_CLOSED;
    }
    ep->state = EP_FAILED;
    rd_fail_queue(ep, TERN_ERR_DEVICE, "rdma: endpoint reset before the slice was posted");
    rd_qps_to_err(ep);
    struct timespec dl = tern_kit_deadline(RD_DRAIN_MS);
    while (ep->total > 0)
        if (pthread_cond_timedwait(&ep->drained, &ep->lock, &dl) == ETIMEDOUT)
            break;
    int rc = 0;
    if (ep->total > 0) {
        RD_LOG(ep->ctx, TERN_LOG_WARN, "rdma: reset of the endpoint to %s: %d requests did not "
               "flush in %d ms", ep->peer_nic_path, ep->total, RD_DRAIN_MS);
        rc = TERN_ERR_BUSY;
    } else {
        char err[160] = "";
        rc = rd_qps_to_reset(ep, err, sizeof err);
        if (rc == 0)
            ep->state = EP_IDLE;
    }
    pthread_mutex_unlock(&ep->lock);
    return rc;
}
