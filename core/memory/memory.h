/* core/memory/memory.h: registered memory and the local segment descriptor.
 *
 * The object owns its lock: readers (the cut, path choice, the handshake
 * handler) take it shared; registering and unregistering take it exclusive
 * and republish the descriptor before they return, so a peer sees the
 * change on its next fetch.  Each publish carries a new generation (the
 * descriptor's "timestamp", strictly increasing; see docs/architecture.md,
 * Healing). */
#ifndef TERN_CORE_MEMORY_H
#define TERN_CORE_MEMORY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "host/cuda.h"
#include "desc/desc.h"
#include "desc/segment_desc.h"
#include "tern/tern.h"
#include "peer/metadata.h"
#include "plugin/xport.h"

/* One registered memory range. */
typedef struct tern_membuf {
    uint64_t addr, len;
    char location[TERN_LOCATION_MAX];
    int gpu;                      /* GPU ordinal of device memory, -1 for host */
    char name[128];               /* application name, "" if none */
    void *mr[TERN_DESC_MAX_TRANSPORTS];
    tern_mr_keys keys[TERN_DESC_MAX_TRANSPORTS];
} tern_membuf;

typedef struct tern_memory {
    pthread_rwlock_t lock;
    tern_membuf *bufs;            /* sorted by addr */
    size_t nbufs, capbufs;
    tern_segment_desc *local_desc; /* decoded copy of local_json (path choice) */
    char *local_json;
    uint64_t generation;          /* of the last publish */
    /* what the descriptor is built from (set once, read-only after) */
    tern_xport *xports;
    size_t nxports;
    tern_metadata *md;
    const char *server_name;
    /* the handshake daemon's other addresses, published as "handshake_addrs" */
    char hs_addrs[TERN_HS_MAX_LISTEN][TERN_HS_ADDR_MAX];
    size_t n_hs_addrs;
    tern_cuda *cuda;              /* the engine's driver (loaded on first use) */
    const char *sysfs_root;       /* where a GPU's PCI place is read */
} tern_memory;

void tern_memory_init(tern_memory *m, tern_cuda *cuda);
/* What the descriptor is built from, once the transports and the metadata
 * backend are up (before the first publish). */
void tern_memory_bind(tern_memory *m, tern_xport *xports, size_t nxports, tern_metadata *md,
                      const char *server_name);
/* Deregisters everything and destroys the lock; no unpublish (the engine
 * does that). */
void tern_memory_fini(tern_memory *m);

/* The GPU ordinal of the registered memory at addr, -1 for host memory, -2
 * when nothing registered holds addr. */
int tern_memory_gpu_at(tern_memory *m, uint64_t addr);
int tern_memory_register(tern_memory *m, void *addr, size_t len, const char *location,
                         char *err, size_t errlen);
int tern_memory_unregister(tern_memory *m, void *addr, char *err, size_t errlen);
/* Register n regions with one publish, all or nothing (the named and
 * batch forms of the API; see docs/api.md, Memory). */
int tern_memory_register_many(tern_memory *m, const tern_memory_region *r, size_t n,
                              char *err, size_t errlen);
/* Unregister n buffers by address with one publish; stops at the first
 * that is not registered (those before it are gone). */
int tern_memory_unregister_many(tern_memory *m, void *const *addrs, size_t n, char *err,
                                size_t errlen);
/* The buffers as the API lists them (lock taken); returns the count. */
size_t tern_memory_list(tern_memory *m, tern_buffer_info *out, size_t max);
/* Rebuild and publish the descriptor (takes the lock). */
int tern_memory_publish(tern_memory *m, char *err, size_t errlen);
/* A malloc()ed copy of the published JSON, or NULL. */
char *tern_memory_json(tern_memory *m);
int tern_memory_published(tern_memory *m);

/* With the lock held (shared is enough): */
void tern_memory_rdlock(tern_memory *m);
void tern_memory_unlock(tern_memory *m);
const tern_membuf *tern_memory_find_locked(const tern_memory *m, uint64_t addr);
/* Bytes of [addr, addr+len) covered by adjacent buffers from addr. */
uint64_t tern_memory_covered_locked(const tern_memory *m, uint64_t addr, uint64_t len);

#endif
