/* transports/efa/efa.c: the libfabric transport, "efa".
 *
 * One RDM endpoint per device (fi_info), an AV and a CQ; fi_write/fi_read
 * per slice; one progress thread per device reads the CQ and hands each
 * finished slice straight back through the host service complete() (ABI
 * 1.1, no queue of its own), so that providers with manual data progress
 * (tcp;ofi_rxm, shm) also progress as a passive target, without the engine
 * calling anything.  See include/tern/transport.h for the contract.
 *
 * This file holds the options, init/fini and the exported table; the rest
 * is one concern per file (CMakeLists.txt lists them, efa_internal.h holds
 * what they share). */
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

#define EFA_VERSION "0.1.0"

/* ---- options --------------------------------------------------------------- */

/* Each key written once (tern/plugin_kit.h): the table and the efa_ctx field. */
#define EFA_OPTIONS(X)                                                                     \
    X(efa_ctx, provider, "provider", TERN_OPT_STRING, 0, 0, NULL, "efa",                   \
      "libfabric provider: efa, tcp (tcp;ofi_rxm), shm, verbs, or any RDM provider name")  \
    X(efa_ctx, slice_size, "slice_size", TERN_OPT_SIZE, 4096, 1LL << 30, NULL, "1M",       \
      "slice size for this transport (large slices matter on EFA)")                        \
    X(efa_ctx, iface, "iface", TERN_OPT_STRING, 0, 0, NULL, NULL,                          \
      "only use the device/domain with this name (e.g. lo for provider tcp)")              \
    X(efa_ctx, max_inflight, "max_inflight", TERN_OPT_INT, 1, 65536, NULL, "256",          \
      "slices in flight per engine before submit pushes back")                              \
    X(efa_ctx, rails, "rails", TERN_OPT_INT, 0, 16, NULL, "0",                               \
      "endpoints per device, each with its own progress thread; the core spreads slices "  \
      "over them like NICs (0: 2 for shm, 4 with shm_bounce_min 0, 1 for other providers)")                         \
    X(efa_ctx, shm_bounce_min, "shm_bounce_min", TERN_OPT_SIZE, 0, 1LL << 30, NULL, "256K",  \
      "provider shm: WRITEs of at least this size go through the provider's bounce "      \
      "buffers (a second endpoint per rail) rather than by cross-memory attach, which "   \
      "pins the writer's pages; 0: always attach")

static const tern_option efa_options[] = {EFA_OPTIONS(TERN_KIT_OPTION) TERN_KIT_OPTIONS_END};
static const tern_kit_field efa_fields[] = {EFA_OPTIONS(TERN_KIT_FIELD) TERN_KIT_FIELDS_END};

/* libfabric's shm provider moves one operation at a time per pair of
 * endpoints, each step a command the other side's progress picks up, and
 * copies on the progress thread: one endpoint moves what one core can pin
 * and copy, less the hand-offs.  Several endpoints, each progressed by its
 * own thread, overlap both; but every thread polls.  On a 2-core machine
 * 2 rails with bounce endpoints moved more than 4, and with every WRITE by
 * attach (shm_bounce_min: 0) 4 moved more than 2 (docs/protocol.md, "efa
 * rails").  A NIC provider is not bound that way. */
#define EFA_SHM_RAILS 2
#define EFA_SHM_ATTACH_RAILS 4

static int efa_default_rails(const efa_ctx *c)
{
    if (strcmp(c->prov_name, "shm") != 0)
        return 1;
    return c->shm_bounce_min ? EFA_SHM_RAILS : EFA_SHM_ATTACH_RAILS;
}

static void efa_read_options(efa_ctx *c)
{
    tern_kit_options_fill(c->host, efa_options, efa_fields, c);
    if (!c->provider[0])
        snprintf(c->provider, sizeof c->provider, "efa");
    efa_map_provider(c->provider, c->prov_name, sizeof c->prov_name);
    if (c->max_inflight < 1)
        c->max_inflight = EFA_DEFAULT_INFLIGHT;
    if (c->rails < 1)
        c->rails = efa_default_rails(c);
    c->timeout_ms = c->host && c->host->io_timeout_ms > 0 ? c->host->io_timeout_ms : 30000;
}

static void efa_fini(void *ctx);

/* Device k of the transport: rail (k % rails) of picked fi_info k / rails.
 * Rail 0 keeps the domain's name, rail r is "<domain>.r<r>". */
static int efa_open_device(efa_ctx *c, efa_dev *d, int k, const struct fi_info *fi,
                           const struct fi_info *fi_b, char *err, size_t errlen)
{
    unsigned rail = (unsigned)(k % c->rails) & 15u; /* rails <= 16 */
    d->ctx = c;
    d->index = k;
    d->ops.next = d->ops.prev = &d->ops;
    d->posting.next = d->posting.prev = &d->posting;
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
    d->info = fi_dupinfo(fi);
    if (!d->info)
        return TERN_ERR_NOMEM;
    if (fi_b && !(d->info_b = fi_dupinfo(fi_b)))
        return TERN_ERR_NOMEM;
    if (rail)
        snprintf(d->dinfo.name, sizeof d->dinfo.name, "%.*s.r%u",
                 (int)sizeof d->dinfo.name - 5, fi->domain_attr->name, rail);
    else
        snprintf(d->dinfo.name, sizeof d->dinfo.name, "%s", fi->domain_attr->name);
    efa_sysfs_path(c, fi, &d->dinfo);
    int rc = efa_dev_open(d, err, errlen);
    if (rc)
        return rc;
    if (pthread_create(&d->thread, NULL, efa_progress_main, d))
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "cannot start the progress thread of %s",
                             d->dinfo.name);
    d->thread_started = 1;
    return 0;
}

