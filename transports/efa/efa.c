/* transports/efa/efa.c: the libfabric transport, "efa".
 *
 * One RDM endpoint per device (fi_info), an AV and a CQ; fi_write/fi_read
 * per slice; one progress thread per device reads the CQ and hands each
 * finished slice straight back through the host service complete() (ABI
 * 1.1, no queue of its own), so that providers with manual data progress
 * (tcp;ofi_rxm, shm) also progress as a passive target, without the engine
 * calling anything.  See include/tern/transport.h for the contract. */
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
#include "tern/tern.h"

#define EFA_VERSION "0.1.0"

/* ---- small helpers ------------------------------------------------------- */

static uint64_t efa_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t efa_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void efa_log(const efa_ctx *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void efa_log(const efa_ctx *c, int level, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    if (!c->host || !c->host->log)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->host->log(c->host->host, level, "efa: %s", buf);
}

static void efa_lock(efa_dev *d)
{
    if (d->serialise)
        pthread_mutex_lock(&d->fi_lock);
}

static void efa_unlock(efa_dev *d)
{
    if (d->serialise)
        pthread_mutex_unlock(&d->fi_lock);
}

static const char *efa_cfg(const efa_ctx *c, const char *key)
{
    if (!c->host || !c->host->config_get)
        return NULL;
    return c->host->config_get(c->host->host, key);
}

static int64_t efa_cfg_int(const efa_ctx *c, const char *key, int64_t fallback)
{
    if (!c->host || !c->host->config_get_int)
        return fallback;
    return c->host->config_get_int(c->host->host, key, fallback);
}

/* Lower-case hex of n bytes into out (2n+1 bytes). */
static void efa_hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int efa_hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Decode hex text; returns the byte count or -1 when it is not even-length
 * hex or decodes to more than max bytes (or to nothing). */
static long efa_hex_decode(const char *in, uint8_t *out, size_t max)
{
    size_t len = strlen(in);
    if (len == 0 || len % 2 || len / 2 > max)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = efa_hex_digit(in[2 * i]), lo = efa_hex_digit(in[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(len / 2);
}

/* ---- options --------------------------------------------------------------- */

static const tern_option efa_options[] = {
    {"provider", TERN_OPT_STRING, 0, 0, NULL, "efa",
     "libfabric provider: efa, tcp (tcp;ofi_rxm), shm, verbs, or any RDM provider name"},
    {"slice_size", TERN_OPT_SIZE, 4096, 1LL << 30, NULL, "1M",
     "slice size for this transport (large slices matter on EFA)"},
    {"iface", TERN_OPT_STRING, 0, 0, NULL, NULL,
     "only use the device/domain with this name (e.g. lo for provider tcp)"},
    {"max_inflight", TERN_OPT_INT, 1, 65536, NULL, "256",
     "slices in flight per engine before submit pushes back"},
    {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL},
};

/* "tcp" means tcp;ofi_rxm and "verbs" verbs;ofi_rxm: neither gives RDM
 * endpoints by itself. */
static void efa_map_provider(const char *p, char *out, size_t outlen)
{
    if (!strcmp(p, "tcp"))
        p = "tcp;ofi_rxm";
    else if (!strcmp(p, "verbs"))
        p = "verbs;ofi_rxm";
    snprintf(out, outlen, "%s", p);
}

/* ---- completion plumbing ------------------------------------------------- */

/* The slice is the core's again once complete() is called. */
static void efa_done_push(efa_ctx *c, tern_slice *s)
{
    s->plugin[0] = NULL;
    c->host->complete(c->host->host, s);
}

static void efa_slice_finish(efa_ctx *c, tern_slice *s, int status, const char *msg)
{
    s->status = status;
    s->transferred = status ? 0 : s->length;
    if (status && msg) {
        /* Truncate quietly: the slice's buffer is fixed by the ABI. */
        size_t n = strnlen(msg, sizeof s->errmsg - 1);
        memcpy(s->errmsg, msg, n);
        s->errmsg[n] = '\0';
    }
    efa_done_push(c, s);
}

static void efa_op_link(efa_dev *d, efa_op *op)
{
    pthread_mutex_lock(&d->ops_lock);
    op->peer = op->ep->peer;
    op->peer->inflight++;
    op->next = d->ops.next;
    op->prev = &d->ops;
    d->ops.next->prev = op;
    d->ops.next = op;
    pthread_mutex_unlock(&d->ops_lock);
}

/* Take p out of the device's peer table (ops_lock held). */
static efa_peer *efa_peer_unlink_locked(efa_dev *d, efa_peer *p)
{
    for (efa_peer **pp = &d->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    return p;
}

/* fi_av_remove once no endpoint and no operation in the provider uses the
 * address (removing it under a pending operation crashed shm's progress). */
static void efa_peer_remove(efa_dev *d, efa_peer *p)
{
    pthread_rwlock_wrlock(&d->av_lock);
    efa_lock(d);
    if (p->gen == atomic_load(&d->gen))
        fi_av_remove(d->av, &p->fi_addr, 1, 0);
    efa_unlock(d);
    pthread_rwlock_unlock(&d->av_lock);
    free(p);
}

/* A completion (status 0) or error for op: give the slice back unless it
 * was abandoned, then free the record. */
static efa_peer *efa_op_complete(efa_dev *d, efa_op *op, int status, const char *msg)
{
    tern_slice *s;
    pthread_mutex_lock(&d->ops_lock);
    op->prev->next = op->next;
    op->next->prev = op->prev;
    s = op->slice;
    op->slice = NULL;
    efa_peer *gone = NULL;
    if (op->peer && !op->peer->stale && --op->peer->inflight == 0 && op->peer->refs == 0)
        gone = efa_peer_unlink_locked(d, op->peer);
    pthread_mutex_unlock(&d->ops_lock);
    if (status)
        atomic_fetch_add(&d->failed, 1);
    else
        atomic_fetch_add(&d->completed, 1);
    if (s) {
        atomic_fetch_sub(&d->ctx->inflight, 1);
        efa_slice_finish(d->ctx, s, status, msg);
    }
    free(op);
    return gone; /* the caller removes it once it holds no av_lock */
}

/* Give back (with status) every in-flight slice of ep, or of every endpoint
 * when ep is NULL, or only those older than deadline_ms when it is set. */
static int efa_ops_abandon(efa_dev *d, const efa_ep *ep, uint64_t older_than,
                           int status, const char *msg)
{
    int n = 0;
    pthread_mutex_lock(&d->ops_lock);
    for (efa_op *op = d->ops.next; op != &d->ops; op = op->next) {
        if (!op->slice || (ep && op->ep != ep))
            continue;
        if (older_than && op->posted_ms > older_than)
            continue;
        tern_slice *s = op->slice;
        op->slice = NULL;
        if (ep)
            op->ep = NULL;
        atomic_fetch_sub(&d->ctx->inflight, 1);
        atomic_fetch_add(&d->failed, 1);
        efa_slice_finish(d->ctx, s, status, msg);
        n++;
    }
    pthread_mutex_unlock(&d->ops_lock);
    return n;
}

/* A CQ error's tern status.  Connection-level errors are the peer's (the
 * engine drops the endpoint and retries); access errors are final; anything
 * else is the local device's (the engine marks it down). */
static int efa_cq_status(int fi_err)
{
    switch (fi_err) {
    case FI_ECONNRESET: case FI_ECONNREFUSED: case FI_ECONNABORTED: case FI_ECANCELED:
    case FI_ENOTCONN: case FI_EHOSTUNREACH: case FI_ETIMEDOUT: case EPIPE: case FI_EIO: case FI_EREMOTEIO:
    case FI_ESHUTDOWN: case FI_EADDRNOTAVAIL:
        return TERN_ERR_CLOSED;
    case FI_EACCES: case FI_EKEYREJECTED: case FI_EPERM:
        return TERN_ERR_RANGE;
    default:
        return TERN_ERR_DEVICE;
    }
}

/* Read what the CQ has; returns completions handled, 0 when empty.  Called
 * by the progress thread and by submitters that got -FI_EAGAIN. */
static int efa_cq_drain(efa_dev *d, int timeout_ms)
{
    struct fi_cq_entry ent[32];
    efa_peer *gone[33];
    int ngone = 0, done = 0;
    ssize_t n;
    /* Completions are handled under the read lock: a recycle (writer)
     * frees the operation records. */
    pthread_rwlock_rdlock(&d->av_lock);
    efa_lock(d);
    if (timeout_ms > 0 && d->cq_waitable && !d->serialise)
        n = fi_cq_sread(d->cq, ent, 32, NULL, timeout_ms);
    else
        n = fi_cq_read(d->cq, ent, 32);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        char text[256];
        memset(&ee, 0, sizeof ee);
        n = fi_cq_readerr(d->cq, &ee, 0);
        efa_unlock(d);
        if (n > 0 && ee.op_context) {
            const char *pe = ee.prov_errno
                                 ? fi_cq_strerror(d->cq, ee.prov_errno, ee.err_data, NULL, 0)
                                 : NULL;
            snprintf(text, sizeof text, "%s: %s (provider: %s)", d->dinfo.name,
                     fi_strerror(ee.err), pe ? pe : "no detail");
            gone[ngone] = efa_op_complete(d, (efa_op *)ee.op_context, efa_cq_status(ee.err),
                                          text);
            ngone += gone[ngone] != NULL;
            done = 1;
        }
    } else {
        efa_unlock(d);
        for (ssize_t i = 0; i < n; i++)
            if (ent[i].op_context) {
                gone[ngone] = efa_op_complete(d, (efa_op *)ent[i].op_context, 0, NULL);
                ngone += gone[ngone] != NULL;
            }
        done = n > 0 ? (int)n : 0;
    }
    pthread_rwlock_unlock(&d->av_lock);
    for (int i = 0; i < ngone; i++)
        efa_peer_remove(d, gone[i]);
    return done;
}

static int efa_dev_open_ep(efa_dev *d, char *err, size_t errlen);

static void efa_dev_close_ep(efa_dev *d)
{
    if (d->ep)
        fi_close(&d->ep->fid);
    if (d->av)
        fi_close(&d->av->fid);
    if (d->cq)
        fi_close(&d->cq->fid);
    d->ep = NULL;
    d->av = NULL;
    d->cq = NULL;
}

/* A peer that died with operations in flight can wedge a provider's
 * endpoint for every peer (libfabric 1.17 shm keeps waiting for its
 * answers in order).  Replace the device's CQ, AV and endpoint: in-flight
 * slices fail with TERN_ERR_CLOSED, endpoints of the old generation refuse
 * their slices the same way, and the engine reconnects (new efa_addr). */
static void efa_dev_recycle(efa_dev *d)
{
    char err[256];
    if (d->mr_mode & FI_MR_ENDPOINT) {
        atomic_store(&d->wedged, 0); /* registrations are bound to the endpoint */
        return;
    }
    pthread_rwlock_wrlock(&d->av_lock);
    efa_lock(d);
    efa_ops_abandon(d, NULL, 0, TERN_ERR_CLOSED, "device endpoint recycled: a peer stopped "
                    "answering");
    efa_dev_close_ep(d);
    pthread_mutex_lock(&d->ops_lock);
    for (efa_op *op = d->ops.next, *n; op != &d->ops; op = n) {
        n = op->next;
        free(op);
    }
    d->ops.next = d->ops.prev = &d->ops;
    for (efa_peer *p = d->peers, *n; p; p = n) {
        n = p->next;
        p->stale = 1;
        p->inflight = 0;
        p->next = NULL;
        if (p->refs == 0)
            free(p);
    }
    d->peers = NULL;
    pthread_mutex_unlock(&d->ops_lock);
    int rc = efa_dev_open_ep(d, err, sizeof err);
    atomic_fetch_add(&d->gen, 1);
    atomic_fetch_add(&d->recycles, 1);
    atomic_store(&d->wedged, rc != 0);
    efa_unlock(d);
    pthread_rwlock_unlock(&d->av_lock);
    efa_log(d->ctx, rc ? TERN_LOG_ERROR : TERN_LOG_WARN, "%s: endpoint recycled%s%s",
            d->dinfo.name, rc ? ": " : " after a peer stopped answering", rc ? err : "");
}

/* Progress thread: keeps the provider moving (manual data progress, also as
 * a passive target), parks completions, and times out lost operations. */
static void *efa_progress_main(void *arg)
{
    efa_dev *d = arg;
    efa_ctx *c = d->ctx;
    uint64_t next_check = efa_now_ms() + 100, last_work = efa_now_ms();
    while (!atomic_load(&c->stop)) {
        uint64_t t0 = efa_now_us();
        int got = efa_cq_drain(d, 50);
        uint64_t now = efa_now_ms();
        /* Without a wait object a passive target sees no completion of its
         * own: a progress call that took long did work for a peer (shm
         * copies inside it), so keep polling hard while that goes on. */
        int busy = !d->cq_waitable && efa_now_us() - t0 > 20;
        if (got || busy || atomic_load(&c->inflight) > 0) {
            last_work = now;
            if (!got && (!d->cq_waitable || d->serialise))
                sched_yield();
        } else if (!d->cq_waitable || d->serialise) {
            /* No wait object: keep polling (a passive target must progress
             * too) but back off the longer we are idle. */
            struct timespec ts = {0, now - last_work > 1000 ? 200000 : 20000};
            nanosleep(&ts, NULL);
        }
        if (atomic_load(&d->wedged))
            efa_dev_recycle(d);
        if (now >= next_check) {
            next_check = now + 100;
            if (c->timeout_ms > 0 && now > (uint64_t)c->timeout_ms)
                if (efa_ops_abandon(d, NULL, now - (uint64_t)c->timeout_ms, TERN_ERR_TIMEOUT,
                                    "no completion within the I/O timeout: is the peer "
                                    "alive?"))
                    atomic_store(&d->wedged, 1);
        }
    }
    return NULL;
}

/* ---- device setup --------------------------------------------------------- */

static struct fi_info *efa_hints(const char *prov_name, int delivery_complete)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                              FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    /* A write completes when the data is in the target's memory. */
    if (delivery_complete)
        h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    if (prov_name) {
        h->fabric_attr->prov_name = strdup(prov_name);
        if (!h->fabric_attr->prov_name) {
            fi_freeinfo(h);
            return NULL;
        }
    }
    return h;
}

static int efa_getinfo(const char *prov_name, int delivery_complete, struct fi_info **out)
{
    struct fi_info *h = efa_hints(prov_name, delivery_complete);
    if (!h)
        return -FI_ENOMEM;
    int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h, out);
    fi_freeinfo(h);
    return rc;
}

/* "provider efa not found; fi_getinfo offered: tcp;ofi_rxm, shm". */
static void efa_not_found_msg(const efa_ctx *c, int rc, char *err, size_t errlen)
{
    struct fi_info *all = NULL, *i;
    char list[512] = "";
    size_t used = 0;
    if (efa_getinfo(NULL, 0, &all) == 0) {
        for (i = all; i; i = i->next) {
            const char *p = i->fabric_attr->prov_name;
            if (!p || strstr(list, p))
                continue;
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                     used ? ", " : "", p);
            if (used >= sizeof list)
                break;
        }
        fi_freeinfo(all);
    }
    snprintf(err, errlen,
             "libfabric provider '%s' (%s) offers no RDM endpoint with RMA here (%s); "
             "fi_getinfo offered: %s; check the transport's `provider` key",
             c->provider, c->prov_name, fi_strerror(-rc), used ? list : "nothing");
}

