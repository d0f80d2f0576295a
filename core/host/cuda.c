/* core/host/cuda.c: the CUDA driver API through dlopen (see cuda.h and
 * docs/gpu.md).  The entry points are declared here with the driver's
 * public signatures (CUdeviceptr is a 64-bit integer, handles are
 * pointers, CUresult an int), looked up by their versioned names. */
#include "host/cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern/errors.h"
#include "base/util.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

/* Values from the driver API's public headers. */
enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMHOSTALLOC_PORTABLE = 1,
    CU_STREAM_NON_BLOCKING = 1,
    CU_EVENT_DISABLE_TIMING = 2,
    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1,
    CUDA_ERROR_NOT_READY = 600,
    TERN_CUDA_MAX_GPUS = 64,
};

typedef struct cuda_api {
    CUresult (*Init)(unsigned);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventDestroy)(CUevent);
    /* optional (NULL on older drivers) */
    CUresult (*MemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int,
                                            unsigned long long);
} cuda_api;

struct tern_cuda {
    pthread_mutex_t lock;     /* the one-time load */
    int state;                /* 0 not tried, 1 loaded, <0 failed (code) */
    char why[512];            /* the failure's reason */
    void *dl;
    cuda_api f;
    pthread_mutex_t ctx_lock; /* primary contexts, retained on first use */
    CUcontext ctx[TERN_CUDA_MAX_GPUS];
};

struct tern_cuda_stream {
    tern_cuda *c;
    CUcontext ctx;
    CUstream st;
};

const char *tern_cuda_library(void)
{
    const char *p = getenv("TERN_CUDA_LIBRARY");
    return p && *p ? p : "libcuda.so.1";
}

tern_cuda *tern_cuda_create(void)
{
    tern_cuda *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->ctx_lock, NULL);
    return c;
}

void tern_cuda_destroy(tern_cuda *c)
{
    if (!c)
        return;
    if (c->state == 1) {
        for (int i = 0; i < TERN_CUDA_MAX_GPUS; i++)
            if (c->ctx[i])
                c->f.DevicePrimaryCtxRelease(i);
    }
    /* The library stays mapped: the driver keeps threads of its own that a
     * dlclose() would pull the code from under. */
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->ctx_lock);
    free(c);
}

static const char *cu_str(const tern_cuda *c, CUresult r)
{
    const char *s = NULL;
    if (c->f.GetErrorString && c->f.GetErrorString(r, &s) == 0 && s)
        return s;
    return "unknown CUDA error";
}

#define SYM(field, name, must)                                                         \
    do {                                                                               \
        *(void **)&c->f.field = dlsym(c->dl, name);                                    \
        if (!c->f.field && (must)) {                                                   \
            snprintf(c->why, sizeof c->why, "%s has no entry point %s (driver too old?)", \
                     lib, name);                                                       \
            return TERN_ERR_NOT_SUPPORTED;                                             \
        }                                                                              \
    } while (0)

static int cuda_resolve(tern_cuda *c, const char *lib)
{
    SYM(Init, "cuInit", 1);
    SYM(GetErrorString, "cuGetErrorString", 1);
    SYM(DeviceGetCount, "cuDeviceGetCount", 1);
    SYM(DeviceGet, "cuDeviceGet", 1);
    SYM(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", 1);
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1);
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1);
    SYM(CtxSetCurrent, "cuCtxSetCurrent", 1);
    SYM(PointerGetAttribute, "cuPointerGetAttribute", 1);
    SYM(MemAlloc, "cuMemAlloc_v2", 1);
    SYM(MemFree, "cuMemFree_v2", 1);
    SYM(MemHostAlloc, "cuMemHostAlloc", 1);
    SYM(MemFreeHost, "cuMemFreeHost", 1);
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2", 1);
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2", 1);
    SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 1);
    SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 1);
    SYM(StreamCreate, "cuStreamCreate", 1);
    SYM(StreamDestroy, "cuStreamDestroy_v2", 1);
    SYM(EventCreate, "cuEventCreate", 1);
    SYM(EventRecord, "cuEventRecord", 1);
    SYM(EventSynchronize, "cuEventSynchronize", 1);
    SYM(EventDestroy, "cuEventDestroy_v2", 1);
    SYM(MemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", 0);
    return 0;
}

