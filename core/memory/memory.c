/* core/memory/memory.c: registered memory and the local segment descriptor (see
 * memory.h).  Buffers are kept sorted by address (binary search for slicing
 * and validation).  Every change rebuilds our descriptor, keeps a decoded
 * copy for path choice and publishes the JSON through the metadata
 * backend. */
#include "memory/memory.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host/gpu_topo.h"
#include "base/util.h"

/* Index of the first buffer whose addr > a. */
static size_t upper_bound(const tern_memory *e, uint64_t a)
{
    return tern_upper_bound_u64(e->bufs, e->nbufs, sizeof *e->bufs, offsetof(tern_membuf, addr),
                                a);
}

const tern_membuf *tern_memory_find_locked(const tern_memory *e, uint64_t addr)
{
    size_t i = upper_bound(e, addr);
    if (i == 0)
        return NULL;
    const tern_membuf *b = &e->bufs[i - 1];
    return addr - b->addr < b->len ? b : NULL;
}

uint64_t tern_memory_covered_locked(const tern_memory *e, uint64_t addr, uint64_t len)
{
    uint64_t done = 0;
    while (done < len) {
        const tern_membuf *b = tern_memory_find_locked(e, addr + done);
        if (!b)
            break;
        done += b->addr + b->len - (addr + done);
    }
    return done < len ? done : len;
}

/* ---- descriptor ----------------------------------------------------------- */

static int build_buffers(const tern_memory *e, tern_segment_desc *d)
{
    d->buffers = calloc(e->nbufs ? e->nbufs : 1, sizeof *d->buffers);
    if (!d->buffers)
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < e->nbufs; i++, d->nbuffers++) {
        const tern_membuf *m = &e->bufs[i];
        tern_buffer_desc *b = &d->buffers[i];
        tern_strlcpy(b->location, m->location, sizeof b->location);
        tern_strlcpy(b->app_name, m->name, sizeof b->app_name);
        b->addr = m->addr;
        b->length = m->len;
        b->keys = calloc(e->nxports, sizeof *b->keys);
        if (!b->keys)
            return TERN_ERR_NOMEM;
        for (size_t t = 0; t < e->nxports; t++, b->nkeys++) {
            tern_buffer_keys *k = &b->keys[t];
            tern_strlcpy(k->transport, e->xports[t].pl->name, sizeof k->transport);
            k->ndev = m->keys[t].ndev;
            memcpy(k->lkey, m->keys[t].lkey, sizeof k->lkey);
            memcpy(k->rkey, m->keys[t].rkey, sizeof k->rkey);
        }
    }
    return 0;
}

static int build_transports(const tern_memory *e, tern_segment_desc *d)
{
    d->transports = calloc(e->nxports, sizeof *d->transports);
    if (!d->transports)
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < e->nxports; i++, d->ntransports++) {
        const tern_xport *x = &e->xports[i];
        tern_seg_transport *t = &d->transports[i];
        tern_strlcpy(t->name, x->pl->name, sizeof t->name);
        t->devices = calloc(x->pl->ndevices ? x->pl->ndevices : 1, sizeof *t->devices);
        if (!t->devices)
            return TERN_ERR_NOMEM;
        for (int k = 0; k < x->pl->ndevices; k++, t->ndevices++) {
            tern_strlcpy(t->devices[k].name, x->pl->devices[k].name, TERN_NAME_MAX);
            t->devices[k].lid = x->pl->devices[k].lid;
            tern_strlcpy(t->devices[k].gid, x->pl->devices[k].gid, sizeof t->devices[k].gid);
        }
        t->topology = x->topo; /* borrowed: not freed below */
        t->addr = x->blob;     /* borrowed */
    }
    return 0;
}

/* Frees what build_* allocated (not the borrowed topology and blob). */
static void build_free(tern_segment_desc *d)
{
    for (size_t i = 0; i < d->nbuffers; i++)
        free(d->buffers[i].keys);
    free(d->buffers);
    for (size_t i = 0; i < d->ntransports; i++)
        free(d->transports[i].devices);
    free(d->transports);
}

