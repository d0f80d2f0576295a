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
 * An endpoint closed while work
 * is in flight is freed by the worker once the flushed completions are in.
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
#include "tern/transport.h"

#define RD_VERSION "1.0.0"
#define RD_READ 0  /* TERN_READ in <tern/tern.h> */
#define RD_WRITE 1 /* TERN_WRITE */
#define RD_WC_BATCH 32
#define RD_DRAIN_MS 5000

enum { EP_IDLE = 0, EP_CONNECTED, EP_FAILED, EP_CLOSING };

struct rd_ctx;
struct rd_ep;

typedef struct rd_dev {
    struct rd_ctx *ctx;
    char name[TERN_NAME_MAX];
    struct ibv_context *vctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    int cq_size;
    struct ibv_port_attr port_attr;
    int gid_index;
    uint8_t gid[16];
    int max_wr;                /* per QP, after clamping to the device */
    uint64_t piece;            /* bytes per work request */
    atomic_int posted;         /* work requests in flight on the CQ */
    atomic_int starved;        /* an endpoint waits for CQ room */
    pthread_t worker;
    int worker_started;
} rd_dev;

typedef struct rd_mr {
    struct rd_mr *next;
    int ndev;
    struct ibv_mr *mr[TERN_MAX_DEVICES];
} rd_mr;

typedef struct rd_ctx {
    const tern_host_services *host;
    rd_dev *devs;
    int ndev, devs_cap;
    /* options */
    int gid_index_cfg, qp_per_ep, max_wr, traffic_class, pkey_index, port;
    enum ibv_mtu mtu;
    uint64_t slice_size;
    atomic_int stop;

    pthread_mutex_t lock; /* endpoints and registrations */
    struct rd_ep *eps;
    rd_mr *mrs;
} rd_ctx;

typedef struct rd_ep {
    rd_ctx *ctx;
    rd_dev *dev;
    struct rd_ep *next, *prev;
    pthread_mutex_t lock;
    pthread_cond_t drained;
    int state;
    int nqp;
    struct ibv_qp *qp[TERN_RDMA_MAX_QP];
    enum ibv_qp_state qp_state[TERN_RDMA_MAX_QP];
    int outstanding[TERN_RDMA_MAX_QP];
    int total;
    unsigned rr;
    tern_slice *q_head, *q_tail;
    char peer_nic_path[320];
    char fail_msg[512];
} rd_ep;

/* Slice scratch while we own it. */
#define S_NEXT(s) ((s)->plugin[0])
#define S_EP(s) ((s)->plugin[3])
/* plugin[1]: bytes already posted; plugin[2]: work requests not completed */
static inline uint64_t s_off(const tern_slice *s) { return (uint64_t)(uintptr_t)s->plugin[1]; }
static inline void s_set_off(tern_slice *s, uint64_t v) { s->plugin[1] = (void *)(uintptr_t)v; }
static inline uint64_t s_left(const tern_slice *s) { return (uint64_t)(uintptr_t)s->plugin[2]; }
static inline void s_set_left(tern_slice *s, uint64_t v) { s->plugin[2] = (void *)(uintptr_t)v; }

/* ---- small helpers ----------------------------------------------------------- */

