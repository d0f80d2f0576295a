/* transports/rdma: the RDMA verbs transport (docs/architecture.md lists
 * what the core expects of every transport).
 *
 * Per device: the verbs context, the port's attributes, the chosen GID
 * index, one PD, one CQ with a completion channel, and one worker thread
 * that waits on the channel, polls the CQ and hands each finished slice
 * straight back through the host service complete() (ABI 1.1; the core
 * never calls into the plugin from complete(), so it may be called with
 * ep->lock held).  Per endpoint: N RC QPs taken through
 * RESET -> INIT -> RTR -> RTS with the attributes built by rdma_attr.c.
 *
 * Data path: a slice becomes one or more signaled RDMA WRITE/READ work
 * requests (pieces of at most `slice_size` bytes, capped at the port's
 * max_msg_sz), spread round-robin over the endpoint's QPs; each QP holds at
 * most `max_wr` outstanding requests and the CQ never more than its size;
 * the rest waits in the endpoint's queue and is posted as completions free
 * room.  A completion error fails the slice with TERN_ERR_DEVICE and the
 * ibv_wc_status_str() text, marks the endpoint failed (submit then refuses,
 * so the core resets or reopens it and retries the slice elsewhere).
 *
 * Locking: ctx->lock guards the endpoint list; ep->lock guards an
 * endpoint's QPs, queue and counters.  Order: ctx->lock, then ep->lock.
 * An endpoint closed while work is in flight is freed by the worker once
 * the flushed completions are in.
 *
 * This file holds the options, init/fini, query and the exported table;
 * the rest is one concern per file (CMakeLists.txt lists them,
 * rdma_plugin.h holds the state and what the files share).
 */
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

#define RD_VERSION "1.0.0"

/* ---- options -------------------------------------------------------------- */

static const char *const rd_mtu_choices[] = {"256", "512", "1024", "2048", "4096", NULL};

/* Each key written once (tern/plugin_kit.h): the table and (X rows) the
 * rd_ctx field; mtu (bytes to the verbs enum) and devices are read below. */
#define RD_OPTIONS(X, R)                                                                   \
    X(rd_ctx, gid_index_cfg, "gid_index", TERN_OPT_INT, -1, 255, NULL, "-1",               \
      "GID table index; -1 picks one (IPv4 RoCE v2 on a netdev first)")                    \
    R("mtu", TERN_OPT_CHOICE, 0, 0, rd_mtu_choices, "4096",                                \
      "largest path MTU in bytes; the port's active MTU caps it")                          \
    X(rd_ctx, qp_per_ep, "qp_per_endpoint", TERN_OPT_INT, 1, TERN_RDMA_MAX_QP, NULL, "2",  \
      "RC QPs per endpoint (must match on both sides)")                                    \
    R("devices", TERN_OPT_STRING_LIST, 0, 0, NULL, NULL,                                   \
      "RDMA devices to use (default: every device with an active port)")                   \
    X(rd_ctx, max_wr, "max_wr", TERN_OPT_INT, 1, 16384, NULL, "256",                       \
      "outstanding work requests per QP; more slices wait in a queue")                     \
    X(rd_ctx, slice_size, "slice_size", TERN_OPT_SIZE, 4096, 64LL << 20, NULL, NULL,       \
      "bytes per slice on this transport (default: the engine's slice_size); "             \
      "no single RDMA request is longer")                                                  \
    X(rd_ctx, traffic_class, "traffic_class", TERN_OPT_INT, -1, 255, NULL, "-1",           \
      "GRH traffic class (-1: leave the device default)")                                  \
    X(rd_ctx, pkey_index, "pkey_index", TERN_OPT_INT, 0, 65535, NULL, "0",                 \
      "P_Key table index")                                                                 \
    X(rd_ctx, port, "port", TERN_OPT_INT, 1, 255, NULL, "1", "device port number")

static const tern_option rd_options[] = {RD_OPTIONS(TERN_KIT_OPTION, TERN_KIT_ROW)
                                             TERN_KIT_OPTIONS_END};
static const tern_kit_field rd_fields[] = {RD_OPTIONS(TERN_KIT_FIELD, TERN_KIT_NO_FIELD)
                                               TERN_KIT_FIELDS_END};