/* Keep one fi_info per domain (device): the first, or the first IPv4 one. */
static int efa_pick_devices(efa_ctx *c, struct fi_info *list, struct fi_info **picked, int max)
{
    int n = 0;
    for (struct fi_info *i = list; i; i = i->next) {
        const char *dn = i->domain_attr->name ? i->domain_attr->name : "";
        int k;
        if (c->iface[0] && strcmp(dn, c->iface))
            continue;
        for (k = 0; k < n; k++)
            if (!strcmp(picked[k]->domain_attr->name, dn))
                break;
        if (k < n) {
            if (picked[k]->addr_format != FI_SOCKADDR_IN && i->addr_format == FI_SOCKADDR_IN)
                picked[k] = i;
            continue;
        }
        if (n < max && i->domain_attr->name)
            picked[n++] = i;
    }
    return n;
}

/* sysfs path of a PCI NIC ("bus/pci/devices/0000:00:06.0"), or of a netdev
 * that has a device link; "" otherwise. */
static void efa_sysfs_path(const efa_ctx *c, const struct fi_info *i, tern_device_info *di)
{
    const char *root = c->host && c->host->sysfs_root ? c->host->sysfs_root : "/sys";
    char path[512];
    di->sysfs_path[0] = '\0';
    di->numa_node = -1;
    if (i->nic && i->nic->bus_attr && i->nic->bus_attr->bus_type == FI_BUS_PCI) {
        const struct fi_pci_attr *p = &i->nic->bus_attr->attr.pci;
        snprintf(di->sysfs_path, sizeof di->sysfs_path, "bus/pci/devices/%04x:%02x:%02x.%x",
                 p->domain_id, p->bus_id, p->device_id, p->function_id);
        di->numa_node = -2;
        return;
    }
    snprintf(path, sizeof path, "%s/class/net/%s/device", root, di->name);
    if (access(path, F_OK) == 0) {
        snprintf(di->sysfs_path, sizeof di->sysfs_path, "class/net/%s/device", di->name);
        di->numa_node = -2;
    }
}