static int rd_err(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int rd_err(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

#define RD_LOG(ctx, lvl, ...) \
    do { if ((ctx)->host && (ctx)->host->log) (ctx)->host->log((ctx)->host->host, lvl, __VA_ARGS__); } while (0)

static void *rd_alloc(rd_ctx *c, size_t n)
{
    void *p = c->host && c->host->alloc ? c->host->alloc(n) : malloc(n);
    if (p)
        memset(p, 0, n);
    return p;
}

static void rd_free(rd_ctx *c, void *p)
{
    if (c->host && c->host->free)
        c->host->free(p);
    else
        free(p);
}

static int64_t opt_int(const tern_host_services *h, const char *key, int64_t def)
{
    return h && h->config_get_int ? h->config_get_int(h->host, key, def) : def;
}

/* The slice is the core's again once complete() is called. */
static void done_push(rd_ctx *c, tern_slice *s)
{
    S_NEXT(s) = NULL;
    c->host->complete(c->host->host, s);
}

/* First failure wins: its text is what the core shows. */
static void slice_fail(tern_slice *s, int code, const char *msg)
{
    if (s->status == 0) {
        size_t n = strnlen(msg, sizeof s->errmsg - 1);
        s->status = code;
        memcpy(s->errmsg, msg, n); /* cut to fit: the full text is in the log */
        s->errmsg[n] = '\0';
    }
}

/* ---- options -------------------------------------------------------------- */

static const char *const rd_mtu_choices[] = {"256", "512", "1024", "2048", "4096", NULL};

static const tern_option rd_options[] = {
    {"gid_index", TERN_OPT_INT, -1, 255, NULL, "-1",
     "GID table index; -1 picks one (IPv4 RoCE v2 on a netdev first)"},
    {"mtu", TERN_OPT_CHOICE, 0, 0, rd_mtu_choices, "4096",
     "largest path MTU in bytes; the port's active MTU caps it"},
    {"qp_per_endpoint", TERN_OPT_INT, 1, TERN_RDMA_MAX_QP, NULL, "2",
     "RC QPs per endpoint (must match on both sides)"},
    {"devices", TERN_OPT_STRING_LIST, 0, 0, NULL, NULL,
     "RDMA devices to use (default: every device with an active port)"},
    {"max_wr", TERN_OPT_INT, 1, 16384, NULL, "256",
     "outstanding work requests per QP; more slices wait in a queue"},
    {"slice_size", TERN_OPT_SIZE, 4096, 64LL << 20, NULL, NULL,
     "bytes per slice on this transport (default: the engine's slice_size); "
     "no single RDMA request is longer"},
    {"traffic_class", TERN_OPT_INT, -1, 255, NULL, "-1",
     "GRH traffic class (-1: leave the device default)"},
    {"pkey_index", TERN_OPT_INT, 0, 65535, NULL, "0", "P_Key table index"},
    {"port", TERN_OPT_INT, 1, 255, NULL, "1", "device port number"},
    {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL},
};

static int rd_read_options(rd_ctx *c, char *err, size_t errlen)
{
    const tern_host_services *h = c->host;
    c->gid_index_cfg = (int)opt_int(h, "gid_index", -1);
    int64_t mtu = opt_int(h, "mtu", 4096);
    c->mtu = tern_rdma_mtu_from_bytes(mtu);
    if (!c->mtu)
        return rd_err(err, errlen, TERN_ERR_CONFIG,
                      "transports.rdma.mtu: %lld is not one of 256, 512, 1024, 2048, 4096",
                      (long long)mtu);
    int64_t nqp = opt_int(h, "qp_per_endpoint", 2);
    if (nqp < 1 || nqp > TERN_RDMA_MAX_QP)
        return rd_err(err, errlen, TERN_ERR_CONFIG,
                      "transports.rdma.qp_per_endpoint: %lld is outside 1..%d", (long long)nqp,
                      TERN_RDMA_MAX_QP);
    c->qp_per_ep = (int)nqp;
    int64_t wr = opt_int(h, "max_wr", 256);
    if (wr < 1 || wr > 16384)
        return rd_err(err, errlen, TERN_ERR_CONFIG,
                      "transports.rdma.max_wr: %lld is outside 1..16384", (long long)wr);
    c->max_wr = (int)wr;
    int64_t ss = opt_int(h, "slice_size", 0);
    if (ss < 0)
        return rd_err(err, errlen, TERN_ERR_CONFIG, "transports.rdma.slice_size: negative");
    c->slice_size = (uint64_t)ss;
    c->traffic_class = (int)opt_int(h, "traffic_class", -1);
    c->pkey_index = (int)opt_int(h, "pkey_index", 0);
    c->port = (int)opt_int(h, "port", 1);
    if (c->gid_index_cfg < -1 || c->gid_index_cfg > 255 || c->traffic_class < -1 ||
        c->traffic_class > 255 || c->pkey_index < 0 || c->pkey_index > 65535 || c->port < 1 ||
        c->port > 255)
        return rd_err(err, errlen, TERN_ERR_CONFIG,
                      "transports.rdma: gid_index (-1..255), traffic_class (-1..255), "
                      "pkey_index (0..65535) or port (1..255) out of range");
    return 0;
}

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
static void gid_from_sysfs(rd_ctx *c, rd_dev *d, int i, tern_rdma_gid_entry *e)
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
        e->type = tern_rdma_gid_type_parse(buf);
    else if (d->port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND)
        e->type = IBV_GID_TYPE_IB;
    snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", root,
             d->name, c->port, i);
    e->has_ndev = read_small_file(path, buf, sizeof buf) == 0 && buf[0] != '\0';
}

