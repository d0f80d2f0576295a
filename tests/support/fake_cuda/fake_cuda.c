/* tests/support/fake_cuda/fake_cuda.c: a stand-in for libcuda.so.1 so the GPU
 * code runs on machines without a GPU (loaded through TERN_CUDA_LIBRARY).
 *
 * It exports the driver-API entry points core/host/cuda.c looks up and
 * implements them over host memory:
 *  - a "device" allocation is a memfd mapped twice: the address handed out
 *    is mapped PROT_NONE, so any host access to device memory (a transport
 *    reading or writing it directly) faults or gets EFAULT, exactly as it
 *    would with a real GPU; the copies use the second, readable mapping;
 *  - asynchronous copies run on one worker thread per stream, in order,
 *    each after FAKE_CUDA_DELAY_US microseconds (default 0), so a caller
 *    that does not wait for its event reads stale bytes;
 *  - FAKE_CUDA_DEVICES (default 2) GPUs, with PCI addresses 0000:1N:00.0;
 *  - errors on demand: FAKE_CUDA_FAIL_INIT=1 makes cuInit fail;
 *    FAKE_CUDA_FAIL_COPY=N makes the N-th asynchronous copy (1-based,
 *    counted per process) fail at its event; FAKE_CUDA_FAIL_HOSTALLOC=1
 *    makes cuMemHostAlloc fail.
 * Counters for tests: fake_cuda_host_allocs(), fake_cuda_async_copies().
 * A test fake: its state is process-wide on purpose. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0, E_INVALID_VALUE = 1, E_OOM = 2, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101, E_INVALID_CONTEXT = 201, E_NOT_READY = 600,
    E_LAUNCH_FAILED = 700, E_NOT_SUPPORTED = 801,
};

typedef struct alloc {
    uintptr_t dev;   /* PROT_NONE view handed out */
    char *shadow;    /* the readable view */
    size_t len, maplen;
    int ordinal;
    struct alloc *next;
} alloc;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc *g_allocs;
static int g_init;
static atomic_long g_host_allocs, g_async_copies;
static __thread int t_ctx; /* current device + 1; 0: none */

EXPORT long fake_cuda_host_allocs(void) { return atomic_load(&g_host_allocs); }
EXPORT long fake_cuda_async_copies(void) { return atomic_load(&g_async_copies); }

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static int ndevices(void) { return (int)env_long("FAKE_CUDA_DEVICES", 2); }

