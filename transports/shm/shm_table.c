/* transports/shm/shm_table.c: the registration table a process keeps in its
 * own memory, and the peer's view of it (see docs/protocol.md, Same-host
 * transport, "Registration table").
 *
 * The owner changes entries under a sequence lock: seq becomes odd, the
 * entries change, seq becomes even again.  A peer reads the header with one
 * process_vm_readv before every copy; when seq is the one its cached entries
 * were read under, the cache IS the current table, otherwise it reads the
 * entries again and the header once more, and retries until both reads saw
 * the same even seq.  So a range is always checked against the registrations
 * as they are when the copy starts, never against a stale copy. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>

#include "shm_internal.h"

#define SEQ_RETRIES 1000

/* ---- the owner's side ------------------------------------------------------------ */

int shm_local_init(shm_local *l, uint64_t cap, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->bytes = sizeof(shm_table) + cap * sizeof(shm_entry);
    /* Its own mapping: the table's address stays valid (and holds nothing
     * else) for the context's life. */
    void *m = mmap(NULL, l->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "shm: cannot map a table of %zu bytes: %s",
                    l->bytes, strerror(errno));
    l->t = m;
    uint64_t instance = 0;
    while (instance == 0)
        if (shm_random(&instance, sizeof instance) != 0) {
            munmap(m, l->bytes);
            return tern_kit_errf(err, errlen, TERN_ERR_IO, "shm: getrandom failed: %s", strerror(errno));
        }
    l->t->head.instance = instance;
    l->t->head.cap = cap;
    l->t->head.magic = SHM_TABLE_MAGIC;
    uint64_t k;
    shm_random(&k, sizeof k);
    /* Keys of different contexts rarely meet; a key fits a pointer (it is
     * also the registration handle) and is never 0. */
    l->next_key = ((k >> 16) & (UINTPTR_MAX >> 1)) | 1;
    pthread_rwlock_init(&l->lock, NULL);
    return 0;
}

void shm_local_fini(shm_local *l)
{
    if (!l->t)
        return;
    l->t->head.magic = 0; /* a peer reading after this sees no table */
    munmap(l->t, l->bytes);
    l->t = NULL;
    pthread_rwlock_destroy(&l->lock);
}