/* The port's GID table as the pure chooser wants it; returns its length. */
static int read_gid_table(rd_ctx *c, rd_dev *d, tern_rdma_gid_entry **out)
{
    int n = d->port_attr.gid_tbl_len > 0 ? d->port_attr.gid_tbl_len : 1;
    if (n > 4096)
        n = 4096;
    tern_rdma_gid_entry *tbl = calloc((size_t)n, sizeof *tbl);
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
            tern_rdma_gid_entry *e = &tbl[ents[k].gid_index];
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
    tern_rdma_gid_entry *tbl = NULL;
    int n = read_gid_table(c, d, &tbl);
    if (n < 0)
        return rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: %s: out of memory", d->name);
    int idx = c->gid_index_cfg;
    if (idx < 0) {
        idx = tern_rdma_gid_choose(tbl, n);
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
    } else if (tern_rdma_gid_rank(&tbl[idx]) < 0) {
        RD_LOG(c, TERN_LOG_WARN,
               "rdma: %s: gid_index %d is empty or not RoCE v2/IB; connections may fail at RTR",
               d->name, idx);
    }
    d->gid_index = idx;
    memcpy(d->gid, tbl[idx].raw, 16);
    free(tbl);
    return 0;
}

static void *rd_worker(void *arg);

/* Open one device; 1 when it is not usable (logged), 0 ok, <0 error. */
static int rd_dev_open(rd_ctx *c, rd_dev *d, struct ibv_device *dev, char *err, size_t errlen)
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
    tern_rdma_gid_format(d->gid, gid);
    RD_LOG(c, TERN_LOG_INFO,
           "rdma: %s port %d: lid %u, active mtu %d, gid_index %d (%s), max_wr %d, cq %d",
           d->name, c->port, d->port_attr.lid, tern_rdma_mtu_to_bytes(d->port_attr.active_mtu),
           d->gid_index, gid, d->max_wr, d->cq_size);
    return 0;
}

static void rd_dev_close(rd_dev *d)
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
        if (tern_rdma_device_allowed(one, 1, name))
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
        return rd_err(err, errlen, TERN_ERR_NOT_FOUND,
                      "no RDMA device: ibv_get_device_list found none (load the NIC driver, "
                      "or rdma_rxe and `rdma link add`)");
    }
    c->devs_cap = n < TERN_MAX_DEVICES ? n : TERN_MAX_DEVICES;
    c->devs = rd_alloc(c, sizeof *c->devs * (size_t)c->devs_cap);
    if (!c->devs) {
        ibv_free_device_list(list);
        return rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
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
        return rd_err(err, errlen, TERN_ERR_NOT_FOUND,
                      "no usable RDMA device: found %s, but none is both in "
                      "transports.rdma.devices and has port %d ACTIVE",
                      seen, c->port);
    return 0;
}