static char *encode_local(tern_memory *e)
{
    tern_segment_desc d;
    memset(&d, 0, sizeof d);
    tern_strlcpy(d.name, e->server_name, sizeof d.name);
    tern_strlcpy(d.protocol, e->xports[0].pl->name, sizeof d.protocol);
    for (size_t i = 0; i < e->n_hs_addrs && i < TERN_DESC_MAX_HS_ADDRS; i++, d.n_hs_addrs++)
        tern_strlcpy(d.hs_addrs[i], e->hs_addrs[i], sizeof d.hs_addrs[i]);
    /* The generation: wall-clock microseconds, so a restarted peer's
     * descriptor is newer than its predecessor's, and strictly increasing
     * within this process. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
    d.timestamp = now > e->generation ? now : e->generation + 1;
    char *json = NULL;
    if (build_buffers(e, &d) == 0 && build_transports(e, &d) == 0)
        json = tern_segment_desc_encode(&d);
    if (json)
        e->generation = d.timestamp;
    build_free(&d);
    return json;
}

/* How long a register or unregister waits, with no lock held, for its
 * descriptor to reach the store before it returns anyway (the keep-alive
 * thread goes on writing it). */
#define MEM_PUBLISH_WAIT_MS 250

/* Rebuild, store and publish (lock held exclusive).  later: hand the
 * descriptor to the store's background writer (tern_metadata_publish_async)
 * instead of waiting for the store: the data path's read lock waits for
 * this lock, and a store that hangs must not stall transfers; a register
 * does not fail because a store is slow.  The engine's first publish waits
 * (a store that is down is reported at creation). */
static int publish_locked(tern_memory *e, int later, char *err, size_t errlen)
{
    char *json = encode_local(e);
    if (!json)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "encoding our segment descriptor failed");
    tern_segment_desc *d = NULL;
    int rc = tern_segment_desc_decode(json, strlen(json), &d, err, errlen);
    if (rc == 0)
        rc = later ? tern_metadata_publish_async(e->md, e->server_name, json, err, errlen)
                   : tern_metadata_publish(e->md, e->server_name, json, err, errlen);
    if (rc) {
        free(json);
        tern_segment_desc_free(d);
        return rc;
    }
    free(e->local_json);
    tern_segment_desc_free(e->local_desc);
    e->local_json = json;
    e->local_desc = d;
    return 0;
}

int tern_memory_publish(tern_memory *m, char *err, size_t errlen)
{
    pthread_rwlock_wrlock(&m->lock);
    int rc = publish_locked(m, 0, err, errlen);
    pthread_rwlock_unlock(&m->lock);
    return rc;
}

char *tern_memory_json(tern_memory *m)
{
    pthread_rwlock_rdlock(&m->lock);
    char *json = tern_strdup(m->local_json);
    pthread_rwlock_unlock(&m->lock);
    return json;
}

int tern_memory_published(tern_memory *m)
{
    pthread_rwlock_rdlock(&m->lock);
    int yes = m->local_json != NULL;
    pthread_rwlock_unlock(&m->lock);
    return yes;
}

void tern_memory_rdlock(tern_memory *m) { pthread_rwlock_rdlock(&m->lock); }
void tern_memory_unlock(tern_memory *m) { pthread_rwlock_unlock(&m->lock); }

/* ---- registration ------------------------------------------------------------ */

static void mr_release(tern_memory *e, tern_membuf *m, size_t upto)
{
    for (size_t t = 0; t < upto; t++)
        if (m->mr[t])
            e->xports[t].ops->mr_deregister(e->xports[t].pl->ctx, m->mr[t]);
}

static int mr_acquire(tern_memory *e, tern_membuf *m, char *err, size_t errlen)
{
    for (size_t t = 0; t < e->nxports; t++) {
        tern_xport *x = &e->xports[t];
        char msg[512] = "";
        int rc = x->ops->mr_register(x->pl->ctx, (void *)(uintptr_t)m->addr, m->len,
                                     &m->keys[t], &m->mr[t], msg, sizeof msg);
        if (rc && m->gpu >= 0 && !(x->ops->caps & TERN_CAP_GPU_DIRECT)) {
            /* The core stages this buffer for x (docs/gpu.md): x never sees it. */
            m->mr[t] = NULL;
            memset(&m->keys[t], 0, sizeof m->keys[t]);
            continue;
        }
        if (rc) {
            mr_release(e, m, t);
            return tern_errf(err, errlen, rc, "register [0x%llx, +%llu) with transport %s: %s",
                             (unsigned long long)m->addr, (unsigned long long)m->len,
                             x->pl->name, msg[0] ? tern_xport_msg(x, msg) : tern_strerror(rc));
        }
    }
    return 0;
}

