/* transports/rdma/rdma_mr.c: memory registration on every device, and the
 * segment-level address blob. */
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

/* ---- memory registration -------------------------------------------------- */

int rd_mr_register(void *ctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                   char *err, size_t errlen)
{
    rd_ctx *c = ctx;
    if (!addr || len == 0 || !keys || !out)
        return rd_err(err, errlen, TERN_ERR_INVAL, "rdma: mr_register needs an address and a length");
    rd_mr *m = rd_alloc(c, sizeof *m);
    if (!m)
        return rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    for (int i = 0; i < c->ndev; i++) {
        m->mr[i] = ibv_reg_mr(c->devs[i].pd, addr, len, access);
        if (!m->mr[i]) {
            int e = errno;
            for (int k = 0; k < i; k++)
                ibv_dereg_mr(m->mr[k]);
            rd_free(c, m);
            return rd_err(err, errlen, e == ENOMEM || e == EPERM ? TERN_ERR_NOMEM : TERN_ERR_DEVICE,
                          "rdma: ibv_reg_mr(%p, %zu bytes) on %s: %s; check the locked-memory "
                          "limit (ulimit -l) and that the range is mapped",
                          addr, len, c->devs[i].name, strerror(e));
        }
        keys->lkey[i] = m->mr[i]->lkey;
        keys->rkey[i] = m->mr[i]->rkey;
    }
    m->ndev = c->ndev;
    keys->ndev = c->ndev;
    pthread_mutex_lock(&c->lock);
    m->next = c->mrs;
    c->mrs = m;
    pthread_mutex_unlock(&c->lock);
    *out = m;
    return 0;
}

int rd_mr_deregister(void *ctx, void *mr)
{
    rd_ctx *c = ctx;
    rd_mr *m = mr, **pp;
    if (!m)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&c->lock);
    for (pp = &c->mrs; *pp && *pp != m; pp = &(*pp)->next)
        ;
    int found = *pp != NULL;
    if (found)
        *pp = m->next;
    pthread_mutex_unlock(&c->lock);
    if (!found)
        return TERN_ERR_NOT_FOUND; /* not ours, or already gone: never free it twice */
    int rc = 0;
    for (int i = 0; i < m->ndev; i++)
        if (m->mr[i] && ibv_dereg_mr(m->mr[i]) != 0)
            rc = TERN_ERR_DEVICE;
    rd_free(c, m);
    return rc;
}

int rd_segment_describe(void *ctx, tern_desc *out)
{
    rd_ctx *c = ctx;
    const tern_host_services *h = c->host;
    if (!h || !h->desc_set_u64)
        return 0;
    int rc = h->desc_set_u64(out, "qp_per_endpoint", (uint64_t)c->qp_per_ep);
    if (rc == 0)
        rc = h->desc_set_u64(out, "mtu", (uint64_t)rd_mtu_to_bytes(c->mtu));
    return rc;
}