/* Offset addressing with keys we choose: the key carries the base. */
static int efa_key_is_base(const efa_dev *d)
{
    return !(d->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY)) &&
           d->info->domain_attr->mr_key_size >= sizeof(uint64_t);
}

#define EFA_TRY(call, what)                                                          \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_) {                                                                   \
            snprintf(err, errlen, "%s on device %s (provider %s) failed: %s", what, \
                     d->dinfo.name, d->ctx->prov_name, fi_strerror(-rc_));           \
            return TERN_ERR_DEVICE;                                                  \
        }                                                                            \
    } while (0)

static int efa_dev_open_ep(efa_dev *d, char *err, size_t errlen);

static int efa_dev_open(efa_dev *d, char *err, size_t errlen)
{
    struct fi_info *i = d->info;
    d->mr_mode = (uint64_t)i->domain_attr->mr_mode;
    d->serialise = i->domain_attr->threading != FI_THREAD_SAFE;
    d->max_msg = i->ep_attr->max_msg_size ? i->ep_attr->max_msg_size : UINT64_MAX;
    EFA_TRY(fi_fabric(i->fabric_attr, &d->fabric, NULL), "fi_fabric");
    EFA_TRY(fi_domain(d->fabric, i, &d->domain, NULL), "fi_domain");
    return efa_dev_open_ep(d, err, errlen);
}

