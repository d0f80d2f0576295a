/* core/host/cuda.h: the CUDA driver, loaded at run time (see docs/gpu.md).
 *
 * tern has no build-time CUDA dependency: the first call that needs the
 * driver dlopen()s it ($TERN_CUDA_LIBRARY, else "libcuda.so.1") and looks
 * up the few driver-API entry points declared in cuda.c.  Without a driver
 * every call answers TERN_ERR_NOT_SUPPORTED with the loader's reason, and
 * host memory works as before.
 *
 * One object per engine (no process-wide state); its lock guards only the
 * one-time load, after which the function table is read-only. */
#ifndef TERN_CORE_CUDA_H
#define TERN_CORE_CUDA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tern_cuda tern_cuda;

tern_cuda *tern_cuda_create(void);
void tern_cuda_destroy(tern_cuda *c);

/* Load the driver once (later calls return the first outcome).  0, or
 * TERN_ERR_NOT_SUPPORTED with the reason (library path, dlerror, missing
 * entry point, cuInit's error). */
int tern_cuda_load(tern_cuda *c, char *err, size_t errlen);
/* The library the engine loads or tried ("libcuda.so.1" or the override). */
const char *tern_cuda_library(void);

/* What a pointer is: 1 device memory of GPU *ordinal, 0 host memory (the
 * driver does not know it, or it is pinned/managed host memory),
 * TERN_ERR_NOT_SUPPORTED when no driver is loaded. */
int tern_cuda_pointer_device(tern_cuda *c, const void *p, int *ordinal);
/* Number of GPUs (0 without a driver). */
int tern_cuda_device_count(tern_cuda *c);
/* The GPU's PCI address "0000:3b:00.0" (lower case, as in sysfs). */
int tern_cuda_pci_bus_id(tern_cuda *c, int ordinal, char *out, size_t outlen);

/* ---- device buffers (tern-bench, tests) ---- */
int tern_cuda_alloc(tern_cuda *c, int ordinal, size_t len, void **out, char *err,
                    size_t errlen);
void tern_cuda_free(tern_cuda *c, int ordinal, void *p);
/* Synchronous copies (either side may be device memory). */
int tern_cuda_copy_to_host(tern_cuda *c, int ordinal, void *dst, const void *src, size_t len,
                           char *err, size_t errlen);
int tern_cuda_copy_to_device(tern_cuda *c, int ordinal, void *dst, const void *src,
                             size_t len, char *err, size_t errlen);

/* Either direction (or device to device through the host), from what the
 * pointers are; TERN_ERR_INVAL when neither is device memory. */
int tern_cuda_copy(tern_cuda *c, void *dst, const void *src, size_t len, char *err,
                   size_t errlen);

/* ---- asynchronous copies through a stream (the staging pipeline) ---- */
typedef struct tern_cuda_stream tern_cuda_stream;
int tern_cuda_stream_create(tern_cuda *c, int ordinal, tern_cuda_stream **out, char *err,
                            size_t errlen);
void tern_cuda_stream_destroy(tern_cuda_stream *s);
/* Enqueue a copy (dir 0: device -> host, 1: host -> device) and record an
 * event after it; *ev identifies the copy for tern_cuda_event_wait. */
int tern_cuda_copy_async(tern_cuda_stream *s, int to_device, void *dst, const void *src,
                         size_t len, void **ev, char *err, size_t errlen);
/* Wait for the copy behind ev and free the event: 0, or the copy's error. */
int tern_cuda_event_wait(tern_cuda_stream *s, void *ev, char *err, size_t errlen);

/* Pinned host memory for staging buffers. */
int tern_cuda_host_alloc(tern_cuda *c, int ordinal, size_t len, void **out, char *err,
                         size_t errlen);
void tern_cuda_host_free(tern_cuda *c, void *p);

/* A dma-buf file descriptor for [p, p+len) (for ibv_reg_dmabuf_mr), or
 * TERN_ERR_NOT_SUPPORTED when the driver cannot export one. */
int tern_cuda_dmabuf_fd(tern_cuda *c, const void *p, size_t len, int *fd, char *err,
                        size_t errlen);

#endif