static int cuda_open(tern_cuda *c)
{
    const char *lib = tern_cuda_library();
    c->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!c->dl) {
        const char *e = dlerror();
        snprintf(c->why, sizeof c->why,
                 "no CUDA driver: loading %s failed (%s); install the NVIDIA driver or set "
                 "TERN_CUDA_LIBRARY", lib, e ? e : "unknown reason");
        return TERN_ERR_NOT_SUPPORTED;
    }
    int rc = cuda_resolve(c, lib);
    if (rc)
        return rc;
    CUresult r = c->f.Init(0);
    if (r != 0) {
        snprintf(c->why, sizeof c->why, "CUDA driver %s: cuInit failed: %s (error %d)", lib,
                 cu_str(c, r), r);
        return TERN_ERR_NOT_SUPPORTED;
    }
    return 0;
}

int tern_cuda_load(tern_cuda *c, char *err, size_t errlen)
{
    if (!c)
        return tern_errf(err, errlen, TERN_ERR_NOT_SUPPORTED, "no CUDA driver object");
    pthread_mutex_lock(&c->lock);
    if (c->state == 0) {
        int rc = cuda_open(c);
        c->state = rc ? rc : 1;
    }
    int st = c->state;
    pthread_mutex_unlock(&c->lock);
    if (st == 1)
        return 0;
    return tern_errf(err, errlen, st, "%s", c->why);
}

/* The GPU's primary context, current on this thread. */
static int cuda_ctx(tern_cuda *c, int ordinal, CUcontext *out, char *err, size_t errlen)
{
    int rc = tern_cuda_load(c, err, errlen);
    if (rc)
        return rc;
    if (ordinal < 0 || ordinal >= TERN_CUDA_MAX_GPUS || ordinal >= tern_cuda_device_count(c))
        return tern_errf(err, errlen, TERN_ERR_INVAL, "no GPU %d (%d found by %s)", ordinal,
                         tern_cuda_device_count(c), tern_cuda_library());
    pthread_mutex_lock(&c->ctx_lock);
    CUresult r = 0;
    if (!c->ctx[ordinal]) {
        CUdevice dev = 0;
        r = c->f.DeviceGet(&dev, ordinal);
        if (r == 0)
            r = c->f.DevicePrimaryCtxRetain(&c->ctx[ordinal], dev);
    }
    CUcontext ctx = c->ctx[ordinal];
    pthread_mutex_unlock(&c->ctx_lock);
    if (r == 0)
        r = c->f.CtxSetCurrent(ctx);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_DEVICE, "GPU %d: no context: %s", ordinal,
                         cu_str(c, r));
    *out = ctx;
    return 0;
}

int tern_cuda_pointer_device(tern_cuda *c, const void *p, int *ordinal)
{
    int rc = tern_cuda_load(c, NULL, 0);
    if (rc)
        return rc;
    unsigned int type = 0;
    /* Memory the driver does not know answers an error: host memory. */
    if (c->f.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 (CUdeviceptr)(uintptr_t)p) != 0 ||
        type != CU_MEMORYTYPE_DEVICE)
        return 0;
    int dev = -1;
    if (c->f.PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 (CUdeviceptr)(uintptr_t)p) != 0 || dev < 0)
        return TERN_ERR_DEVICE;
    *ordinal = dev;
    return 1;
}

int tern_cuda_device_count(tern_cuda *c)
{
    int n = 0;
    if (tern_cuda_load(c, NULL, 0) != 0 || c->f.DeviceGetCount(&n) != 0)
        return 0;
    return n;
}