/* CQ, AV and endpoint: what a recycle replaces. */
static int efa_dev_open_ep(efa_dev *d, char *err, size_t errlen)
{
    struct fi_info *i = d->info;
    struct fi_cq_attr cqa;
    struct fi_av_attr ava;
    memset(&cqa, 0, sizeof cqa);
    memset(&ava, 0, sizeof ava);
    cqa.format = FI_CQ_FORMAT_CONTEXT;
    cqa.size = i->tx_attr->size ? i->tx_attr->size * 2 : 4096;
    /* A file descriptor wait blocks in the kernel and honours the timeout;
     * other wait objects (shm's yield loop) are no better than polling. */
    cqa.wait_obj = FI_WAIT_FD;
    d->cq_waitable = fi_cq_open(d->domain, &cqa, &d->cq, NULL) == 0;
    if (!d->cq_waitable) {
        cqa.wait_obj = FI_WAIT_NONE;
        EFA_TRY(fi_cq_open(d->domain, &cqa, &d->cq, NULL), "fi_cq_open");
    }
    ava.type = FI_AV_TABLE;
    if (i->domain_attr->av_type != FI_AV_UNSPEC)
        ava.type = i->domain_attr->av_type;
    EFA_TRY(fi_av_open(d->domain, &ava, &d->av, NULL), "fi_av_open");
    EFA_TRY(fi_endpoint(d->domain, i, &d->ep, NULL), "fi_endpoint");
    EFA_TRY(fi_ep_bind(d->ep, &d->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    EFA_TRY(fi_ep_bind(d->ep, &d->av->fid, 0), "fi_ep_bind(av)");
    EFA_TRY(fi_enable(d->ep), "fi_enable");
    d->addrlen = sizeof d->addr;
    EFA_TRY(fi_getname(&d->ep->fid, d->addr, &d->addrlen), "fi_getname");
    return 0;
}

static void efa_dev_close(efa_dev *d)
{
    efa_dev_close_ep(d);
    if (d->domain)
        fi_close(&d->domain->fid);
    if (d->fabric)
        fi_close(&d->fabric->fid);
    for (efa_peer *p = d->peers, *n; p; p = n) {
        n = p->next;
        free(p);
    }
    /* Operations still in the provider were closed with the endpoint. */
    for (efa_op *op = d->ops.next, *n; op && op != &d->ops; op = n) {
        n = op->next;
        free(op);
    }
    if (d->info)
        fi_freeinfo(d->info);
    pthread_mutex_destroy(&d->fi_lock);
    pthread_mutex_destroy(&d->ops_lock);
    pthread_rwlock_destroy(&d->av_lock);
}

static void efa_read_options(efa_ctx *c)
{
    const char *p = efa_cfg(c, "provider"), *ifc = efa_cfg(c, "iface");
    snprintf(c->provider, sizeof c->provider, "%s", p && *p ? p : "efa");
    efa_map_provider(c->provider, c->prov_name, sizeof c->prov_name);
    snprintf(c->iface, sizeof c->iface, "%s", ifc ? ifc : "");
    c->slice_size = (uint64_t)efa_cfg_int(c, "slice_size", EFA_DEFAULT_SLICE);
    c->max_inflight = (int)efa_cfg_int(c, "max_inflight", EFA_DEFAULT_INFLIGHT);
    if (c->max_inflight < 1)
        c->max_inflight = EFA_DEFAULT_INFLIGHT;
    c->timeout_ms = c->host && c->host->io_timeout_ms > 0 ? c->host->io_timeout_ms : 30000;
}

static void efa_fini(void *ctx);

static int efa_open_devices(efa_ctx *c, struct fi_info *list, char *err, size_t errlen)
{
    struct fi_info *picked[TERN_MAX_DEVICES];
    int n = efa_pick_devices(c, list, picked, TERN_MAX_DEVICES);
    if (n == 0) {
        snprintf(err, errlen, "libfabric provider %s has no device%s%s", c->prov_name,
                 c->iface[0] ? " named " : "", c->iface);
        return TERN_ERR_NOT_FOUND;
    }
    c->devs = calloc((size_t)n, sizeof *c->devs);
    if (!c->devs)
        return TERN_ERR_NOMEM;
    for (int k = 0; k < n; k++) {
        efa_dev *d = &c->devs[k];
        d->ctx = c;
        d->index = k;
        d->ops.next = d->ops.prev = &d->ops;
        atomic_init(&d->next_key, 1);
        pthread_mutex_init(&d->fi_lock, NULL);
        pthread_mutex_init(&d->ops_lock, NULL);
        pthread_rwlockattr_t ra;
        pthread_rwlockattr_init(&ra);
        /* the progress thread reads all the time: let av changes in */
        pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&d->av_lock, &ra);
        pthread_rwlockattr_destroy(&ra);
        c->ndev = k + 1;
        d->info = fi_dupinfo(picked[k]);
        if (!d->info)
            return TERN_ERR_NOMEM;
        snprintf(d->dinfo.name, sizeof d->dinfo.name, "%s", picked[k]->domain_attr->name);
        efa_sysfs_path(c, picked[k], &d->dinfo);
        int rc = efa_dev_open(d, err, errlen);
        if (rc)
            return rc;
        if (pthread_create(&d->thread, NULL, efa_progress_main, d)) {
            snprintf(err, errlen, "cannot start the progress thread of %s", d->dinfo.name);
            return TERN_ERR_NOMEM;
        }
        d->thread_started = 1;
    }
    return 0;
}

static int efa_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    struct fi_info *list = NULL;
    *out = NULL;
    if (!TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) || !host->complete) {
        snprintf(err, errlen, "efa: the core offers no complete() host service (ABI 1.1 "
                 "needed): update libtern");
        return TERN_ERR_ABI;
    }
    efa_ctx *c = calloc(1, sizeof *c);
    int rc;
    if (!c)
        return TERN_ERR_NOMEM;
    c->host = host;
    pthread_mutex_init(&c->list_lock, NULL);
    c->eps.next = c->eps.prev = &c->eps;
    c->mrs.next = c->mrs.prev = &c->mrs;
    efa_read_options(c);
    rc = efa_getinfo(c->prov_name, 1, &list);
    if (rc == -FI_ENODATA) {
        /* Provider cannot promise delivery completion: plain completions. */
        efa_log(c, TERN_LOG_WARN, "provider %s: no FI_DELIVERY_COMPLETE, using defaults",
                c->prov_name);
        rc = efa_getinfo(c->prov_name, 0, &list);
    }
    if (rc) {
        efa_not_found_msg(c, rc, err, errlen);
        efa_fini(c);
        return TERN_ERR_NOT_FOUND;
    }
    rc = efa_open_devices(c, list, err, errlen);
    fi_freeinfo(list);
    if (rc) {
        efa_fini(c);
        return rc;
    }
    efa_log(c, TERN_LOG_INFO, "provider %s, %d device(s), first %s, mr_mode 0x%llx%s",
            c->prov_name, c->ndev, c->devs[0].dinfo.name,
            (unsigned long long)c->devs[0].mr_mode,
            c->devs[0].serialise ? ", serialised" : "");
    *out = c;
    return 0;
}

