/* core/memory/allocs.h: memory the engine allocates for the application
 * (tern_alloc_memory): each allocation is its own shared-memory file
 * (memfd) mapped shared, kept open for its life, so that a same-host peer
 * can map the same pages and copy with a plain memcpy (docs/protocol.md,
 * "Memory tern allocates").  The object owns its list and its lock; the
 * public calls are in memory_api.c. */
#ifndef TERN_CORE_ALLOC_H
#define TERN_CORE_ALLOC_H

#include <stddef.h>

typedef struct tern_allocs tern_allocs;

tern_allocs *tern_allocs_create(void);
/* Unmaps and closes what is left (after every registration is gone). */
void tern_allocs_destroy(tern_allocs *a);
/* len bytes (rounded up to the page size), zeroed: 0 or a tern_err, msg says why. */
int tern_allocs_new(tern_allocs *a, size_t len, void **out, char *msg, size_t msglen);
/* Whether p is the start of one of ours; *len gets its length. */
int tern_allocs_find(tern_allocs *a, const void *p, size_t *len);
/* Unmaps and closes p: 0, or TERN_ERR_NOT_FOUND when it is not ours. */
int tern_allocs_release(tern_allocs *a, void *p);

#endif