/* Readable address of [p, p+len) in device memory, or NULL (lock taken). */
static char *shadow_of(uintptr_t p, size_t len, int *ordinal)
{
    char *s = NULL;
    pthread_mutex_lock(&g_lock);
    for (alloc *a = g_allocs; a; a = a->next)
        if (p >= a->dev && p - a->dev < a->len) {
            if (len <= a->len - (p - a->dev)) {
                s = a->shadow + (p - a->dev);
                if (ordinal)
                    *ordinal = a->ordinal;
            }
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return s;
}

EXPORT CUresult cuInit(unsigned flags)
{
    (void)flags;
    if (env_long("FAKE_CUDA_FAIL_INIT", 0))
        return E_NO_DEVICE;
    g_init = 1;
    return OK;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
    switch (r) {
    case OK: *s = "no error"; break;
    case E_INVALID_VALUE: *s = "invalid argument"; break;
    case E_OOM: *s = "out of memory"; break;
    case E_NO_DEVICE: *s = "no CUDA-capable device is detected"; break;
    case E_INVALID_DEVICE: *s = "invalid device ordinal"; break;
    case E_LAUNCH_FAILED: *s = "unspecified launch failure (injected by FAKE_CUDA_FAIL_COPY)"; break;
    case E_NOT_SUPPORTED: *s = "operation not supported"; break;
    default: *s = "unknown error"; return E_INVALID_VALUE;
    }
    return OK;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    *n = g_init ? ndevices() : 0;
    return g_init ? OK : E_NOT_INITIALIZED;
}

EXPORT CUresult cuDeviceGet(int *dev, int ordinal)
{
    if (ordinal < 0 || ordinal >= ndevices())
        return E_INVALID_DEVICE;
    *dev = ordinal;
    return OK;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *out, int len, int dev)
{
    if (dev < 0 || dev >= ndevices())
        return E_INVALID_DEVICE;
    snprintf(out, (size_t)len, "00000000:%02X:00.0", 0x10 + dev);
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    if (dev < 0 || dev >= ndevices())
        return E_INVALID_DEVICE;
    *ctx = (void *)(uintptr_t)(dev + 1);
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
    return dev >= 0 && dev < ndevices() ? OK : E_INVALID_DEVICE;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
    t_ctx = (int)(uintptr_t)ctx;
    return OK;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    int ordinal = -1;
    if (!g_init)
        return E_NOT_INITIALIZED;
    if (!shadow_of((uintptr_t)p, 1, &ordinal))
        return E_INVALID_VALUE; /* the driver does not know host memory */
    if (attr == 2) /* MEMORY_TYPE */
        *(unsigned *)data = 2; /* DEVICE */
    else if (attr == 9) /* DEVICE_ORDINAL */
        *(int *)data = ordinal;
    else
        return E_INVALID_VALUE;
    return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t len)
{
    if (!t_ctx)
        return E_INVALID_CONTEXT;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), maplen = (len + pg - 1) / pg * pg;
    int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)maplen) != 0) {
        if (fd >= 0)
            close(fd);
        return E_OOM;
    }
    void *dev = mmap(NULL, maplen, PROT_NONE, MAP_SHARED, fd, 0);
    void *sh = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    alloc *a = calloc(1, sizeof *a);
    if (dev == MAP_FAILED || sh == MAP_FAILED || !a) {
        if (dev != MAP_FAILED)
            munmap(dev, maplen);
        if (sh != MAP_FAILED)
            munmap(sh, maplen);
        free(a);
        return E_OOM;
    }
    a->dev = (uintptr_t)dev;
    a->shadow = sh;
    a->len = len;
    a->maplen = maplen;
    a->ordinal = t_ctx - 1;
    pthread_mutex_lock(&g_lock);
    a->next = g_allocs;
    g_allocs = a;
    pthread_mutex_unlock(&g_lock);
    *out = (CUdeviceptr)(uintptr_t)dev;
    return OK;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    pthread_mutex_lock(&g_lock);
    for (alloc **pp = &g_allocs; *pp; pp = &(*pp)->next)
        if ((*pp)->dev == (uintptr_t)p) {
            alloc *a = *pp;
            *pp = a->next;
            pthread_mutex_unlock(&g_lock);
            munmap((void *)a->dev, a->maplen);
            munmap(a->shadow, a->maplen);
            free(a);
            return OK;
        }
    pthread_mutex_unlock(&g_lock);
    return E_INVALID_VALUE;
}

EXPORT CUresult cuMemHostAlloc(void **out, size_t len, unsigned flags)
{
    (void)flags;
    if (env_long("FAKE_CUDA_FAIL_HOSTALLOC", 0))
        return E_OOM;
    *out = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
    if (!*out)
        return E_OOM;
    atomic_fetch_add(&g_host_allocs, 1);
    return OK;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    free(p);
    return OK;
}

/* dir 0: device -> host, 1: host -> device */
static CUresult copy_now(int dir, void *dst, const void *src, size_t len)
{
    char *s = shadow_of(dir ? (uintptr_t)dst : (uintptr_t)src, len, NULL);
    if (!s)
        return E_INVALID_VALUE;
    if (dir)
        memcpy(s, src, len);
    else
        memcpy(dst, s, len);
    return OK;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t len)
{
    return copy_now(0, dst, (const void *)(uintptr_t)src, len);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t len)
{
    return copy_now(1, (void *)(uintptr_t)dst, src, len);
}

/* ---- streams: one worker thread each, copies in order ---- */