/* The bounce-buffer fi_info of domain fi's (NULL: none). */
static const struct fi_info *efa_match_domain(const struct fi_info *list, const struct fi_info *fi)
{
    for (const struct fi_info *i = list; i; i = i->next)
        if (i->domain_attr->name && !strcmp(i->domain_attr->name, fi->domain_attr->name))
            return i;
    return NULL;
}

static int efa_open_devices(efa_ctx *c, struct fi_info *list, const struct fi_info *list_b,
                            char *err, size_t errlen)
{
    struct fi_info *picked[TERN_MAX_DEVICES];
    int n = efa_pick_devices(c, list, picked, TERN_MAX_DEVICES);
    if (n == 0)
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND,
                             "libfabric provider %s has no device%s%s", c->prov_name,
                             c->iface[0] ? " named " : "", c->iface);
    if (n * c->rails > TERN_MAX_DEVICES)
        n = TERN_MAX_DEVICES / c->rails;
    c->devs = calloc((size_t)(n * c->rails), sizeof *c->devs);
    if (!c->devs)
        return TERN_ERR_NOMEM;
    for (int k = 0; k < n * c->rails; k++) {
        const struct fi_info *fi = picked[k / c->rails];
        int rc = efa_open_device(c, &c->devs[k], k, fi, efa_match_domain(list_b, fi), err,
                                 errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* fi_getinfo with delivery completion if the provider has it, plain
 * completions otherwise. */
static int efa_getinfo_dc(const efa_ctx *c, int bounce, struct fi_info **list)
{
    int rc = efa_getinfo(c->prov_name, 1, bounce, list);
    if (rc == -FI_ENODATA) {
        efa_log(c, TERN_LOG_WARN, "provider %s: no FI_DELIVERY_COMPLETE, using defaults",
                c->prov_name);
        rc = efa_getinfo(c->prov_name, 0, bounce, list);
    }
    return rc;
}

/* Provider shm copies a WRITE by cross-memory attach, which pins the
 * writer's pages one by one; its bounce buffers move large WRITEs faster
 * when the pages are 4 KiB, attach moves small ones faster.  So each shm
 * rail gets a second endpoint that never attaches (docs/protocol.md, "efa
 * rails"), described by this second fi_info; NULL when there is none. */
static struct fi_info *efa_getinfo_bounce(efa_ctx *c)
{
    struct fi_info *list = NULL;
    if (c->shm_bounce_min == 0 || strcmp(c->prov_name, "shm") != 0)
        return NULL;
    if (efa_getinfo_dc(c, 1, &list) != 0) {
        efa_log(c, TERN_LOG_INFO, "provider shm offers no FI_HMEM endpoint: every WRITE "
                "goes by cross-memory attach");
        return NULL;
    }
    return list;
}

static int efa_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    struct fi_info *list = NULL;
    *out = NULL;
    if (!TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) || !host->complete)
        return tern_kit_errf(err, errlen, TERN_ERR_ABI, "efa: the core offers no complete() host "
                             "service (ABI 1.1 needed): update libtern");
    efa_ctx *c = calloc(1, sizeof *c);
    int rc;
    if (!c)
        return TERN_ERR_NOMEM;
    c->host = host;
    pthread_mutex_init(&c->list_lock, NULL);
    c->eps.next = c->eps.prev = &c->eps;
    c->mrs.next = c->mrs.prev = &c->mrs;
    efa_read_options(c);
    rc = efa_getinfo_dc(c, 0, &list);
    if (rc) {
        rc = efa_not_found(c, rc, err, errlen);
        efa_fini(c);
        return rc;
    }
    struct fi_info *list_b = efa_getinfo_bounce(c);
    rc = efa_open_devices(c, list, list_b, err, errlen);
    fi_freeinfo(list);
    if (list_b)
        fi_freeinfo(list_b);
    if (rc) {
        efa_fini(c);
        return rc;
    }
    efa_log(c, TERN_LOG_INFO, "provider %s, %d device(s) (%d rail%s each), first %s, "
            "mr_mode 0x%llx%s%s", c->prov_name, c->ndev, c->rails, c->rails == 1 ? "" : "s",
            c->devs[0].dinfo.name,
            (unsigned long long)c->devs[0].mr_mode,
            c->devs[0].serialise ? ", serialised" : "",
            c->devs[0].ep_b ? ", large writes through bounce buffers" : "");
    *out = c;
    return 0;
}

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
                                 "failed %llu, stuck_post_ms %llu, bounce_writes %llu",
                                 d->dinfo.name, (unsigned long long)d->mr_mode,
                                 d->serialise ? "serialised" : "thread-safe",
                                 (unsigned long long)atomic_load(&d->posted),
                                 (unsigned long long)atomic_load(&d->completed),
                                 (unsigned long long)atomic_load(&d->failed),
                                 (unsigned long long)efa_dev_stuck_post_ms(d),
                                 (unsigned long long)atomic_load(&d->bounced));
    }
    return 0;
}

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    TERN_KIT_TRANSPORT_HEAD("efa", EFA_VERSION),
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