static int rd_read_options(rd_ctx *c, char *err, size_t errlen)
{
    const tern_host_services *h = c->host;
    tern_kit_options_fill(h, rd_options, rd_fields, c);
    int64_t mtu = rd_opt_int(h, "mtu", 4096);
    c->mtu = rd_mtu_from_bytes(mtu);
    if (!c->mtu)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "transports.rdma.mtu: %lld is not one of 256, 512, 1024, 2048, 4096",
                             (long long)mtu);
    if (c->qp_per_ep < 1 || c->qp_per_ep > TERN_RDMA_MAX_QP || c->max_wr < 1 ||
        c->max_wr > 16384)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "transports.rdma: qp_per_endpoint (1..%d) or max_wr (1..16384) out "
                             "of range", TERN_RDMA_MAX_QP);
    if (c->gid_index_cfg < -1 || c->gid_index_cfg > 255 || c->traffic_class < -1 ||
        c->traffic_class > 255 || c->pkey_index < 0 || c->pkey_index > 65535 || c->port < 1 ||
        c->port > 255)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "transports.rdma: gid_index (-1..255), traffic_class (-1..255), "
                             "pkey_index (0..65535) or port (1..255) out of range");
    return 0;
}

static int rd_allowed(rd_ctx *c, const char *name)
{
    const tern_host_services *h = c->host;
    if (!h || !h->config_get_list || !h->config_get_list(h->host, "devices", 0))
        return 1;
    for (size_t i = 0;; i++) {
        const char *s = h->config_get_list(h->host, "devices", i);
        if (!s)
            return 0;
        const char *one[1] = {s};
        if (rd_device_allowed(one, 1, name))
            return 1;
    }
}

static void rd_fini(void *ctx);

static int rd_open_devices(rd_ctx *c, char *err, size_t errlen)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        if (list)
            ibv_free_device_list(list);
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND,
                             "no RDMA device: ibv_get_device_list found none (load the NIC driver, "
                             "or rdma_rxe and `rdma link add`)");
    }
    c->devs_cap = n < TERN_MAX_DEVICES ? n : TERN_MAX_DEVICES;
    c->devs = rd_alloc(c, sizeof *c->devs * (size_t)c->devs_cap);
    if (!c->devs) {
        ibv_free_device_list(list);
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
    }
    char seen[512] = "";
    int rc = 0;
    for (int i = 0; i < n && c->ndev < TERN_MAX_DEVICES; i++) {
        const char *name = ibv_get_device_name(list[i]);
        size_t l = strlen(seen);
        snprintf(seen + l, sizeof seen - l, "%s%s", l ? ", " : "", name);
        if (!rd_allowed(c, name))
            continue;
        rc = rd_dev_open(c, &c->devs[c->ndev], list[i], err, errlen);
        if (rc < 0)
            break;
        if (rc > 0) {
            rd_dev_close(&c->devs[c->ndev]);
            rc = 0;
            continue;
        }
        c->ndev++;
    }
    ibv_free_device_list(list);
    if (rc < 0)
        return rc;
    if (c->ndev == 0)
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND,
                             "no usable RDMA device: found %s, but none is both in "
                             "transports.rdma.devices and has port %d ACTIVE",
                             seen, c->port);
    return 0;
}