static int rd_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    if (!host || !TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) ||
        !host->complete)
        return rd_err(err, errlen, TERN_ERR_ABI,
                      "rdma: the core offers no complete() host service (ABI 1.1 needed): "
                      "update libtern");
    rd_ctx *c = host->alloc ? host->alloc(sizeof *c) : malloc(sizeof *c);
    if (!c)
        return rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
    memset(c, 0, sizeof *c);
    c->host = host;
    pthread_mutex_init(&c->lock, NULL);
    int rc = rd_read_options(c, err, errlen);
    if (rc == 0)
        rc = rd_open_devices(c, err, errlen);
    for (int i = 0; rc == 0 && i < c->ndev; i++) {
        if (pthread_create(&c->devs[i].worker, NULL, rd_worker, &c->devs[i]) != 0)
            rc = rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: cannot start the %s worker thread",
                        c->devs[i].name);
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
        tern_rdma_gid_format(d->gid, o->gid);
    }
    return n;
}

/* ---- memory registration -------------------------------------------------- */

static int rd_mr_register(void *ctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
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

static int rd_mr_deregister(void *ctx, void *mr)
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

static int rd_segment_describe(void *ctx, tern_desc *out)
{
    rd_ctx *c = ctx;
    const tern_host_services *h = c->host;
    if (!h || !h->desc_set_u64)
        return 0;
    int rc = h->desc_set_u64(out, "qp_per_endpoint", (uint64_t)c->qp_per_ep);
    if (rc == 0)
        rc = h->desc_set_u64(out, "mtu", (uint64_t)tern_rdma_mtu_to_bytes(c->mtu));
    return rc;
}

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

static void rd_ep_destroy(rd_ep *ep)
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

static int rd_ep_open(void *ctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    rd_ctx *c = ctx;
    if (!p || !out || p->local_dev < 0 || p->local_dev >= c->ndev)
        return rd_err(err, errlen, TERN_ERR_INVAL, "rdma: ep_open: local device %d out of range 0..%d",
                      p ? p->local_dev : -1, c->ndev - 1);
    rd_ep *ep = rd_alloc(c, sizeof *ep);
    if (!ep)
        return rd_err(err, errlen, TERN_ERR_NOMEM, "rdma: out of memory");
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
            return rd_err(err, errlen, TERN_ERR_DEVICE,
                          "rdma: ibv_create_qp on %s (QP %d of %d, max_wr %d): %s; check "
                          "transports.rdma.max_wr and qp_per_endpoint against the device limits",
                          c->devs[p->local_dev].name, i + 1, c->qp_per_ep, ep->dev->max_wr,
                          strerror(e));
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

static int rd_ep_describe(void *vep, tern_desc *out)
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
    tern_rdma_gid_format(ep->dev->gid, gid);
    int rc = h->desc_set_u64(out, "local_lid", ep->dev->port_attr.lid);
    if (rc == 0)
        rc = h->desc_set_str(out, "local_gid", gid);
    if (rc == 0)
        rc = h->desc_set_u32_array(out, "qp_num", qpn, (size_t)n);
    if (rc == 0)
        rc = h->desc_set_u64(out, "mtu", (uint64_t)tern_rdma_mtu_to_bytes(tern_rdma_path_mtu(
                                              ep->dev->port_attr.active_mtu, ep->ctx->mtu)));
    return rc;
}

/* One QP transition; on failure the step's message plus strerror. */
static int rd_modify(rd_ep *ep, int i, tern_rdma_step step, struct ibv_qp_attr *a, int mask,
                     char *err, size_t errlen)
{
    int rc = ibv_modify_qp(ep->qp[i], a, mask);
    if (rc == 0) {
        ep->qp_state[i] = a->qp_state;
        return 0;
    }
    int e = rc > 0 ? rc : (errno ? errno : EINVAL);
    rd_err(err, errlen, TERN_ERR_DEVICE, "%s: %s", tern_rdma_step_message(step), strerror(e));
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
        int mask = tern_rdma_attr_reset(&a);
        if (rd_modify(ep, i, TERN_RDMA_STEP_RESET, &a, mask, err, errlen) == 0)
            continue;
        ibv_destroy_qp(ep->qp[i]);
        ep->qp[i] = rd_qp_create(ep);
        if (!ep->qp[i])
            return rd_err(err, errlen, TERN_ERR_DEVICE,
                          "Failed to recreate QP after a failed reset on %s: %s", ep->dev->name,
                          strerror(errno));
        ep->qp_state[i] = IBV_QPS_RESET;
    }
    return 0;
}