int tern_cuda_pci_bus_id(tern_cuda *c, int ordinal, char *out, size_t outlen)
{
    int rc = tern_cuda_load(c, NULL, 0);
    if (rc)
        return rc;
    CUdevice dev = 0;
    char id[64] = "";
    if (c->f.DeviceGet(&dev, ordinal) != 0 || c->f.DeviceGetPCIBusId(id, sizeof id, dev) != 0)
        return TERN_ERR_NOT_FOUND;
    for (char *s = id; *s; s++)
        if (*s >= 'A' && *s <= 'F')
            *s = (char)(*s - 'A' + 'a');
    /* The driver writes "0000:3B:00.0" (domain of 4 or 8 digits); sysfs
     * names the device with a 4-digit domain. */
    const char *colon = strchr(id, ':');
    if (colon && colon - id > 4)
        memmove(id, colon - 4, strlen(colon - 4) + 1);
    tern_strlcpy(out, id, outlen);
    return 0;
}

int tern_cuda_alloc(tern_cuda *c, int ordinal, size_t len, void **out, char *err, size_t errlen)
{
    CUcontext ctx;
    int rc = cuda_ctx(c, ordinal, &ctx, err, errlen);
    if (rc)
        return rc;
    CUdeviceptr d = 0;
    CUresult r = c->f.MemAlloc(&d, len);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "GPU %d: cuMemAlloc(%zu) failed: %s",
                         ordinal, len, cu_str(c, r));
    *out = (void *)(uintptr_t)d;
    return 0;
}

void tern_cuda_free(tern_cuda *c, int ordinal, void *p)
{
    CUcontext ctx;
    if (p && cuda_ctx(c, ordinal, &ctx, NULL, 0) == 0)
        c->f.MemFree((CUdeviceptr)(uintptr_t)p);
}

int tern_cuda_copy_to_host(tern_cuda *c, int ordinal, void *dst, const void *src, size_t len,
                           char *err, size_t errlen)
{
    CUcontext ctx;
    int rc = cuda_ctx(c, ordinal, &ctx, err, errlen);
    if (rc)
        return rc;
    CUresult r = c->f.MemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, len);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_DEVICE, "GPU %d: copy of %zu bytes to host "
                         "failed: %s", ordinal, len, cu_str(c, r));
    return 0;
}

int tern_cuda_copy_to_device(tern_cuda *c, int ordinal, void *dst, const void *src,
                             size_t len, char *err, size_t errlen)
{
    CUcontext ctx;
    int rc = cuda_ctx(c, ordinal, &ctx, err, errlen);
    if (rc)
        return rc;
    CUresult r = c->f.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, len);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_DEVICE, "GPU %d: copy of %zu bytes to the "
                         "device failed: %s", ordinal, len, cu_str(c, r));
    return 0;
}

int tern_cuda_copy(tern_cuda *c, void *dst, const void *src, size_t len, char *err,
                   size_t errlen)
{
    int ddev = -1, sdev = -1;
    int dr = tern_cuda_pointer_device(c, dst, &ddev);
    int sr = tern_cuda_pointer_device(c, src, &sdev);
    if (dr < 0 || sr < 0) {
        int rc = tern_cuda_load(c, err, errlen);
        return rc ? rc : tern_errf(err, errlen, TERN_ERR_DEVICE, "the CUDA driver knows "
                                   "%p or %p but names no GPU for it", dst, src);
    }
    if (dr == 1 && sr == 1) { /* device to device through the host */
        void *tmp = malloc(len ? len : 1);
        if (!tmp)
            return tern_errf(err, errlen, TERN_ERR_NOMEM, "GPU copy: out of memory");
        int rc = tern_cuda_copy_to_host(c, sdev, tmp, src, len, err, errlen);
        if (!rc)
            rc = tern_cuda_copy_to_device(c, ddev, dst, tmp, len, err, errlen);
        free(tmp);
        return rc;
    }
    if (dr == 1)
        return tern_cuda_copy_to_device(c, ddev, dst, src, len, err, errlen);
    if (sr == 1)
        return tern_cuda_copy_to_host(c, sdev, dst, src, len, err, errlen);
    return tern_errf(err, errlen, TERN_ERR_INVAL, "GPU copy: neither %p nor %p is GPU memory",
                     dst, src);
}

