/* transports/rdma/rdma_dev.c: one device: the verbs context, the port's
 * attributes, the GID index chosen from the GID table, the PD, the CQ and
 * its completion channel, and the worker that waits on it. */
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

/* ---- devices -------------------------------------------------------------- */

static int read_small_file(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return 0;
}

/* Fallback when ibv_query_gid_table is not supported: ibv_query_gid plus
 * sysfs gid_attrs/types and gid_attrs/ndevs. */
static void gid_from_sysfs(rd_ctx *c, rd_dev *d, int i, rd_gid_entry *e)
{
    union ibv_gid g;
    char path[512], buf[64];
    const char *root = c->host && c->host->sysfs_root ? c->host->sysfs_root : "/sys";
    memset(e, 0, sizeof *e);
    e->type = -1;
    if (ibv_query_gid(d->vctx, (uint8_t)c->port, i, &g) != 0)
        return;
    memcpy(e->raw, g.raw, 16);
    snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/types/%d", root,
             d->name, c->port, i);
    if (read_small_file(path, buf, sizeof buf) == 0)
        e->type = rd_gid_type_parse(buf);
    else if (d->port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND)
        e->type = IBV_GID_TYPE_IB;
    snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", root,
             d->name, c->port, i);
    e->has_ndev = read_small_file(path, buf, sizeof buf) == 0 && buf[0] != '\0';
}

/* The port's GID table as the pure chooser wants it; returns its length. */
static int read_gid_table(rd_ctx *c, rd_dev *d, rd_gid_entry **out)
{
    int n = d->port_attr.gid_tbl_len > 0 ? d->port_attr.gid_tbl_len : 1;
    if (n > 4096)
        n = 4096;
    rd_gid_entry *tbl = calloc((size_t)n, sizeof *tbl);
    struct ibv_device_attr dattr;
    int ports = ibv_query_device(d->vctx, &dattr) == 0 ? dattr.phys_port_cnt : c->port;
    size_t max = (size_t)n * (size_t)(ports > 0 ? ports : 1);
    struct ibv_gid_entry *ents = calloc(max, sizeof *ents);
    if (!tbl || !ents) {
        free(tbl);
        free(ents);
        return -1;
    }
    for (int i = 0; i < n; i++)
        tbl[i].type = -1;
    ssize_t got = ibv_query_gid_table(d->vctx, ents, max, 0);
    if (got >= 0) {
        for (ssize_t k = 0; k < got; k++) {
            if ((int)ents[k].port_num != c->port || ents[k].gid_index >= (uint32_t)n)
                continue;
            rd_gid_entry *e = &tbl[ents[k].gid_index];
            memcpy(e->raw, ents[k].gid.raw, 16);
            e->type = (int)ents[k].gid_type;
            e->has_ndev = ents[k].ndev_ifindex != 0;
        }
    } else {
        RD_LOG(c, TERN_LOG_DEBUG, "rdma: %s: ibv_query_gid_table: %s; reading sysfs", d->name,
               strerror(errno));
        for (int i = 0; i < n; i++)
            gid_from_sysfs(c, d, i, &tbl[i]);
    }
    free(ents);
    *out = tbl;
    return n;
}

static int rd_choose_gid(rd_ctx *c, rd_dev *d, char *err, size_t errlen)
{
    rd_gid_entry *tbl = NULL;
    int n = read_gid_table(c, d, &tbl);
    if (n < 0)
        return rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: %s: out of memory", d->name);
    int idx = c->gid_index_cfg;
    if (idx < 0) {
        idx = rd_gid_choose(tbl, n);
        if (idx < 0) {
            free(tbl);
            return rd_err(err, errlen, TERN_ERR_NOT_FOUND,
                          "rdma: %s port %d has no usable GID (no RoCE v2 or IB entry); "
                          "give the netdev an IP address or set transports.rdma.gid_index",
                          d->name, c->port);
        }
    } else if (idx >= n) {
        free(tbl);
        return rd_err(err, errlen, TERN_ERR_CONFIG,
                      "transports.rdma.gid_index %d: %s port %d has only %d GID entries", idx,
                      d->name, c->port, n);
    } else if (rd_gid_rank(&tbl[idx]) < 0) {
        RD_LOG(c, TERN_LOG_WARN,
               "rdma: %s: gid_index %d is empty or not RoCE v2/IB; connections may fail at RTR",
               d->name, idx);
    }
    d->gid_index = idx;
    memcpy(d->gid, tbl[idx].raw, 16);
    free(tbl);
    return 0;
}

