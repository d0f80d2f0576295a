/* transports/efa/efa_mr.c: memory registration on every device, and the
 * segment-level address blob. */
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

/* ---- memory registration ---------------------------------------------------- */

void efa_mr_free(efa_ctx *c, efa_mr *m)
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
    if (rc)
        return tern_kit_errf(err, errlen, TERN_ERR_DEVICE,
                             "fi_mr_reg of %zu bytes at %p on %s failed: %s; check that the "
                             "memory is allocated and the locked-memory limit (ulimit -l)",
                             m->len, m->addr, d->dinfo.name, fi_strerror(-rc));
    if (d->mr_mode & FI_MR_ENDPOINT) {
        rc = fi_mr_bind(m->mr[k], &d->ep->fid, 0);
        if (!rc)
            rc = fi_mr_enable(m->mr[k]);
        if (rc)
            return tern_kit_errf(err, errlen, TERN_ERR_DEVICE,
                                 "fi_mr_bind/fi_mr_enable on %s failed: %s", d->dinfo.name,
                                 fi_strerror(-rc));
    }
    keys->rkey[k] = fi_mr_key(m->mr[k]);
    if (keys->rkey[k] == FI_KEY_NOTAVAIL)
        return tern_kit_errf(err, errlen, TERN_ERR_DEVICE,
                             "fi_mr_key on %s: key not available (raw keys unsupported)",
                             d->dinfo.name);
    /* The local "key" is the descriptor fi_write/fi_read want (FI_MR_LOCAL). */
    keys->lkey[k] = (uint64_t)(uintptr_t)fi_mr_desc(m->mr[k]);
    return 0;
}

int efa_mr_register(void *ctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                    char *err, size_t errlen)
{
    efa_ctx *c = ctx;
    efa_mr *m;
    if (!addr || !len || !keys || !out)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                             "efa mr_register: NULL address, zero length or no output");
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

int efa_mr_deregister(void *ctx, void *mr)
{
    if (!mr)
        return TERN_ERR_INVAL;
    efa_mr_free(ctx, mr);
    return 0;
}

/* Without FI_MR_VIRT_ADDR a peer addresses our memory by offset from each
 * registration's base: publish "key:base" pairs (hex) for every device. */
int efa_segment_describe(void *ctx, tern_desc *out)
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
