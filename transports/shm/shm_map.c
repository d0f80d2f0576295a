/* transports/shm/shm_map.c: registrations that are shared mappings of a
 * file (the memory tern_alloc_memory hands out, docs/protocol.md,
 * "Memory tern allocates").
 *
 * The registering process finds, at registration, the open file behind
 * the range and publishes its descriptor number, offset and inode in the
 * table entry.  A peer opens /proc/PID/fd/N (allowed where cross-memory
 * attach is: the same user), checks it is the inode published and that
 * the file is sealed against shrinking (so a copy never touches a page
 * past the end of the file, which would be SIGBUS here), and maps it: a
 * copy is then a memcpy between two mappings, with no page pinned per
 * copy.  Anything else - private memory, a file not held open, a file not
 * sealed, a mapping that fails - is copied with cross-memory attach as
 * before.  The checks of both
 * ranges against the current tables (shm_copy.c) are the same either way. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "shm_internal.h"

/* ---- registering: which open file backs a range ---------------------------- */

typedef struct backing {
    uint64_t start, end, off, ino;
    unsigned maj, min;
} backing;

/* The /proc/self/maps line holding [addr, addr+len) when it is a shared,
 * writable file mapping. */
static int find_mapping(uint64_t addr, uint64_t len, backing *b)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return 0;
    char line[512], perms[8];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        uint64_t s, e, off, ino;
        unsigned maj, min;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64, &s, &e, perms,
                   &off, &maj, &min, &ino) != 7)
            continue;
        if (addr < s || addr >= e)
            continue;
        found = -1;
        if (addr + len <= e && ino && perms[0] == 'r' && perms[1] == 'w' && perms[3] == 's') {
            *b = (backing){s, e, off, ino, maj, min};
            found = 1;
        }
    }
    fclose(f);
    return found == 1;
}

/* A descriptor of ours open on that inode. */
static int find_fd(const backing *b)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int fd = -1, self = dirfd(d);
    struct dirent *de;
    while (fd < 0 && (de = readdir(d))) {
        char *end;
        long n = strtol(de->d_name, &end, 10);
        struct stat st;
        if (*end || end == de->d_name || n == self || fstat((int)n, &st) != 0)
            continue;
        if ((uint64_t)st.st_ino == b->ino && major(st.st_dev) == b->maj &&
            minor(st.st_dev) == b->min)
            fd = (int)n;
    }
    closedir(d);
    return fd;
}

void shm_backing_find(shm_entry *e)
{
    backing b;
    e->fd = -1;
    e->foff = e->ino = 0;
    if (!find_mapping(e->addr, e->len, &b))
        return;
    int fd = find_fd(&b);
    if (fd < 0)
        return;
    e->fd = fd;
    e->foff = b.off + (e->addr - b.start);
    e->ino = b.ino;
}

/* ---- the peer: mapping a registration ----------------------------------------- */

void shm_maps_init(shm_maps *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
}

static void slot_clear(shm_map *s)
{
    if (s->m)
        munmap(s->m, s->mlen);
    memset(s, 0, sizeof *s);
}

void shm_maps_fini(shm_maps *m)
{
    for (int i = 0; i < SHM_MAP_SLOTS; i++)
        slot_clear(&m->slot[i]);
    pthread_mutex_destroy(&m->lock);
}

static int same(const shm_entry *a, const shm_entry *b)
{
    return a->key == b->key && a->addr == b->addr && a->len == b->len && a->fd == b->fd &&
           a->foff == b->foff && a->ino == b->ino;
}

/* Maps e of process pid into s (s->base NULL when it cannot be). */
static void map_entry(shm_map *s, pid_t pid, const shm_entry *e)
{
    char path[64];
    s->e = *e;
    snprintf(path, sizeof path, "/proc/%ld/fd/%" PRId64, (long)pid, e->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t skew = e->foff % page;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == e->ino && seals >= 0 &&
        (seals & F_SEAL_SHRINK) && e->foff + e->len >= e->foff &&
        (uint64_t)st.st_size >= e->foff + e->len && e->len <= SIZE_MAX - skew) {
        void *m = mmap(NULL, e->len + skew, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       (off_t)(e->foff - skew));
        if (m != MAP_FAILED) {
            s->m = m;
            s->mlen = e->len + skew;
            s->base = (uint8_t *)m + skew;
        }
    }
    close(fd);
}

/* One debug line per registration mapped (or not): what a test and an
 * operator look for to know which copy path a peer's memory takes. */
static void map_log(const tern_host_services *h, pid_t pid, const shm_map *s)
{
    if (s->base)
        h->log(h->host, TERN_LOG_DEBUG,
               "shm: process %ld's registration key %llu (%llu bytes) mapped: copies are memcpy",
               (long)pid, (unsigned long long)s->e.key, (unsigned long long)s->e.len);
    else
        h->log(h->host, TERN_LOG_DEBUG,
               "shm: process %ld's registration key %llu is a shared file this process cannot "
               "map (not sealed against shrinking, or not openable): cross-memory attach",
               (long)pid, (unsigned long long)s->e.key);
}

int shm_maps_get(shm_maps *m, const tern_host_services *h, shm_remote *r, pid_t pid,
                 const shm_entry *e, uint8_t **base)
{
    if (e->fd < 0)
        return -1;
    pthread_mutex_lock(&m->lock);
    int at = -1;
    for (int i = 0; i < SHM_MAP_SLOTS && at < 0; i++)
        if (m->slot[i].e.len && same(&m->slot[i].e, e))
            at = i;
    if (at < 0) {
        /* Mappings of registrations the peer has dropped go first: they
         * keep its freed pages alive. */
        for (int i = 0; i < SHM_MAP_SLOTS; i++)
            if (m->slot[i].e.len && !m->slot[i].users && !shm_remote_has_key(r, m->slot[i].e.key))
                slot_clear(&m->slot[i]);
        for (int i = 0; i < SHM_MAP_SLOTS && at < 0; i++) {
            int j = (int)((m->next + (unsigned)i) % SHM_MAP_SLOTS);
            if (!m->slot[j].users)
                at = j;
        }
        if (at >= 0) {
            m->next = (unsigned)at + 1;
            slot_clear(&m->slot[at]);
            map_entry(&m->slot[at], pid, e);
            map_log(h, pid, &m->slot[at]);
        }
    }
    if (at >= 0 && !m->slot[at].base)
        at = -1; /* known not to map: cross-memory attach */
    if (at >= 0) {
        m->slot[at].users++;
        *base = m->slot[at].base;
    }
    pthread_mutex_unlock(&m->lock);
    return at;
}

void shm_maps_put(shm_maps *m, int slot)
{
    pthread_mutex_lock(&m->lock);
    m->slot[slot].users--;
    pthread_mutex_unlock(&m->lock);
}