typedef struct job {
    int dir;
    void *dst;
    const void *src;
    size_t len;
    uint64_t seq;
    int fail;
    struct job *next;
} job;

#define FAILED_RING 64
typedef struct stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    job *head, *tail;
    uint64_t queued, done;      /* copies queued and finished */
    uint64_t failed[FAILED_RING];
    int nfailed, stop;
    pthread_t thread;
} stream;

typedef struct event {
    stream *s;
    uint64_t seq;
} event;

static void *stream_main(void *arg)
{
    stream *s = arg;
    long delay = env_long("FAKE_CUDA_DELAY_US", 0);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (!s->head)
            break;
        job *j = s->head;
        pthread_mutex_unlock(&s->lock);
        if (delay > 0) {
            struct timespec ts = {delay / 1000000, (delay % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        int bad = j->fail || copy_now(j->dir, j->dst, j->src, j->len) != OK;
        pthread_mutex_lock(&s->lock);
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        if (bad)
            s->failed[s->nfailed++ % FAILED_RING] = j->seq;
        s->done = j->seq;
        free(j);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

EXPORT CUresult cuStreamCreate(void **out, unsigned flags)
{
    (void)flags;
    if (!t_ctx)
        return E_INVALID_CONTEXT;
    stream *s = calloc(1, sizeof *s);
    if (!s)
        return E_OOM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return E_OOM;
    }
    *out = s;
    return OK;
}

EXPORT CUresult cuStreamDestroy_v2(void *h)
{
    stream *s = h;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return OK;
}

static CUresult enqueue(stream *s, int dir, void *dst, const void *src, size_t len)
{
    if (!s)
        return E_INVALID_VALUE;
    if (!shadow_of(dir ? (uintptr_t)dst : (uintptr_t)src, len, NULL))
        return E_INVALID_VALUE;
    job *j = calloc(1, sizeof *j);
    if (!j)
        return E_OOM;
    long n = atomic_fetch_add(&g_async_copies, 1) + 1;
    j->dir = dir;
    j->dst = dst;
    j->src = src;
    j->len = len;
    j->fail = env_long("FAKE_CUDA_FAIL_COPY", 0) == n;
    pthread_mutex_lock(&s->lock);
    j->seq = ++s->queued;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return OK;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t len, void *st)
{
    return enqueue(st, 0, dst, (const void *)(uintptr_t)src, len);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t len, void *st)
{
    return enqueue(st, 1, (void *)(uintptr_t)dst, src, len);
}

EXPORT CUresult cuEventCreate(void **out, unsigned flags)
{
    (void)flags;
    event *e = calloc(1, sizeof *e);
    if (!e)
        return E_OOM;
    *out = e;
    return OK;
}

EXPORT CUresult cuEventRecord(void *h, void *st)
{
    event *e = h;
    stream *s = st;
    if (!e || !s)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&s->lock);
    e->s = s;
    e->seq = s->queued;
    pthread_mutex_unlock(&s->lock);
    return OK;
}

/* The event's copy failed when its sequence number is among the failed. */
EXPORT CUresult cuEventSynchronize(void *h)
{
    event *e = h;
    if (!e || !e->s)
        return OK;
    stream *s = e->s;
    pthread_mutex_lock(&s->lock);
    while (s->done < e->seq)
        pthread_cond_wait(&s->cond, &s->lock);
    CUresult r = OK;
    for (int i = 0; i < s->nfailed && i < FAILED_RING; i++)
        if (s->failed[i] == e->seq)
            r = E_LAUNCH_FAILED;
    pthread_mutex_unlock(&s->lock);
    return r;
}

EXPORT CUresult cuEventDestroy_v2(void *h)
{
    free(h);
    return OK;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t len, int type,
                                              unsigned long long flags)
{
    (void)handle, (void)p, (void)len, (void)type, (void)flags;
    return E_NOT_SUPPORTED; /* no dma-buf here: the staging path is what runs */
}