/* Open one device; 1 when it is not usable (logged), 0 ok, <0 error. */
int rd_dev_open(rd_ctx *c, rd_dev *d, struct ibv_device *dev, char *err, size_t errlen)
{
    snprintf(d->name, sizeof d->name, "%s", ibv_get_device_name(dev));
    d->ctx = c;
    d->vctx = ibv_open_device(dev);
    if (!d->vctx) {
        RD_LOG(c, TERN_LOG_WARN, "rdma: ibv_open_device(%s): %s; skipped", d->name,
               strerror(errno));
        return 1;
    }
    struct ibv_device_attr dattr;
    if (ibv_query_device(d->vctx, &dattr) != 0)
        return rd_err(err, errlen, TERN_ERR_DEVICE, "rdma: ibv_query_device(%s): %s", d->name,
                      strerror(errno));
    if (c->port > dattr.phys_port_cnt)
        return rd_err(err, errlen, TERN_ERR_CONFIG,
                      "transports.rdma.port %d: %s has %d port(s)", c->port, d->name,
                      dattr.phys_port_cnt);
    if (ibv_query_port(d->vctx, (uint8_t)c->port, &d->port_attr) != 0)
        return rd_err(err, errlen, TERN_ERR_DEVICE, "rdma: ibv_query_port(%s, %d): %s", d->name,
                      c->port, strerror(errno));
    if (d->port_attr.state != IBV_PORT_ACTIVE) {
        RD_LOG(c, TERN_LOG_WARN, "rdma: %s port %d is %s, not ACTIVE; skipped", d->name, c->port,
               ibv_port_state_str(d->port_attr.state));
        return 1;
    }
    int rc = rd_choose_gid(c, d, err, errlen);
    if (rc < 0)
        return rc;
    d->max_wr = c->max_wr < dattr.max_qp_wr ? c->max_wr : dattr.max_qp_wr;
    d->piece = d->port_attr.max_msg_sz ? d->port_attr.max_msg_sz : (1u << 30);
    if (c->slice_size && c->slice_size < d->piece)
        d->piece = c->slice_size;
    d->cq_size = dattr.max_cqe < 65536 ? dattr.max_cqe : 65536;
    d->pd = ibv_alloc_pd(d->vctx);
    if (!d->pd)
        return rd_err(err, errlen, TERN_ERR_DEVICE, "rdma: ibv_alloc_pd(%s): %s", d->name,
                      strerror(errno));
    d->chan = ibv_create_comp_channel(d->vctx);
    if (!d->chan)
        return rd_err(err, errlen, TERN_ERR_DEVICE, "rdma: ibv_create_comp_channel(%s): %s",
                      d->name, strerror(errno));
    int fl = fcntl(d->chan->fd, F_GETFL);
    fcntl(d->chan->fd, F_SETFL, fl | O_NONBLOCK);
    d->cq = ibv_create_cq(d->vctx, d->cq_size, d, d->chan, 0);
    if (!d->cq)
        return rd_err(err, errlen, TERN_ERR_DEVICE,
                      "rdma: ibv_create_cq(%s, %d entries): %s; check ulimit -l", d->name,
                      d->cq_size, strerror(errno));
    char gid[48];
    rd_gid_format(d->gid, gid);
    RD_LOG(c, TERN_LOG_INFO,
           "rdma: %s port %d: lid %u, active mtu %d, gid_index %d (%s), max_wr %d, cq %d",
           d->name, c->port, d->port_attr.lid, rd_mtu_to_bytes(d->port_attr.active_mtu),
           d->gid_index, gid, d->max_wr, d->cq_size);
    return 0;
}

void rd_dev_close(rd_dev *d)
{
    if (d->cq)
        ibv_destroy_cq(d->cq);
    if (d->chan)
        ibv_destroy_comp_channel(d->chan);
    if (d->pd)
        ibv_dealloc_pd(d->pd);
    if (d->vctx)
        ibv_close_device(d->vctx);
    memset(d, 0, sizeof *d);
}