int tern_cuda_stream_create(tern_cuda *c, int ordinal, tern_cuda_stream **out, char *err,
                            size_t errlen)
{
    CUcontext ctx;
    int rc = cuda_ctx(c, ordinal, &ctx, err, errlen);
    if (rc)
        return rc;
    tern_cuda_stream *s = calloc(1, sizeof *s);
    if (!s)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "GPU %d: out of memory", ordinal);
    CUresult r = c->f.StreamCreate(&s->st, CU_STREAM_NON_BLOCKING);
    if (r) {
        free(s);
        return tern_errf(err, errlen, TERN_ERR_DEVICE, "GPU %d: cuStreamCreate failed: %s",
                         ordinal, cu_str(c, r));
    }
    s->c = c;
    s->ctx = ctx;
    *out = s;
    return 0;
}

void tern_cuda_stream_destroy(tern_cuda_stream *s)
{
    if (!s)
        return;
    s->c->f.CtxSetCurrent(s->ctx);
    s->c->f.StreamDestroy(s->st);
    free(s);
}

int tern_cuda_copy_async(tern_cuda_stream *s, int to_device, void *dst, const void *src,
                         size_t len, void **ev, char *err, size_t errlen)
{
    tern_cuda *c = s->c;
    CUevent e = NULL;
    CUresult r = c->f.CtxSetCurrent(s->ctx);
    if (r == 0)
        r = to_device ? c->f.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, len, s->st)
                      : c->f.MemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, len, s->st);
    if (r == 0)
        r = c->f.EventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r == 0 && (r = c->f.EventRecord(e, s->st)) != 0)
        c->f.EventDestroy(e);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_DEVICE, "%s copy of %zu bytes failed to start: "
                         "%s", to_device ? "host-to-GPU" : "GPU-to-host", len, cu_str(c, r));
    *ev = e;
    return 0;
}

int tern_cuda_event_wait(tern_cuda_stream *s, void *ev, char *err, size_t errlen)
{
    tern_cuda *c = s->c;
    c->f.CtxSetCurrent(s->ctx);
    CUresult r = c->f.EventSynchronize((CUevent)ev);
    c->f.EventDestroy((CUevent)ev);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_DEVICE, "GPU copy failed: %s (error %d)",
                         cu_str(c, r), r);
    return 0;
}

int tern_cuda_host_alloc(tern_cuda *c, int ordinal, size_t len, void **out, char *err,
                         size_t errlen)
{
    CUcontext ctx;
    int rc = cuda_ctx(c, ordinal, &ctx, err, errlen);
    if (rc)
        return rc;
    CUresult r = c->f.MemHostAlloc(out, len, CU_MEMHOSTALLOC_PORTABLE);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "pinned host buffer of %zu bytes for "
                         "GPU %d: cuMemHostAlloc failed: %s", len, ordinal, cu_str(c, r));
    return 0;
}

void tern_cuda_host_free(tern_cuda *c, void *p)
{
    if (p && c && c->state == 1)
        c->f.MemFreeHost(p);
}

int tern_cuda_dmabuf_fd(tern_cuda *c, const void *p, size_t len, int *fd, char *err,
                        size_t errlen)
{
    int rc = tern_cuda_load(c, err, errlen);
    if (rc)
        return rc;
    if (!c->f.MemGetHandleForAddressRange)
        return tern_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                         "the CUDA driver has no cuMemGetHandleForAddressRange (dma-buf)");
    int h = -1;
    CUresult r = c->f.MemGetHandleForAddressRange(&h, (CUdeviceptr)(uintptr_t)p, len,
                                                  CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r)
        return tern_errf(err, errlen, TERN_ERR_NOT_SUPPORTED, "dma-buf export of %zu bytes "
                         "failed: %s", len, cu_str(c, r));
    *fd = h;
    return 0;
}
