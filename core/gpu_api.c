/* core/gpu_api.c: the public GPU calls (tern.h), forwarded to the engine's
 * CUDA driver object (cuda.c).  Applications and tern-bench allocate device
 * memory here so they need no CUDA headers or libraries of their own. */
#include <stdlib.h>

#include "host/cuda.h"
#include "engine/engine_error.h"
#include "engine/engine_state.h"

TERN_EXPORT int tern_gpu_count(tern_engine *e)
{
    if (!e)
        return TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_cuda_load(e->cuda, msg, sizeof msg);
    return rc ? tern_engine_fail(e, rc, "%s", msg) : tern_cuda_device_count(e->cuda);
}

TERN_EXPORT int tern_gpu_alloc(tern_engine *e, int gpu, size_t len, void **out)
{
    if (!e || !out || !len)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "gpu_alloc: %s",
                                    !out ? "out is NULL" : "length is 0")
                 : TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_cuda_alloc(e->cuda, gpu, len, out, msg, sizeof msg);
    return rc ? tern_engine_fail(e, rc, "%s", msg) : 0;
}

TERN_EXPORT int tern_gpu_free(tern_engine *e, void *p)
{
    if (!e)
        return TERN_ERR_INVAL;
    int dev = -1;
    int rc = tern_cuda_pointer_device(e->cuda, p, &dev);
    if (rc != 1)
        return tern_engine_fail(e, rc < 0 ? rc : TERN_ERR_INVAL,
                                "gpu_free: %p is not GPU memory", p);
    tern_cuda_free(e->cuda, dev, p);
    return 0;
}

TERN_EXPORT int tern_gpu_copy(tern_engine *e, void *dst, const void *src, size_t len)
{
    if (!e || !dst || !src)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "gpu_copy: NULL address")
                 : TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_cuda_copy(e->cuda, dst, src, len, msg, sizeof msg);
    return rc ? tern_engine_fail(e, rc, "gpu_copy: %s", msg) : 0;
}