static int check_new_range(tern_memory *e, uint64_t a, uint64_t len, char *err, size_t errlen)
{
    size_t i = upper_bound(e, a + len - 1);
    if (i == 0)
        return 0;
    const tern_membuf *b = &e->bufs[i - 1];
    if (b->addr + b->len <= a)
        return 0;
    return tern_errf(err, errlen, TERN_ERR_EXISTS,
                     "register [0x%llx, 0x%llx): overlaps the registered [0x%llx, 0x%llx)",
                     (unsigned long long)a, (unsigned long long)(a + len),
                     (unsigned long long)b->addr, (unsigned long long)(b->addr + b->len));
}

static int bufs_insert(tern_memory *e, const tern_membuf *m)
{
    if (e->nbufs == e->capbufs) {
        size_t cap = e->capbufs ? e->capbufs * 2 : 16;
        tern_membuf *nb = realloc(e->bufs, cap * sizeof *nb);
        if (!nb)
            return TERN_ERR_NOMEM;
        e->bufs = nb;
        e->capbufs = cap;
    }
    size_t i = upper_bound(e, m->addr);
    memmove(&e->bufs[i + 1], &e->bufs[i], (e->nbufs - i) * sizeof *m);
    e->bufs[i] = *m;
    e->nbufs++;
    return 0;
}

static void bufs_remove(tern_memory *e, size_t i)
{
    memmove(&e->bufs[i], &e->bufs[i + 1], (e->nbufs - i - 1) * sizeof e->bufs[0]);
    e->nbufs--;
}

/* First memory of GPU gpu: each transport's device closest to it, for
 * path choice (lock held exclusive). */
static void gpu_near_locked(tern_memory *e, int gpu)
{
    char pci[64] = "";
    if (gpu < 0 || gpu >= TERN_GPU_NEAR_MAX ||
        tern_cuda_pci_bus_id(e->cuda, gpu, pci, sizeof pci) != 0)
        return;
    for (size_t t = 0; t < e->nxports; t++) {
        tern_xport *x = &e->xports[t];
        if (x->gpu_near_known[gpu])
            continue;
        tern_gpu_nearest(e->sysfs_root, pci, x->pl->devices, x->pl->ndevices,
                         x->gpu_near[gpu], sizeof x->gpu_near[gpu]);
        x->gpu_near_known[gpu] = 1;
    }
}

/* Insert m (ranges checked, transports registered); no publish. */
static int insert_locked(tern_memory *e, tern_membuf *m, char *err, size_t errlen)
{
    int rc = check_new_range(e, m->addr, m->len, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; m->name[0] && i < e->nbufs; i++)
        if (strcmp(e->bufs[i].name, m->name) == 0)
            return tern_errf(err, errlen, TERN_ERR_EXISTS,
                             "register: the name \"%s\" is already registered at 0x%llx",
                             m->name, (unsigned long long)e->bufs[i].addr);
    if (e->nbufs >= TERN_DESC_MAX_BUFFERS)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register: already %d buffers registered",
                         TERN_DESC_MAX_BUFFERS);
    if ((rc = mr_acquire(e, m, err, errlen)) != 0)
        return rc;
    if (m->gpu >= 0)
        gpu_near_locked(e, m->gpu);
    if (bufs_insert(e, m) != 0) {
        mr_release(e, m, e->nxports);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "register: out of memory");
    }
    return 0;
}

/* Remove the buffer at a, releasing its transport registrations. */
static void remove_at_locked(tern_memory *e, uint64_t a)
{
    size_t i = upper_bound(e, a);
    if (i == 0 || e->bufs[i - 1].addr != a)
        return;
    tern_membuf m = e->bufs[i - 1];
    bufs_remove(e, i - 1);
    mr_release(e, &m, e->nxports);
}

/* A name peers can look up: short, printable, no quoting surprises. */
static int check_name(const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);
    if (n >= TERN_BUFFER_NAME_MAX)
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "register: name of %zu bytes, at most %d", n, TERN_BUFFER_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!isalnum(c) && !strchr("._/:-", c))
            return tern_errf(err, errlen, TERN_ERR_INVAL,
                             "register: name \"%s\": byte %zu (0x%02x) is not one of "
                             "[A-Za-z0-9._/:-]", name, i, c);
    }
    return 0;
}

/* A location given for host memory: "cpu:N", or "*" / "" to detect it. */
static int check_location(const char *loc, char *err, size_t errlen)
{
    if (!loc || !*loc || strcmp(loc, "*") == 0)
        return 0;
    const char *p = loc + 4;
    if (strncmp(loc, "cpu:", 4) == 0 && *p) {
        while (isdigit((unsigned char)*p))
            p++;
        if (!*p && strlen(loc) < TERN_LOCATION_MAX)
            return 0;
    }
    return tern_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                     "register: location \"%s\" is not memory this engine can use: host "
                     "memory is \"cpu:N\" (or \"*\" / NULL to detect its NUMA node), GPU "
                     "memory \"cuda:N\" (docs/gpu.md); other device kinds are not supported",
                     loc);
}