static int rd_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    if (!host || !TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) ||
        !host->complete)
        return tern_kit_errf(err, errlen, TERN_ERR_ABI,
                             "rdma: the core offers no complete() host service (ABI 1.1 needed): "
                             "update libtern");
    rd_ctx *c = host->alloc ? host->alloc(sizeof *c) : malloc(sizeof *c);
    if (!c)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
    memset(c, 0, sizeof *c);
    c->host = host;
    pthread_mutex_init(&c->lock, NULL);
    int rc = rd_read_options(c, err, errlen);
    if (rc == 0)
        rc = rd_open_devices(c, err, errlen);
    for (int i = 0; rc == 0 && i < c->ndev; i++) {
        if (pthread_create(&c->devs[i].worker, NULL, rd_worker, &c->devs[i]) != 0)
            rc = tern_kit_errf(err, errlen, TERN_ERR_NOMEM,
                               "rdma: cannot start the %s worker thread", c->devs[i].name);
        else
            c->devs[i].worker_started = 1;
    }
    if (rc < 0) {
        rd_fini(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int rd_devices(void *ctx, tern_device_info *out, int max)
{
    rd_ctx *c = ctx;
    const char *root = c->host && c->host->sysfs_root ? c->host->sysfs_root : "/sys";
    int n = 0;
    for (; n < c->ndev && n < max; n++) {
        rd_dev *d = &c->devs[n];
        tern_device_info *o = &out[n];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", d->name);
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/class/infiniband/%s/device", root, d->name);
        if (stat(path, &st) == 0) {
            snprintf(o->sysfs_path, sizeof o->sysfs_path, "class/infiniband/%s/device", d->name);
            o->numa_node = -2;
        } else {
            o->numa_node = -1; /* soft device (rxe): no PCI parent */
        }
        o->lid = d->port_attr.lid;
        rd_gid_format(d->gid, o->gid);
    }
    return n;
}

static int rd_query(void *ctx, const char *what, char *out, size_t outlen)
{
    rd_ctx *c = ctx;
    (void)what;
    if (!out || outlen == 0)
        return TERN_ERR_INVAL;
    size_t off = 0;
    int neps = 0;
    pthread_mutex_lock(&c->lock);
    for (rd_ep *ep = c->eps; ep; ep = ep->next)
        neps++;
    pthread_mutex_unlock(&c->lock);
    off += (size_t)snprintf(out, outlen, "rdma %s: %d device(s), %d endpoint(s), %d QP(s) each",
                            RD_VERSION, c->ndev, neps, c->qp_per_ep);
    for (int i = 0; i < c->ndev && off < outlen; i++) {
        rd_dev *d = &c->devs[i];
        char gid[48];
        rd_gid_format(d->gid, gid);
        off += (size_t)snprintf(out + off, outlen - off,
                                "\n  %s port %d %s lid %u active_mtu %d gid_index %d gid %s "
                                "in_flight %d",
                                d->name, c->port, ibv_port_state_str(d->port_attr.state),
                                d->port_attr.lid, rd_mtu_to_bytes(d->port_attr.active_mtu),
                                d->gid_index, gid, atomic_load(&d->posted));
    }
    return 0;
}

static void rd_fini(void *ctx)
{
    rd_ctx *c = ctx;
    if (!c)
        return;
    atomic_store(&c->stop, 1);
    for (int i = 0; i < c->ndev; i++)
        if (c->devs[i].worker_started)
            pthread_join(c->devs[i].worker, NULL);
    while (c->eps)
        rd_ep_destroy(c->eps);
    while (c->mrs) {
        rd_mr *m = c->mrs;
        c->mrs = m->next;
        for (int i = 0; i < m->ndev; i++)
            if (m->mr[i])
                ibv_dereg_mr(m->mr[i]);
        rd_free(c, m);
    }
    if (c->devs) {
        /* ndev open ones, plus the one that failed half-way, if any */
        for (int i = 0; i < c->devs_cap; i++)
            if (c->devs[i].vctx)
                rd_dev_close(&c->devs[i]);
        rd_free(c, c->devs);
    }
    pthread_mutex_destroy(&c->lock);
    if (c->host && c->host->free)
        c->host->free(c);
    else
        free(c);
}

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    TERN_KIT_TRANSPORT_HEAD("rdma", RD_VERSION),
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_HANDSHAKE | TERN_CAP_MULTI_DEVICE,
    .options = rd_options,
    .default_slice_size = 0,
    .init = rd_init,
    .fini = rd_fini,
    .devices = rd_devices,
    .mr_register = rd_mr_register,
    .mr_deregister = rd_mr_deregister,
    .segment_describe = rd_segment_describe,
    .ep_open = rd_ep_open,
    .ep_describe = rd_ep_describe,
    .ep_connect = rd_ep_connect,
    .ep_close = rd_ep_close,
    .submit = rd_submit,
    .poll = NULL, /* completions go through host->complete() */
    .ep_reset = rd_ep_reset,
    .query = rd_query,
};