static void efa_mr_free(efa_ctx *c, efa_mr *m);
static void efa_ep_free(efa_ep *e);

static void efa_fini(void *ctx)
{
    efa_ctx *c = ctx;
    if (!c)
        return;
    atomic_store(&c->stop, 1);
    for (int k = 0; k < c->ndev; k++)
        if (c->devs[k].thread_started)
            pthread_join(c->devs[k].thread, NULL);
    while (c->eps.next != &c->eps)
        efa_ep_free(c->eps.next);
    while (c->mrs.next != &c->mrs)
        efa_mr_free(c, c->mrs.next);
    for (int k = 0; k < c->ndev; k++)
        efa_dev_close(&c->devs[k]);
    free(c->devs);
    pthread_mutex_destroy(&c->list_lock);
    free(c);
}

static int efa_devices(void *ctx, tern_device_info *out, int max)
{
    efa_ctx *c = ctx;
    int n = 0;
    for (; n < c->ndev && n < max; n++)
        out[n] = c->devs[n].dinfo;
    return n;
}

/* ---- memory registration ---------------------------------------------------- */

static void efa_mr_free(efa_ctx *c, efa_mr *m)
{
    pthread_mutex_lock(&c->list_lock);
    m->prev->next = m->next;
    m->next->prev = m->prev;
    pthread_mutex_unlock(&c->list_lock);
    for (int k = 0; k < m->ndev; k++)
        if (m->mr[k])
            fi_close(&m->mr[k]->fid);
    free(m);
}