/* "cuda:N" -> N, else -1. */
static int gpu_location(const char *loc)
{
    if (!loc || strncmp(loc, "cuda:", 5) != 0 || !loc[5])
        return -1;
    int n = 0;
    for (const char *p = loc + 5; *p; p++) {
        if (*p < '0' || *p > '9' || n > 100000)
            return -2;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* What the pointer is decides the location (see docs/gpu.md, Registration):
 * device memory is "cuda:N" whatever the caller says, and a location that
 * contradicts the pointer is refused rather than published wrong. */
static int memory_resolve_location(tern_memory *e, tern_membuf *m, const char *location,
                                   char *err, size_t errlen)
{
    const void *p = (const void *)(uintptr_t)m->addr;
    int given = location && *location && strcmp(location, "*") != 0;
    int want = given ? gpu_location(location) : -1;
    if (want == -2)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register %p: location '%s' is not "
                         "cuda:N (N a GPU ordinal)", p, location);
    int rc0 = want == -1 ? check_location(location, err, errlen) : 0;
    if (rc0)
        return rc0;
    int dev = -1, last = -1;
    char why[512] = "";
    int rc = tern_cuda_pointer_device(e->cuda, p, &dev);
    if (rc == TERN_ERR_NOT_SUPPORTED) {
        if (want >= 0) {
            tern_cuda_load(e->cuda, why, sizeof why);
            return tern_errf(err, errlen, TERN_ERR_NOT_SUPPORTED, "register %p: location '%s' "
                             "names GPU memory, which needs the CUDA driver: %s", p,
                             location, why);
        }
        rc = 0;
    }
    if (rc == 1 && (tern_cuda_pointer_device(e->cuda, (const char *)p + m->len - 1, &last) != 1 ||
                    last != dev))
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register [%p, +%llu): the range "
                         "leaves the memory of GPU %d (a range must lie in one device "
                         "allocation)", p, (unsigned long long)m->len, dev);
    if (rc < 0)
        return tern_errf(err, errlen, rc, "register %p: the CUDA driver knows the pointer "
                         "but names no GPU for it", p);
    m->gpu = rc == 1 ? dev : -1;
    if (m->gpu >= 0 && given && want != m->gpu)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register %p: location '%s' "
                         "contradicts the pointer, which is memory of GPU %d (cuda:%d); pass "
                         "cuda:%d or \"*\"", p, location, dev, dev, dev);
    if (m->gpu < 0 && want >= 0)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register %p: location '%s' "
                         "contradicts the pointer, which is host memory, not memory of GPU "
                         "%d; pass cpu:N or \"*\"", p, location, want);
    if (m->gpu >= 0)
        snprintf(m->location, sizeof m->location, "cuda:%d", m->gpu);
    else if (given)
        tern_strlcpy(m->location, location, sizeof m->location);
    else
        tern_memory_location(p, m->location, sizeof m->location);
    return 0;
}


static int fill_membuf(tern_memory *e, const tern_memory_region *r, tern_membuf *m, char *err,
                       size_t errlen)
{
    if (!r->addr || !r->length)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register: %s",
                         !r->addr ? "address is NULL" : "length is 0");
    uint64_t a = (uintptr_t)r->addr;
    if (r->length > UINT64_MAX - a)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register: 0x%llx + %zu overflows",
                         (unsigned long long)a, r->length);
    int rc = r->name ? check_name(r->name, err, errlen) : 0;
    if (rc)
        return rc;
    memset(m, 0, sizeof *m);
    m->addr = a;
    m->len = r->length;
    if (r->name)
        tern_strlcpy(m->name, r->name, sizeof m->name);
    return memory_resolve_location(e, m, r->location, err, errlen);
}