static int rd_parse_peer(rd_ep *ep, const tern_desc *peer, tern_rdma_peer_qp *pq, int *nqp,
                         char *err, size_t errlen)
{
    const tern_host_services *h = ep->ctx->host;
    uint32_t qpn[TERN_RDMA_MAX_QP];
    uint64_t lid = 0;
    uint8_t gid[16];
    if (!peer)
        return rd_err(err, errlen, TERN_ERR_PROTOCOL,
                      "rdma: no handshake descriptor from %s", ep->peer_nic_path);
    int n = h->desc_get_u32_array(peer, "qp_num", qpn, TERN_RDMA_MAX_QP);
    if (n < 0)
        return rd_err(err, errlen, TERN_ERR_PROTOCOL,
                      "rdma: handshake from %s: qp_num missing or not an array of uint32",
                      ep->peer_nic_path);
    int rc = tern_rdma_check_qp_count(ep->nqp, n, ep->peer_nic_path, err, errlen);
    if (rc < 0)
        return rc;
    if (h->desc_get_u64(peer, "local_lid", &lid) != 0 || lid > 0xffff)
        return rd_err(err, errlen, TERN_ERR_PROTOCOL,
                      "rdma: handshake from %s: local_lid missing or not a uint16",
                      ep->peer_nic_path);
    const char *g = h->desc_get_str(peer, "local_gid");
    if (!g || tern_rdma_gid_parse(g, gid) != 0)
        return rd_err(err, errlen, TERN_ERR_PROTOCOL,
                      "rdma: handshake from %s: local_gid '%s' is not 16 colon-separated hex "
                      "bytes", ep->peer_nic_path, g ? g : "(missing)");
    uint64_t mtu = 0; /* optional: peers that send none keep our MTU */
    enum ibv_mtu pmtu = (enum ibv_mtu)0;
    if (h->desc_get_u64(peer, "mtu", &mtu) == 0 && !(pmtu = tern_rdma_mtu_from_bytes((int64_t)mtu)))
        return rd_err(err, errlen, TERN_ERR_PROTOCOL,
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

static int rd_bring_up(rd_ep *ep, const tern_rdma_peer_qp *pq, char *err, size_t errlen)
{
    rd_ctx *c = ep->ctx;
    tern_rdma_qp_cfg cfg = {
        .port_num = (uint8_t)c->port, .pkey_index = (uint16_t)c->pkey_index,
        .sgid_index = (uint8_t)ep->dev->gid_index, .traffic_class = c->traffic_class,
        .active_mtu = ep->dev->port_attr.active_mtu, .mtu = c->mtu,
    };
    struct ibv_qp_attr a;
    int rc = rd_qps_to_reset(ep, err, errlen);
    for (int i = 0; rc == 0 && i < ep->nqp; i++) {
        int mask = tern_rdma_attr_init(&cfg, &a);
        rc = rd_modify(ep, i, TERN_RDMA_STEP_INIT, &a, mask, err, errlen);
        if (rc == 0) {
            mask = tern_rdma_attr_rtr(&cfg, &pq[i], &a);
            rc = rd_modify(ep, i, TERN_RDMA_STEP_RTR, &a, mask, err, errlen);
        }
        if (rc == 0) {
            mask = tern_rdma_attr_rts(&a);
            rc = rd_modify(ep, i, TERN_RDMA_STEP_RTS, &a, mask, err, errlen);
        }
    }
    return rc;
}

static int rd_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    rd_ep *ep = vep;
    tern_rdma_peer_qp pq[TERN_RDMA_MAX_QP];
    int n = 0;
    int rc = rd_parse_peer(ep, peer, pq, &n, err, errlen);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&ep->lock);
    if (ep->state == EP_CLOSING) {
        pthread_mutex_unlock(&ep->lock);
        return rd_err(err, errlen, TERN_ERR_CLOSED, "rdma: endpoint to %s is closing",
                      ep->peer_nic_path);
    }
    if (ep->total > 0) {
        pthread_mutex_unlock(&ep->lock);
        return rd_err(err, errlen, TERN_ERR_BUSY,
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
static void rd_qps_to_err(rd_ep *ep)
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
static void rd_fail_queue(rd_ep *ep, int code, const char *msg)
{
    tern_slice *s = ep->q_head;
    ep->q_head = ep->q_tail = NULL;
    while (s) {
        tern_slice *next = S_NEXT(s);
        uint64_t unposted = tern_rdma_wr_count(s->length - s_off(s), ep->dev->piece);
        slice_fail(s, code, msg);
        s_set_left(s, s_left(s) - unposted);
        if (s_left(s) == 0) {
            s->transferred = 0;
            done_push(ep->ctx, s);
        }
        s = next;
    }
}

static void rd_ep_close(void *vep)
{
    rd_ep *ep = vep;
    if (!ep)
        return;
    pthread_mutex_lock(&ep->lock);
    ep->state = EP_CLOSING;
    rd_fail_queue(ep, TERN_ERR_CLOSED, "rdma: endpoint closed before the slice was posted");
    rd_qps_to_err(ep);
    int now = ep->total == 0;
    pthread_mutex_unlock(&ep->lock);
    if (now)
        rd_ep_destroy(ep); /* else the worker does, after the last flush */
}

static int rd_ep_reset(void *vep)
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
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += RD_DRAIN_MS / 1000;
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
        wr.opcode = s->opcode == RD_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
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

static int rd_submit(void *vep, tern_slice *const *slices, int n)
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
        if ((s->opcode != RD_READ && s->opcode != RD_WRITE) || !s->local || s->length == 0) {
            if (s->length != 0 || (s->opcode != RD_READ && s->opcode != RD_WRITE))
                slice_fail(s, TERN_ERR_INVAL, "rdma: slice with a bad opcode or no local address");
            S_NEXT(s) = now;
            now = s;
            continue;
        }
        s_set_left(s, tern_rdma_wr_count(s->length, ep->dev->piece));
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
        done_push(ep->ctx, now);
        now = next;
    }
    return n;
}

static const char *rd_op_name(const tern_slice *s)
{
    return s->opcode == RD_READ ? "READ" : "WRITE";
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
        if (ep->state == EP_CLOSING)
            snprintf(msg, sizeof msg, "rdma: endpoint to %s closed with the %s in flight",
                     ep->peer_nic_path, rd_op_name(s));
        else
            snprintf(msg, sizeof msg, "rdma: %s on %s QP %u to %s: %s (vendor err 0x%x)",
                     rd_op_name(s), d->name, wc->qp_num, ep->peer_nic_path,
                     ibv_wc_status_str(wc->status), wc->vendor_err);
        slice_fail(s, ep->state == EP_CLOSING ? TERN_ERR_CLOSED : TERN_ERR_DEVICE, msg);
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
        done_push(ep->ctx, s);
    }
    rd_pump(ep);
    if (ep->total == 0)
        pthread_cond_broadcast(&ep->drained);
    int destroy = ep->state == EP_CLOSING && ep->total == 0;
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

static void *rd_worker(void *arg)
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
        tern_rdma_gid_format(d->gid, gid);
        off += (size_t)snprintf(out + off, outlen - off,
                                "\n  %s port %d %s lid %u active_mtu %d gid_index %d gid %s "
                                "in_flight %d",
                                d->name, c->port, ibv_port_state_str(d->port_attr.state),
                                d->port_attr.lid, tern_rdma_mtu_to_bytes(d->port_attr.active_mtu),
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
    .magic = TERN_TRANSPORT_MAGIC,
    .struct_size = sizeof(tern_transport),
    .abi_major = TERN_TRANSPORT_ABI_MAJOR,
    .abi_minor = TERN_TRANSPORT_ABI_MINOR,
    .name = "rdma",
    .version = RD_VERSION,
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