/* Keys we choose (no FI_MR_PROV_KEY): with offset addressing (no
 * FI_MR_VIRT_ADDR) the key is the registration's base address, which is
 * unique (registrations never overlap) and lets the initiator turn a
 * remote virtual address into an offset: remote - rkey.  Otherwise a
 * per-device counter. */
static uint64_t efa_requested_key(efa_dev *d, const void *addr)
{
    if (d->mr_mode & FI_MR_PROV_KEY)
        return 0;
    if (efa_key_is_base(d))
        return (uint64_t)(uintptr_t)addr;
    return atomic_fetch_add(&d->next_key, 1);
}

static int efa_mr_one(efa_dev *d, efa_mr *m, int k, tern_mr_keys *keys, char *err,
                      size_t errlen)
{
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    uint64_t req = efa_requested_key(d, m->addr);
    int rc = fi_mr_reg(d->domain, m->addr, m->len, access, 0, req, 0, &m->mr[k], NULL);
    if (rc) {
        snprintf(err, errlen,
                 "fi_mr_reg of %zu bytes at %p on %s failed: %s; check that the memory is "
                 "allocated and the locked-memory limit (ulimit -l)",
                 m->len, m->addr, d->dinfo.name, fi_strerror(-rc));
        return TERN_ERR_DEVICE;
    }
    if (d->mr_mode & FI_MR_ENDPOINT) {
        rc = fi_mr_bind(m->mr[k], &d->ep->fid, 0);
        if (!rc)
            rc = fi_mr_enable(m->mr[k]);
        if (rc) {
            snprintf(err, errlen, "fi_mr_bind/fi_mr_enable on %s failed: %s", d->dinfo.name,
                     fi_strerror(-rc));
            return TERN_ERR_DEVICE;
        }
    }
    keys->rkey[k] = fi_mr_key(m->mr[k]);
    if (keys->rkey[k] == FI_KEY_NOTAVAIL) {
        snprintf(err, errlen, "fi_mr_key on %s: key not available (raw keys unsupported)",
                 d->dinfo.name);
        return TERN_ERR_DEVICE;
    }
    /* The local "key" is the descriptor fi_write/fi_read want (FI_MR_LOCAL). */
    keys->lkey[k] = (uint64_t)(uintptr_t)fi_mr_desc(m->mr[k]);
    return 0;
}