int tern_memory_register_many(tern_memory *e, const tern_memory_region *r, size_t n,
                              char *err, size_t errlen)
{
    if (!r || !n)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "register: %s",
                         !r ? "regions is NULL" : "no regions");
    tern_membuf *m = calloc(1, sizeof *m);
    if (!m)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "register: out of memory");
    char msg[1024] = "";
    int rc = 0;
    size_t done = 0;
    pthread_rwlock_wrlock(&e->lock);
    for (; done < n && rc == 0; done++) {
        rc = fill_membuf(e, &r[done], m, msg, sizeof msg);
        if (!rc)
            rc = insert_locked(e, m, msg, sizeof msg);
    }
    if (rc) {
        done--; /* region `done` failed: undo those before it */
        if (n > 1)
            tern_errf(err, errlen, rc, "region %zu of %zu: %s", done, n, msg);
        else
            tern_errf(err, errlen, rc, "%s", msg);
    } else if ((rc = publish_locked(e, 1, msg, sizeof msg)) != 0) {
        tern_errf(err, errlen, rc, "register: publishing the descriptor failed: %s", msg);
    }
    if (rc) /* keep registration and descriptor in step */
        for (size_t i = 0; i < done; i++)
            remove_at_locked(e, (uintptr_t)r[i].addr);
    pthread_rwlock_unlock(&e->lock);
    free(m);
    if (!rc) /* a healthy store has it when we return; a slow one later */
        tern_metadata_publish_wait(e->md, MEM_PUBLISH_WAIT_MS);
    return rc;
}

int tern_memory_gpu_at(tern_memory *e, uint64_t addr)
{
    pthread_rwlock_rdlock(&e->lock);
    const tern_membuf *b = tern_memory_find_locked(e, addr);
    int gpu = b ? b->gpu : -2;
    pthread_rwlock_unlock(&e->lock);
    return gpu;
}

int tern_memory_register(tern_memory *e, void *addr, size_t len, const char *location,
                         char *err, size_t errlen)
{
    tern_memory_region r = {addr, len, location, NULL};
    return tern_memory_register_many(e, &r, 1, err, errlen);
}

int tern_memory_unregister_many(tern_memory *e, void *const *addrs, size_t n, char *err,
                                size_t errlen)
{
    if (!addrs || !n)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "unregister: no addresses");
    int rc = 0;
    size_t removed = 0;
    pthread_rwlock_wrlock(&e->lock);
    for (size_t k = 0; k < n && !rc; k++) {
        uint64_t a = (uintptr_t)addrs[k];
        size_t i = upper_bound(e, a);
        if (i == 0 || e->bufs[i - 1].addr != a) {
            rc = tern_errf(err, errlen, TERN_ERR_NOT_FOUND,
                           "unregister: no buffer registered at %p%s", addrs[k],
                           n > 1 ? " (the addresses before it were unregistered)" : "");
            break;
        }
        remove_at_locked(e, a);
        removed++;
    }
    char msg[1024] = "";
    int prc = removed ? publish_locked(e, 1, msg, sizeof msg) : 0;
    pthread_rwlock_unlock(&e->lock);
    if (removed && !prc)
        tern_metadata_publish_wait(e->md, MEM_PUBLISH_WAIT_MS);
    if (prc && !rc)
        return tern_errf(err, errlen, prc, "unregister: publishing the descriptor failed: %s",
                         msg);
    return rc;
}

int tern_memory_unregister(tern_memory *e, void *addr, char *err, size_t errlen)
{
    return tern_memory_unregister_many(e, &addr, 1, err, errlen);
}

size_t tern_memory_list(tern_memory *e, tern_buffer_info *out, size_t max)
{
    pthread_rwlock_rdlock(&e->lock);
    size_t n = e->nbufs;
    for (size_t i = 0; i < n && i < max; i++) {
        memset(&out[i], 0, sizeof out[i]);
        tern_strlcpy(out[i].name, e->bufs[i].name, sizeof out[i].name);
        tern_strlcpy(out[i].location, e->bufs[i].location, sizeof out[i].location);
        out[i].addr = e->bufs[i].addr;
        out[i].length = e->bufs[i].len;
    }
    pthread_rwlock_unlock(&e->lock);
    return n;
}

void tern_memory_init(tern_memory *m, tern_cuda *cuda)
{
    m->cuda = cuda;
    pthread_rwlock_init(&m->lock, NULL);
}

void tern_memory_bind(tern_memory *m, tern_xport *xports, size_t nxports, tern_metadata *md,
                      const char *server_name)
{
    m->xports = xports;
    m->nxports = nxports;
    m->md = md;
    m->server_name = server_name;
}

void tern_memory_fini(tern_memory *e)
{
    for (size_t i = 0; i < e->nbufs; i++)
        mr_release(e, &e->bufs[i], e->nxports);
    free(e->bufs);
    e->bufs = NULL;
    e->nbufs = e->capbufs = 0;
    free(e->local_json);
    tern_segment_desc_free(e->local_desc);
    e->local_json = NULL;
    e->local_desc = NULL;
    pthread_rwlock_destroy(&e->lock);
}