/* Caller holds the write lock. */
static void seq_begin(shm_table *t)
{
    atomic_store_explicit((_Atomic uint64_t *)&t->head.seq, t->head.seq + 1,
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
}

static void seq_end(shm_table *t)
{
    atomic_thread_fence(memory_order_seq_cst);
    atomic_store_explicit((_Atomic uint64_t *)&t->head.seq, t->head.seq + 1,
                          memory_order_release);
}

int shm_local_add(shm_local *l, const shm_entry *e, uint64_t *key)
{
    pthread_rwlock_wrlock(&l->lock);
    shm_table *t = l->t;
    if (t->head.n >= t->head.cap) {
        pthread_rwlock_unlock(&l->lock);
        return TERN_ERR_NOMEM;
    }
    seq_begin(t);
    *key = l->next_key++;
    t->entries[t->head.n] = *e;
    t->entries[t->head.n].key = *key;
    t->head.n++;
    seq_end(t);
    pthread_rwlock_unlock(&l->lock);
    return 0;
}

int shm_local_remove(shm_local *l, uint64_t key, uint64_t *seq)
{
    pthread_rwlock_wrlock(&l->lock);
    shm_table *t = l->t;
    int rc = TERN_ERR_NOT_FOUND;
    for (uint64_t i = 0; i < t->head.n; i++)
        if (t->entries[i].key == key) {
            seq_begin(t);
            t->entries[i] = t->entries[t->head.n - 1];
            t->head.n--;
            seq_end(t);
            rc = 0;
            break;
        }
    *seq = t->head.seq;
    pthread_rwlock_unlock(&l->lock);
    return rc;
}

/* The entry with key holding [addr, addr+len), or NULL. */
static const shm_entry *find(const shm_entry *e, uint64_t n, uint64_t key, uint64_t addr,
                             uint64_t len)
{
    if (addr + len < addr)
        return NULL;
    for (uint64_t i = 0; i < n; i++)
        if (e[i].key == key && addr >= e[i].addr && addr + len <= e[i].addr + e[i].len)
            return &e[i];
    return NULL;
}

static int covers(const shm_entry *e, uint64_t n, uint64_t key, uint64_t addr, uint64_t len)
{
    return find(e, n, key, addr, len) != NULL;
}

static void store64(uint64_t *at, uint64_t v)
{
    atomic_store_explicit((_Atomic uint64_t *)at, v, memory_order_seq_cst);
}

static uint64_t load64(const uint64_t *at)
{
    return atomic_load_explicit((_Atomic const uint64_t *)at, memory_order_seq_cst);
}

/* The seq is recorded under the read lock: a deregistration (write lock)
 * either finds it already written, older than its own change, or is the
 * change this check sees. */
int shm_local_covers(shm_local *l, int slot, uint64_t key, uint64_t addr, uint64_t len)
{
    pthread_rwlock_rdlock(&l->lock);
    int ok = covers(l->t->entries, l->t->head.n, key, addr, len);
    if (slot >= 0)
        store64(&l->t->copying[slot].lseq, l->t->head.seq);
    pthread_rwlock_unlock(&l->lock);
    return ok;
}

int shm_local_move(shm_local *l, uint64_t key, uint64_t addr, uint64_t len, void *buf,
                   int to_local)
{
    pthread_rwlock_rdlock(&l->lock);
    int ok = covers(l->t->entries, l->t->head.n, key, addr, len);
    if (ok && to_local)
        shm_copy_stream((void *)(uintptr_t)addr, buf, len);
    else if (ok)
        memcpy(buf, (const void *)(uintptr_t)addr, len);
    pthread_rwlock_unlock(&l->lock);
    return ok ? 0 : TERN_ERR_RANGE;
}

/* ---- copies under way ------------------------------------------------------------ */

/* Only the context's workers copy, and there are at most SHM_COPY_SLOTS
 * of them, so a free slot is always there; the wait only guards the bound. */
int shm_copy_begin(shm_local *l, uint64_t instance)
{
    uint_fast64_t m = atomic_load(&l->copy_map);
    for (;;) {
        if (~m == 0) {
            sched_yield();
            m = atomic_load(&l->copy_map);
            continue;
        }
        int slot = __builtin_ctzll(~(unsigned long long)m);
        if (atomic_compare_exchange_weak(&l->copy_map, &m, m | (1ull << slot))) {
            shm_copying *c = &l->t->copying[slot];
            store64(&c->seq, 0);
            store64(&c->lseq, 0);
            /* Published before the target's header is read (shm_drain.c). */
            store64(&c->instance, instance);
            return slot;
        }
    }
}

void shm_copy_checked(shm_local *l, int slot, uint64_t seq)
{
    store64(&l->t->copying[slot].seq, seq);
}

void shm_copy_end(shm_local *l, int slot)
{
    store64(&l->t->copying[slot].instance, 0);
    atomic_fetch_and(&l->copy_map, ~(1ull << slot));
}

int shm_local_copying_before(shm_local *l, uint64_t seq)
{
    for (int i = 0; i < SHM_COPY_SLOTS; i++) {
        const shm_copying *c = &l->t->copying[i];
        uint64_t lseq = load64(&c->lseq);
        if (load64(&c->instance) != 0 && lseq != 0 && lseq < seq)
            return 1;
    }
    return 0;
}

unsigned shm_local_prove(shm_local *l, uint64_t peer_instance, const uint64_t nonce[2])
{
    unsigned slot = atomic_fetch_add(&l->proof_next, 1) % SHM_PROOF_SLOTS;
    shm_proof *p = &l->t->proofs[slot];
    p->magic = 0;
    atomic_thread_fence(memory_order_seq_cst);
    p->peer_instance = peer_instance;
    p->nonce[0] = nonce[0];
    p->nonce[1] = nonce[1];
    atomic_thread_fence(memory_order_seq_cst);
    p->magic = SHM_PROOF_MAGIC;
    return slot;
}

/* ---- the peer's view ---------------------------------------------------------------- */

void shm_remote_init(shm_remote *r, pid_t pid, uint64_t table, uint64_t instance)
{
    memset(r, 0, sizeof *r);
    r->pid = pid;
    r->table = table;
    r->instance = instance;
    r->seq = 1; /* odd: nothing cached */
    pthread_rwlock_init(&r->lock, NULL);
}

void shm_remote_fini(shm_remote *r)
{
    free(r->e);
    r->e = NULL;
    pthread_rwlock_destroy(&r->lock);
}

/* The peer's header; 0 or a tern_err with msg. */
static int read_head(shm_remote *r, shm_head *h, char *msg, size_t msglen)
{
    int rc = shm_peek(r->pid, r->table, h, sizeof *h);
    if (rc == -ESRCH)
        return tern_kit_errf(msg, msglen, TERN_ERR_CLOSED, "shm: peer process %ld is gone", (long)r->pid);
    if (rc < 0) {
        char why[400];
        shm_ident_explain(r->pid, -rc, why, sizeof why);
        return tern_kit_errf(msg, msglen, rc == -EFAULT ? TERN_ERR_CLOSED : TERN_ERR_UNREACHABLE,
                    "shm: %s", why);
    }
    if (h->magic != SHM_TABLE_MAGIC || h->instance != r->instance)
        return tern_kit_errf(msg, msglen, TERN_ERR_CLOSED,
                    "shm: peer process %ld no longer holds its table (engine destroyed, or the "
                    "pid was reused)", (long)r->pid);
    return 0;
}

/* Caller holds the write lock: read entries until a stable even seq. */
static int refresh(shm_remote *r, shm_head *h, char *msg, size_t msglen)
{
    for (int tries = 0; tries < SEQ_RETRIES; tries++) {
        if (h->seq & 1)
            goto again;
        if (h->n > h->cap || h->n > (1u << 20))
            return tern_kit_errf(msg, msglen, TERN_ERR_PROTOCOL,
                        "shm: peer process %ld publishes %llu entries (capacity %llu)",
                        (long)r->pid, (unsigned long long)h->n, (unsigned long long)h->cap);
        if (h->n > r->cap) {
            shm_entry *e = realloc(r->e, h->n * sizeof *e);
            if (!e)
                return tern_kit_errf(msg, msglen, TERN_ERR_NOMEM, "shm: out of memory");
            r->e = e;
            r->cap = h->n;
        }
        uint64_t at = r->table + offsetof(shm_table, entries);
        if (h->n && shm_peek(r->pid, at, r->e, h->n * sizeof *r->e) != 0)
            goto again;
        uint64_t seq = h->seq;
        int rc = read_head(r, h, msg, msglen);
        if (rc)
            return rc;
        if (h->seq == seq) {
            r->seq = seq;
            r->n = h->n;
            return 0;
        }
        continue;
    again:;
        int rc2 = read_head(r, h, msg, msglen);
        if (rc2)
            return rc2;
    }
    return tern_kit_errf(msg, msglen, TERN_ERR_TIMEOUT,
                "shm: peer process %ld kept changing its registrations", (long)r->pid);
}

/* Caller holds the lock: whether [addr, addr+len) is in the entry with
 * key, which is copied to hit. */
static int lookup(shm_remote *r, uint64_t key, uint64_t addr, uint64_t len, shm_entry *hit)
{
    const shm_entry *e = find(r->e, r->n, key, addr, len);
    if (e)
        *hit = *e;
    return e != NULL;
}

int shm_remote_has_key(shm_remote *r, uint64_t key)
{
    int found = 0;
    pthread_rwlock_rdlock(&r->lock);
    for (uint64_t i = 0; i < r->n && !found; i++)
        found = r->e[i].key == key;
    pthread_rwlock_unlock(&r->lock);
    return found;
}

int shm_remote_check(shm_remote *r, uint64_t key, uint64_t addr, uint64_t len, uint64_t *seq,
                     shm_entry *hit, char *msg, size_t msglen)
{
    shm_head h;
    int rc = read_head(r, &h, msg, msglen);
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&r->lock);
    int fresh = r->seq == h.seq;
    int ok = fresh && lookup(r, key, addr, len, hit);
    pthread_rwlock_unlock(&r->lock);
    if (!fresh) {
        pthread_rwlock_wrlock(&r->lock);
        rc = r->seq == h.seq ? 0 : refresh(r, &h, msg, msglen);
        ok = rc == 0 && lookup(r, key, addr, len, hit);
        pthread_rwlock_unlock(&r->lock);
        if (rc)
            return rc;
    }
    if (!ok)
        return tern_kit_errf(msg, msglen, TERN_ERR_RANGE,
                    "shm: remote 0x%llx+%llu is not inside a current registration of the peer "
                    "with rkey %llu", (unsigned long long)addr, (unsigned long long)len,
                    (unsigned long long)key);
    *seq = h.seq; /* the header the cache was confirmed (or refreshed) against */
    return 0;
}

int shm_remote_proof(const shm_remote *r, unsigned slot, shm_proof *out, char *err,
                     size_t errlen)
{
    if (slot >= SHM_PROOF_SLOTS)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE, "shm: proof slot %u out of range", slot);
    uint64_t at = r->table + offsetof(shm_table, proofs) + slot * sizeof(shm_proof);
    int rc = shm_peek(r->pid, at, out, sizeof *out);
    if (rc < 0) {
        char why[400];
        shm_ident_explain(r->pid, -rc, why, sizeof why);
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE, "shm: %s", why);
    }
    return 0;
}