static int efa_mr_register(void *ctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                           char *err, size_t errlen)
{
    efa_ctx *c = ctx;
    efa_mr *m;
    if (!addr || !len || !keys || !out) {
        snprintf(err, errlen, "efa mr_register: NULL address, zero length or no output");
        return TERN_ERR_INVAL;
    }
    m = calloc(1, sizeof *m);
    if (!m)
        return TERN_ERR_NOMEM;
    m->addr = addr;
    m->len = len;
    m->ndev = c->ndev;
    m->prev = m->next = m;
    memset(keys, 0, sizeof *keys);
    for (int k = 0; k < c->ndev; k++) {
        int rc = efa_mr_one(&c->devs[k], m, k, keys, err, errlen);
        if (rc) {
            efa_mr_free(c, m);
            return rc;
        }
    }
    keys->ndev = c->ndev;
    pthread_mutex_lock(&c->list_lock);
    m->next = c->mrs.next;
    m->prev = &c->mrs;
    c->mrs.next->prev = m;
    c->mrs.next = m;
    pthread_mutex_unlock(&c->list_lock);
    *out = m;
    return 0;
}

static int efa_mr_deregister(void *ctx, void *mr)
{
    if (!mr)
        return TERN_ERR_INVAL;
    efa_mr_free(ctx, mr);
    return 0;
}

/* Without FI_MR_VIRT_ADDR a peer addresses our memory by offset from each
 * registration's base: publish "key:base" pairs (hex) for every device. */
static int efa_segment_describe(void *ctx, tern_desc *out)
{
    efa_ctx *c = ctx;
    const tern_host_services *h = c->host;
    int rc = h->desc_set_str(out, "provider", c->prov_name);
    if (rc || (c->devs[0].mr_mode & FI_MR_VIRT_ADDR) || efa_key_is_base(&c->devs[0]))
        return rc;
    size_t cap = 64, used = 0;
    char *txt = malloc(cap);
    if (!txt)
        return TERN_ERR_NOMEM;
    txt[0] = '\0';
    pthread_mutex_lock(&c->list_lock);
    for (efa_mr *m = c->mrs.next; m != &c->mrs; m = m->next)
        for (int k = 0; k < m->ndev; k++) {
            if (used + 48 > cap) {
                char *t = realloc(txt, cap *= 2);
                if (!t)
                    break;
                txt = t;
            }
            used += (size_t)snprintf(txt + used, cap - used, "%s%llx:%llx", used ? "," : "",
                                     (unsigned long long)fi_mr_key(m->mr[k]),
                                     (unsigned long long)(uintptr_t)m->addr);
        }
    pthread_mutex_unlock(&c->list_lock);
    rc = h->desc_set_str(out, "mr_bases", txt);
    free(txt);
    return rc;
}

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

static int efa_ep_open(void *ctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
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

static int efa_ep_describe(void *ep, tern_desc *out)
{
    efa_ep *e = ep;
    char hex[2 * EFA_ADDR_MAX + 1];
    efa_hex_encode(e->dev->addr, e->dev->addrlen, hex);
    return e->ctx->host->desc_set_str(out, "efa_addr", hex);
}

/* shm names are "fi_shm://<pid>:...".  A shm peer that died holding its
 * region's lock makes fi_write spin forever on it, so shm peers are checked
 * for life before each post (same pid namespace: CMA needs it anyway). */
static int efa_shm_pid(const uint8_t *addr, size_t len)
{
    static const char prefix[] = "fi_shm://";
    char buf[32];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, addr, n);
    buf[n] = '\0';
    if (strncmp(buf, prefix, sizeof prefix - 1))
        return 0;
    long pid = strtol(buf + sizeof prefix - 1, NULL, 10);
    return pid > 0 && pid < (1L << 30) ? (int)pid : 0;
}

static int efa_peer_dead(const efa_peer *p)
{
    return p->pid > 0 && kill(p->pid, 0) != 0 && errno == ESRCH;
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
        free(p);
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
        free(p);
    } else if (p->refs == 0 && p->inflight == 0) {
        gone = efa_peer_unlink_locked(d, p);
    }
    pthread_mutex_unlock(&d->ops_lock);
    if (gone)
        efa_peer_remove(d, gone);
}

static int efa_ep_connect(void *ep, const tern_desc *peer, char *err, size_t errlen)
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

static void efa_ep_free(efa_ep *e)
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

static void efa_ep_close(void *ep)
{
    if (ep)
        efa_ep_free(ep);
}

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

