/* core/memory/allocs.c: memory the engine allocates for the application, one
 * shared-memory file per allocation (see allocs.h).  The file descriptor
 * stays open while the memory lives: the same-host transport finds it
 * from the mapping and publishes it, and a peer allowed to copy into this
 * process (the same user) opens it through /proc/PID/fd. */
#include "memory/allocs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tern/tern.h"
#include "base/util.h"

typedef struct alloc_ent {
    void *addr;
    size_t len;
    int fd;
    struct alloc_ent *next;
} alloc_ent;

struct tern_allocs {
    pthread_mutex_t lock;
    alloc_ent *head;
};

tern_allocs *tern_allocs_create(void)
{
    tern_allocs *a = calloc(1, sizeof *a);
    if (a)
        pthread_mutex_init(&a->lock, NULL);
    return a;
}

static void ent_free(alloc_ent *x)
{
    munmap(x->addr, x->len);
    close(x->fd);
    free(x);
}

void tern_allocs_destroy(tern_allocs *a)
{
    if (!a)
        return;
    for (alloc_ent *x = a->head, *next; x; x = next) {
        next = x->next;
        ent_free(x);
    }
    pthread_mutex_destroy(&a->lock);
    free(a);
}

int tern_allocs_new(tern_allocs *a, size_t len, void **out, char *msg, size_t msglen)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!len || len > SIZE_MAX - page)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "alloc_memory: length %zu", len);
    len = (len + page - 1) / page * page;
    alloc_ent *x = calloc(1, sizeof *x);
    if (!x)
        return tern_errf(msg, msglen, TERN_ERR_NOMEM, "alloc_memory: out of memory");
    /* Sealed against shrinking: a peer that maps it (the shm transport)
     * then cannot be made to touch a page past its end. */
    x->fd = memfd_create("tern-alloc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (x->fd < 0) {
        free(x);
        return tern_errf(msg, msglen, TERN_ERR_IO, "alloc_memory: memfd_create: %s",
                         strerror(errno));
    }
    x->addr = MAP_FAILED;
    if (ftruncate(x->fd, (off_t)len) == 0 &&
        fcntl(x->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        x->addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, x->fd, 0);
    if (x->addr == MAP_FAILED) {
        int e = errno;
        close(x->fd);
        free(x);
        return tern_errf(msg, msglen, e == ENOMEM || e == ENOSPC ? TERN_ERR_NOMEM : TERN_ERR_IO,
                         "alloc_memory: %zu bytes of shared memory: %s (check /dev/shm "
                         "and the memory limits)", len, strerror(e));
    }
    x->len = len;
    pthread_mutex_lock(&a->lock);
    x->next = a->head;
    a->head = x;
    pthread_mutex_unlock(&a->lock);
    *out = x->addr;
    return 0;
}

int tern_allocs_find(tern_allocs *a, const void *p, size_t *len)
{
    int found = 0;
    pthread_mutex_lock(&a->lock);
    for (alloc_ent *x = a->head; x && !found; x = x->next)
        if (x->addr == p) {
            found = 1;
            if (len)
                *len = x->len;
        }
    pthread_mutex_unlock(&a->lock);
    return found;
}

int tern_allocs_release(tern_allocs *a, void *p)
{
    alloc_ent *x = NULL;
    pthread_mutex_lock(&a->lock);
    for (alloc_ent **at = &a->head; *at; at = &(*at)->next)
        if ((*at)->addr == p) {
            x = *at;
            *at = x->next;
            break;
        }
    pthread_mutex_unlock(&a->lock);
    if (!x)
        return TERN_ERR_NOT_FOUND;
    ent_free(x);
    return 0;
}
