/* core/plugin/xport.c: one loaded transport (see xport.h). */
#include "plugin/xport.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "host/topology_load.h"
#include "base/util.h"

#define DEVICE_HOLD_MS 500u       /* first hold time of a failed device */
#define DEVICE_HOLD_MAX_MS 30000u /* it doubles per failure up to this */

/* Slice size: the plugin's setting, else the transport's default, else the
 * engine's slice_size. */
static uint64_t slice_size_of(const tern_config *c, const tern_plugin *p)
{
    if (p->slice_size)
        return p->slice_size;
    if (p->ops->default_slice_size)
        return p->ops->default_slice_size;
    return c->slice_size ? c->slice_size : 65536;
}

static void close_cb(void *arg, void *ep)
{
    tern_xport *x = arg;
    if (ep)
        x->ops->ep_close(ep);
}

void tern_xport_reap(tern_xport *x)
{
    if (x->eps)
        tern_epstore_reap(x->eps);
}

int tern_xport_init(tern_xport *x, struct tern_engine *eng, int index, const tern_config *cfg,
                    tern_plugin *p, char *err, size_t errlen)
{
    x->eng = eng;
    x->index = index;
    x->pl = p;
    x->ops = p->ops;
    x->slice_size = slice_size_of(cfg, p);
    pthread_mutex_init(&x->conn_lock, NULL);
    pthread_cond_init(&x->conn_cond, NULL);
    int rc = tern_topology_load(cfg, p->devices, p->ndevices, &x->topo, err, errlen);
    if (rc)
        return rc;
    x->eps = tern_epstore_create(cfg->endpoint_cache ? cfg->endpoint_cache : 256, cfg->eviction,
                                 close_cb, x);
    x->blob = tern_desc_new();
    if (!x->eps || !x->blob)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    rc = p->ops->segment_describe(p->ctx, x->blob);
    if (rc)
        return tern_errf(err, errlen, rc, "transport %s: segment_describe failed: %s", p->name,
                         tern_strerror(rc));
    return 0;
}

static void strset_free(tern_strset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

void tern_xport_fini(tern_xport *x)
{
    if (!x->ops)
        return;
    if (x->eps)
        tern_epstore_destroy(x->eps); /* closes every endpoint */
    if (x->topo)
        tern_topology_free(x->topo);
    tern_desc_free(x->blob);
    strset_free(&x->unconfirmed);
    strset_free(&x->passive_keys);
    strset_free(&x->recheck_keys);
    pthread_mutex_destroy(&x->conn_lock);
    pthread_cond_destroy(&x->conn_cond);
}

/* ---- device health ---------------------------------------------------------- */

void tern_xport_device_failed(tern_xport *x, int dev)
{
    if (dev < 0 || dev >= TERN_MAX_DEVICES || !x->topo)
        return;
    uint32_t n = atomic_fetch_add(&x->down_count[dev], 1);
    uint64_t hold = DEVICE_HOLD_MS << (n < 6 ? n : 6);
    hold = hold > DEVICE_HOLD_MAX_MS ? DEVICE_HOLD_MAX_MS : hold;
    atomic_store(&x->up_at_ms[dev], tern_now_ms() + hold);
    tern_topology_mark_down(x->topo, dev, 1);
    tern_log(x->log, TERN_LOG_DEBUG, "transport %s: device %s down for %llu ms (failure %u)",
             x->pl->name, dev < x->pl->ndevices ? x->pl->devices[dev].name : "?",
             (unsigned long long)hold, n + 1);
}

void tern_xport_device_ok(tern_xport *x, int dev)
{
    if (dev >= 0 && dev < TERN_MAX_DEVICES && atomic_load(&x->down_count[dev]))
        atomic_store(&x->down_count[dev], 0);
}

void tern_xport_device_revive(tern_xport *x, uint64_t now_ms)
{
    int n = x->pl ? x->pl->ndevices : 0;
    for (int d = 0; d < n && d < TERN_MAX_DEVICES; d++) {
        uint64_t at = atomic_load(&x->up_at_ms[d]);
        if (at && now_ms >= at &&
            atomic_compare_exchange_strong(&x->up_at_ms[d], &at, (uint64_t)0)) {
            tern_topology_mark_down(x->topo, d, 0);
            tern_log(x->log, TERN_LOG_DEBUG, "transport %s: device %s up again for a trial",
                     x->pl->name, x->pl->devices[d].name);
        }
    }
}

const char *tern_xport_msg(const tern_xport *x, const char *msg)
{
    size_t n = strlen(x->pl->name);
    if (msg && strncmp(msg, x->pl->name, n) == 0 && msg[n] == ':')
        for (msg += n + 1; *msg == ' ';)
            msg++;
    return msg ? msg : "";
}