static void efa_op_unlink(efa_dev *d, efa_op *op)
{
    pthread_mutex_lock(&d->ops_lock);
    op->prev->next = op->next;
    op->next->prev = op->prev;
    op->peer->inflight--;
    op->peer = NULL;
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
    op->posted_ms = efa_now_ms();
    efa_op_link(d, op);
    efa_lock(d);
    if (s->opcode == TERN_WRITE)
        rc = fi_write(d->ep, s->local, s->length, desc, e->peer->fi_addr, raddr, s->rkey,
                      &op->fctx);
    else
        rc = fi_read(d->ep, s->local, s->length, desc, e->peer->fi_addr, raddr, s->rkey,
                     &op->fctx);
    efa_unlock(d);
    if (rc)
        efa_op_unlink(d, op);
    pthread_rwlock_unlock(&d->av_lock);
    return rc;
}

/* Post one slice; -FI_EAGAIN is retried after reading the CQ, until the
 * I/O timeout.  A failure completes the slice with a message. */
static void efa_submit_one(efa_ep *e, tern_slice *s)
{
    efa_dev *d = e->dev;
    efa_ctx *c = e->ctx;
    char msg[256];
    uint64_t raddr, deadline;
    ssize_t rc;
    efa_op *op;
    if ((s->opcode != TERN_READ && s->opcode != TERN_WRITE) || s->length > d->max_msg) {
        snprintf(msg, sizeof msg, "bad slice: opcode %d, length %llu (max %llu on %s)",
                 s->opcode, (unsigned long long)s->length, (unsigned long long)d->max_msg,
                 d->dinfo.name);
        efa_slice_finish(c, s, TERN_ERR_INVAL, msg);
        return;
    }
    if (efa_remote_addr(e, s, &raddr)) {
        snprintf(msg, sizeof msg, "remote address %llx / key %llx of %.80s is not inside a registration "
                 "of the peer (offset addressing)", (unsigned long long)s->remote,
                 (unsigned long long)s->rkey, e->peer_nic_path);
        efa_slice_finish(c, s, TERN_ERR_RANGE, msg);
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
    deadline = efa_now_ms() + (uint64_t)c->timeout_ms;
    while ((rc = efa_post(e, op, raddr)) == -FI_EAGAIN && efa_now_ms() < deadline)
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
        snprintf(msg, sizeof msg, "peer %.80s: its process %d is gone", e->peer_nic_path,
                 e->peer->pid);
        efa_slice_finish(c, s, TERN_ERR_CLOSED, msg);
        return;
    }
    if (rc == -FI_EAGAIN)
        atomic_store(&d->wedged, 1); /* the provider took nothing for a whole timeout */
    snprintf(msg, sizeof msg, "fi_%s to %.80s failed: %s", s->opcode ? "write" : "read",
             e->peer_nic_path, fi_strerror((int)-rc));
    efa_slice_finish(c, s, rc == -FI_EAGAIN ? TERN_ERR_TIMEOUT : TERN_ERR_DEVICE, msg);
}

static int efa_submit(void *ep, tern_slice *const *slices, int n)
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

static int efa_query(void *ctx, const char *what, char *out, size_t outlen)
{
    efa_ctx *c = ctx;
    size_t used;
    (void)what;
    if (!out || !outlen)
        return TERN_ERR_INVAL;
    used = (size_t)snprintf(out, outlen, "provider %s (libfabric %u.%u), slice %llu, "
                            "in flight %d", c->prov_name, FI_MAJOR(fi_version()),
                            FI_MINOR(fi_version()), (unsigned long long)c->slice_size,
                            atomic_load(&c->inflight));
    for (int k = 0; k < c->ndev && used < outlen; k++) {
        efa_dev *d = &c->devs[k];
        used += (size_t)snprintf(out + used, outlen - used,
                                 "; %s: mr_mode 0x%llx, %s, posted %llu, done %llu, "
                                 "failed %llu",
                                 d->dinfo.name, (unsigned long long)d->mr_mode,
                                 d->serialise ? "serialised" : "thread-safe",
                                 (unsigned long long)atomic_load(&d->posted),
                                 (unsigned long long)atomic_load(&d->completed),
                                 (unsigned long long)atomic_load(&d->failed));
    }
    return 0;
}

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    .magic = TERN_TRANSPORT_MAGIC,
    .struct_size = sizeof(tern_transport),
    .abi_major = TERN_TRANSPORT_ABI_MAJOR,
    .abi_minor = TERN_TRANSPORT_ABI_MINOR,
    .name = "efa",
    .version = EFA_VERSION,
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_HANDSHAKE | TERN_CAP_MULTI_DEVICE,
    .options = efa_options,
    .default_slice_size = EFA_DEFAULT_SLICE,
    .init = efa_init,
    .fini = efa_fini,
    .devices = efa_devices,
    .mr_register = efa_mr_register,
    .mr_deregister = efa_mr_deregister,
    .segment_describe = efa_segment_describe,
    .ep_open = efa_ep_open,
    .ep_describe = efa_ep_describe,
    .ep_connect = efa_ep_connect,
    .ep_close = efa_ep_close,
    .submit = efa_submit,
    .poll = NULL, /* completions go through host->complete() */
    .ep_reset = NULL,
    .query = efa_query,
};
