/* transports/efa/efa_fabric.c: one device = one fi_info: choosing the
 * devices, then opening and closing its fabric, domain, RDM endpoint, AV
 * and CQ. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

/* ---- device setup --------------------------------------------------------- */

/* bounce: ask for FI_HMEM.  libfabric's shm provider then never copies by
 * cross-memory attach on that endpoint, only through its bounce buffers
 * (the same switch as its FI_SHM_DISABLE_CMA, but per endpoint rather than
 * for the whole process); host memory is still FI_HMEM_SYSTEM, registered
 * as before.  docs/protocol.md, "efa rails". */
static struct fi_info *efa_hints(const char *prov_name, int delivery_complete, int bounce)
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
    if (bounce) {
        h->caps |= FI_HMEM;
        h->domain_attr->mr_mode |= FI_MR_HMEM;
    }
    if (prov_name) {
        h->fabric_attr->prov_name = strdup(prov_name);
        if (!h->fabric_attr->prov_name) {
            fi_freeinfo(h);
            return NULL;
        }
    }
    return h;
}

int efa_getinfo(const char *prov_name, int delivery_complete, int bounce, struct fi_info **out)
{
    struct fi_info *h = efa_hints(prov_name, delivery_complete, bounce);
    if (!h)
        return -FI_ENOMEM;
    int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, h, out);
    fi_freeinfo(h);
    return rc;
}

/* TERN_ERR_NOT_FOUND, the message naming what fi_getinfo offered instead
 * ("fi_getinfo offered: tcp;ofi_rxm, shm"). */
int efa_not_found(const efa_ctx *c, int rc, char *err, size_t errlen)
{
    struct fi_info *all = NULL, *i;
    char list[512] = "";
    size_t used = 0;
    if (efa_getinfo(NULL, 0, 0, &all) == 0) {
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
    return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND,
                         "libfabric provider '%s' (%s) offers no RDM endpoint with RMA here (%s); "
                         "fi_getinfo offered: %s; check the transport's `provider` key",
                         c->provider, c->prov_name, fi_strerror(-rc), used ? list : "nothing");
}

/* Keep one fi_info per domain (device): the first, or the first IPv4 one. */
/* A domain on the loopback interface (its source address 127.0.0.0/8 or
 * ::1; libfabric's tcp provider lists one per interface). */
static int efa_is_loopback(const struct fi_info *i)
{
    const struct sockaddr *sa = i->src_addr;
    if (!sa || i->src_addrlen < sizeof(struct sockaddr_in))
        return 0;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6 && i->src_addrlen >= sizeof(struct sockaddr_in6))
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return 0;
}

/* One fi_info per domain (device).  Without the iface option, a loopback
 * domain is left out when the provider offers any other: a peer on another
 * host publishing its loopback address would make this side connect to
 * itself (the peer's 127.0.0.1 is ours), and a peer on this host reaches
 * the other domains as well. */
int efa_pick_devices(efa_ctx *c, struct fi_info *list, struct fi_info **picked, int max)
{
    int n = 0, others = 0;
    for (struct fi_info *i = list; i; i = i->next)
        others |= i->domain_attr->name && !efa_is_loopback(i);
    for (struct fi_info *i = list; i; i = i->next) {
        const char *dn = i->domain_attr->name ? i->domain_attr->name : "";
        int k;
        if (c->iface[0] && strcmp(dn, c->iface))
            continue;
        if (!c->iface[0] && others && efa_is_loopback(i))
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
void efa_sysfs_path(const efa_ctx *c, const struct fi_info *i, tern_device_info *di)
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
int efa_key_is_base(const efa_dev *d)
{
    return !(d->mr_mode & (FI_MR_VIRT_ADDR | FI_MR_PROV_KEY)) &&
           d->info->domain_attr->mr_key_size >= sizeof(uint64_t);
}

#define EFA_TRY(call, what)                                                          \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_)                                                                     \
            return tern_kit_errf(err, errlen, TERN_ERR_DEVICE,                       \
                                 "%s on device %s (provider %s) failed: %s", what,   \
                                 d->dinfo.name, d->ctx->prov_name,                   \
                                 fi_strerror(-rc_));                                 \
    } while (0)

int efa_dev_open(efa_dev *d, char *err, size_t errlen)
{
    struct fi_info *i = d->info;
    d->mr_mode = (uint64_t)i->domain_attr->mr_mode;
    d->serialise = i->domain_attr->threading != FI_THREAD_SAFE;
    d->max_msg = i->ep_attr->max_msg_size ? i->ep_attr->max_msg_size : UINT64_MAX;
    if (efa_is_shm(d)) {
        efa_shm_sweep(d->ctx, "/dev/shm");
        int rc = efa_shm_name(d, err, errlen);
        if (rc)
            return rc;
    }
    EFA_TRY(fi_fabric(i->fabric_attr, &d->fabric, NULL), "fi_fabric");
    /* With a bounce endpoint the domain is opened for both: FI_HMEM
     * (host memory only here) and the registrations both endpoints use. */
    EFA_TRY(fi_domain(d->fabric, d->info_b ? d->info_b : i, &d->domain, NULL), "fi_domain");
    return efa_dev_open_ep(d, err, errlen);
}

/* CQ, AV and endpoint: what a recycle replaces. */
int efa_dev_open_ep(efa_dev *d, char *err, size_t errlen)
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
    if (d->info_b) {
        EFA_TRY(fi_endpoint(d->domain, d->info_b, &d->ep_b, NULL), "fi_endpoint(bounce)");
        EFA_TRY(fi_ep_bind(d->ep_b, &d->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(bounce, cq)");
        EFA_TRY(fi_ep_bind(d->ep_b, &d->av->fid, 0), "fi_ep_bind(bounce, av)");
        EFA_TRY(fi_enable(d->ep_b), "fi_enable(bounce)");
    }
    d->addrlen = sizeof d->addr;
    EFA_TRY(fi_getname(&d->ep->fid, d->addr, &d->addrlen), "fi_getname");
    d->addrlen_b = 0;
    if (d->ep_b) {
        d->addrlen_b = sizeof d->addr_b;
        EFA_TRY(fi_getname(&d->ep_b->fid, d->addr_b, &d->addrlen_b), "fi_getname(bounce)");
    }
    return 0;
}

void efa_dev_close_ep(efa_dev *d)
{
    if (d->ep_b)
        fi_close(&d->ep_b->fid);
    d->ep_b = NULL;
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

void efa_dev_close(efa_dev *d)
{
    efa_dev_close_ep(d);
    if (d->domain)
        fi_close(&d->domain->fid);
    if (d->fabric)
        fi_close(&d->fabric->fid);
    for (efa_peer *p = d->peers, *n; p; p = n) {
        n = p->next;
        efa_peer_free(p);
    }
    /* Operations still in the provider were closed with the endpoint. */
    for (efa_op *op = d->ops.next, *n; op && op != &d->ops; op = n) {
        n = op->next;
        free(op);
    }
    if (d->info)
        fi_freeinfo(d->info);
    if (d->info_b)
        fi_freeinfo(d->info_b);
    pthread_mutex_destroy(&d->fi_lock);
    pthread_mutex_destroy(&d->ops_lock);
    pthread_rwlock_destroy(&d->av_lock);
}
