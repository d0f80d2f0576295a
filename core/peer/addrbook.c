/* core/peer/addrbook.c: see addrbook.h.  A small table searched linearly: it
 * is read when a handshake to a peer fails to connect and written when a
 * descriptor is fetched, both rare next to the data path.  At most
 * BOOK_MAX peers; past that the oldest entry makes room. */
#include "peer/addrbook.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define BOOK_MAX 4096

typedef struct book_entry {
    char name[256];
    char addrs[TERN_DESC_MAX_HS_ADDRS][TERN_DESC_HS_ADDR_MAX];
    size_t n;
    char best[TERN_DESC_HS_ADDR_MAX]; /* answered last; "" : the name */
} book_entry;

struct tern_addrbook {
    pthread_mutex_t lock;
    book_entry *e;
    size_t n, cap, next_evict;
};

tern_addrbook *tern_addrbook_new(void)
{
    tern_addrbook *b = calloc(1, sizeof *b);
    if (b)
        pthread_mutex_init(&b->lock, NULL);
    return b;
}

void tern_addrbook_free(tern_addrbook *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b->e);
    free(b);
}

static book_entry *find_locked(tern_addrbook *b, const char *name)
{
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->e[i].name, name) == 0)
            return &b->e[i];
    return NULL;
}

/* A slot for a new name: appended, or the oldest when full. */
static book_entry *slot_locked(tern_addrbook *b)
{
    if (b->cap < BOOK_MAX) {
        book_entry *e = tern_array_room(b->e, b->n, &b->cap, sizeof *e, 8);
        if (e)
            b->e = e;
    }
    if (b->n < b->cap)
        return &b->e[b->n++];
    if (!b->n)
        return NULL;
    book_entry *e = &b->e[b->next_evict];
    b->next_evict = (b->next_evict + 1) % b->n;
    return e;
}

void tern_addrbook_note(tern_addrbook *b, const char *name,
                        const char (*addrs)[TERN_DESC_HS_ADDR_MAX], size_t n)
{
    if (!b || !name || strlen(name) >= sizeof b->e->name)
        return;
    if (n > TERN_DESC_MAX_HS_ADDRS)
        n = TERN_DESC_MAX_HS_ADDRS;
    pthread_mutex_lock(&b->lock);
    book_entry *e = find_locked(b, name);
    if (!e && n)
        e = slot_locked(b);
    if (e) {
        if (strcmp(e->name, name) != 0)
            e->best[0] = '\0';
        tern_strlcpy(e->name, name, sizeof e->name);
        for (size_t i = 0; i < n; i++)
            tern_strlcpy(e->addrs[i], addrs[i], TERN_DESC_HS_ADDR_MAX);
        e->n = n;
    }
    pthread_mutex_unlock(&b->lock);
}

static size_t put(char (*out)[TERN_DESC_HS_ADDR_MAX], size_t n, size_t max, const char *a)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i], a) == 0)
            return n;
    if (n < max)
        tern_strlcpy(out[n++], a, TERN_DESC_HS_ADDR_MAX);
    return n;
}

size_t tern_addrbook_order(tern_addrbook *b, const char *name,
                           char (*out)[TERN_DESC_HS_ADDR_MAX], size_t max)
{
    size_t n = 0;
    if (!b || !name || strlen(name) >= TERN_DESC_HS_ADDR_MAX)
        return 0;
    pthread_mutex_lock(&b->lock);
    const book_entry *e = find_locked(b, name);
    if (e && e->n) {
        if (e->best[0])
            n = put(out, n, max, e->best);
        n = put(out, n, max, name);
        for (size_t i = 0; i < e->n; i++)
            n = put(out, n, max, e->addrs[i]);
    }
    pthread_mutex_unlock(&b->lock);
    return n;
}

void tern_addrbook_answered(tern_addrbook *b, const char *name, const char *addr)
{
    if (!b || !name || !addr)
        return;
    pthread_mutex_lock(&b->lock);
    book_entry *e = find_locked(b, name);
    if (e)
        tern_strlcpy(e->best, strcmp(addr, name) == 0 ? "" : addr, sizeof e->best);
    pthread_mutex_unlock(&b->lock);
}
