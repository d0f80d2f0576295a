/* transports/tcp/tcp_mr.c: the registered ranges, a sorted array under a
 * rwlock held only to look up or change it.  A transfer pins its range;
 * deregistration waits for the transfers on that range only, up to
 * unregister_wait_ms, then revokes the range so no further byte is moved
 * there (tcp_mr_io_begin / _end bracket each system call). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tcp_internal.h"

/* Index of the first range whose addr > a (binary search). */
static size_t mr_upper(const tcp_ctx *ctx, uint64_t a)
{
    size_t lo = 0, hi = ctx->nmr;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ctx->mrs[mid]->addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Caller holds mr_lock.  Overflow-safe. */
static tcp_mr *mr_find_locked(const tcp_ctx *ctx, uint64_t addr, uint64_t len)
{
    if (len == 0 || addr + len < addr)
        return NULL;
    size_t i = mr_upper(ctx, addr);
    if (i == 0)
        return NULL;
    tcp_mr *m = ctx->mrs[i - 1];
    uint64_t off = addr - m->addr;   /* addr >= m->addr here */
    if (off >= m->len || len > m->len - off)
        return NULL;
    return m;
}

tcp_mr *tcp_mr_pin(tcp_ctx *ctx, uint64_t addr, uint64_t len)
{
    pthread_rwlock_rdlock(&ctx->mr_lock);
    tcp_mr *m = mr_find_locked(ctx, addr, len);
    if (m)
        atomic_fetch_add(&m->refs, 1);
    pthread_rwlock_unlock(&ctx->mr_lock);
    return m;
}

void tcp_mr_unpin(tcp_mr *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        free(m);
}

/* With tcp_mr_deregister's store of `revoked` then load of `io`, either
 * the deregistration sees this call in progress and waits for it, or this
 * call sees the range revoked and moves nothing (sequentially consistent
 * atomics on both sides). */
int tcp_mr_io_begin(tcp_mr *m)
{
    atomic_fetch_add(&m->io, 1);
    if (atomic_load(&m->revoked)) {
        atomic_fetch_sub(&m->io, 1);
        return -1;
    }
    return 0;
}

void tcp_mr_io_end(tcp_mr *m)
{
    atomic_fetch_sub(&m->io, 1);
}

int tcp_mr_register(void *vctx, void *addr, size_t len, tern_mr_keys *keys,
                           void **mr, char *err, size_t errlen)
{
    tcp_ctx *ctx = vctx;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (!ctx || !addr || !len || !mr)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                        "tcp mr_register: NULL address or zero length (addr %p, len %zu)",
                        addr, len);
    if (a + len < a)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                        "tcp mr_register: [%p, +%zu) wraps around the address space", addr, len);
    tcp_mr *m = calloc(1, sizeof *m);
    if (!m)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp mr_register: out of memory");
    m->addr = a;
    m->len = len;
    /* Device memory is reached through a bounce buffer (tcp_server.c). */
    m->gpu = TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, mem_copy) &&
                     ctx->host.mem_gpu && ctx->host.mem_copy
                 ? ctx->host.mem_gpu(ctx->host.host, addr) : -1;
    atomic_init(&m->refs, 1); /* the table's */
    pthread_rwlock_wrlock(&ctx->mr_lock);
    size_t i = mr_upper(ctx, a);
    int overlap = (i > 0 && ctx->mrs[i - 1]->addr + ctx->mrs[i - 1]->len > a) ||
                  (i < ctx->nmr && ctx->mrs[i]->addr < a + len);
    if (overlap) {
        const tcp_mr *o = (i > 0 && ctx->mrs[i - 1]->addr + ctx->mrs[i - 1]->len > a)
                              ? ctx->mrs[i - 1] : ctx->mrs[i];
        uint64_t oa = o->addr, ol = o->len;
        pthread_rwlock_unlock(&ctx->mr_lock);
        free(m);
        return tern_kit_errf(err, errlen, TERN_ERR_EXISTS,
                        "tcp mr_register: [0x%" PRIx64 ", +%zu) overlaps registered "
                        "[0x%" PRIx64 ", +%" PRIu64 ")", a, len, oa, ol);
    }
    if (ctx->nmr == ctx->capmr) {
        size_t nc = ctx->capmr ? ctx->capmr * 2 : 16;
        tcp_mr **nm = realloc(ctx->mrs, nc * sizeof *nm);
        if (!nm) {
            pthread_rwlock_unlock(&ctx->mr_lock);
            free(m);
            return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp mr_register: out of memory");
        }
        ctx->mrs = nm;
        ctx->capmr = nc;
    }
    memmove(&ctx->mrs[i + 1], &ctx->mrs[i], (ctx->nmr - i) * sizeof *ctx->mrs);
    ctx->mrs[i] = m;
    ctx->nmr++;
    m->key = ctx->next_key++;
    pthread_rwlock_unlock(&ctx->mr_lock);
    if (keys) { /* informative only: TCP has no keys; one per device for the core */
        memset(keys, 0, sizeof *keys);
        keys->ndev = ctx->nnics;
        for (int d = 0; d < ctx->nnics; d++)
            keys->lkey[d] = keys->rkey[d] = m->key;
    }
    *mr = m;
    return 0;
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

int tcp_mr_deregister(void *vctx, void *vmr)
{
    tcp_ctx *ctx = vctx;
    tcp_mr *m = vmr;
    if (!ctx || !m)
        return TERN_ERR_INVAL;
    pthread_rwlock_wrlock(&ctx->mr_lock);
    size_t i;
    for (i = 0; i < ctx->nmr && ctx->mrs[i] != m; i++)
        ;
    if (i == ctx->nmr) {
        pthread_rwlock_unlock(&ctx->mr_lock);
        return TERN_ERR_NOT_FOUND;
    }
    memmove(&ctx->mrs[i], &ctx->mrs[i + 1], (ctx->nmr - i - 1) * sizeof *ctx->mrs);
    ctx->nmr--;
    pthread_rwlock_unlock(&ctx->mr_lock);
    /* No new transfer finds the range now.  Those under way on it finish,
     * up to unregister_wait_ms; then the rest are revoked. */
    uint64_t end = tern_kit_now_ms() + (uint64_t)ctx->opt_unregister_wait_ms;
    while (atomic_load(&m->refs) > 1 && tern_kit_now_ms() < end)
        sleep_us(200);
    if (atomic_load(&m->refs) > 1)
        tcp_log(ctx, TERN_LOG_WARN,
                "deregistering [0x%" PRIx64 ", +%" PRIu64 "): %d transfer(s) on it did not "
                "finish within unregister_wait_ms (%d ms); they are cut off",
                m->addr, m->len, atomic_load(&m->refs) - 1, ctx->opt_unregister_wait_ms);
    atomic_store(&m->revoked, 1);
    while (atomic_load(&m->io) > 0) /* one non-blocking system call at most */
        sleep_us(20);
    tcp_mr_unpin(m);
    return 0;
}
