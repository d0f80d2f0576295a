/* core/datapath/cut.c: validation and the cut (see cut.h).  Runs on the
 * application thread, or on a worker for a request whose descriptor had
 * to be refetched first; never waits for a peer. */
#include "datapath/cut.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

uint64_t tern_slice_next(uint64_t remaining, uint64_t slice_size)
{
    if (!slice_size || remaining <= slice_size + TERN_TAIL_SLACK)
        return remaining;
    return slice_size;
}

/* Bytes of [a, a+len) covered by adjacent buffers of d, from a. */
static uint64_t remote_covered(const tern_segment_desc *d, uint64_t a, uint64_t len)
{
    uint64_t done = 0;
    while (d && done < len) {
        const tern_buffer_desc *b = tern_segment_find_buffer(d, a + done, 1);
        if (!b)
            break;
        done += b->addr + b->length - (a + done);
    }
    return done < len ? done : len;
}

static int remote_ok(tern_segment *s, const tern_request *r)
{
    pthread_rwlock_rdlock(&s->lock);
    int ok = s->desc && remote_covered(s->desc, r->remote, r->length) == r->length;
    pthread_rwlock_unlock(&s->lock);
    return ok;
}

int tern_cut_validate(tern_engine *e, const tern_request *r, tern_segment **seg, char *msg,
                      size_t msglen)
{
    if (r->opcode != TERN_READ && r->opcode != TERN_WRITE)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "opcode %d is neither READ nor WRITE",
                         (int)r->opcode);
    if (r->length == 0 || !r->local)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "%s", r->length ? "local address is NULL"
                                                                      : "length is 0");
    uint64_t la = (uintptr_t)r->local;
    if (r->length > UINT64_MAX - la || r->length > UINT64_MAX - r->remote)
        return tern_errf(msg, msglen, TERN_ERR_INVAL, "address + length %llu overflows",
                         (unsigned long long)r->length);
    if (!(*seg = tern_segments_get(&e->segs, r->segment)))
        return tern_errf(msg, msglen, TERN_ERR_NOT_FOUND, "segment %d is not open",
                         (int)r->segment);
    tern_memory_rdlock(&e->mem);
    uint64_t cov = tern_memory_covered_locked(&e->mem, la, r->length);
    tern_memory_unlock(&e->mem);
    if (cov < r->length)
        return tern_errf(msg, msglen, TERN_ERR_RANGE,
                         "local range [%p, +%llu) is not registered memory (first unregistered "
                         "byte at 0x%llx)", r->local, (unsigned long long)r->length,
                         (unsigned long long)(la + cov));
    return remote_ok(*seg, r) ? 0 : TERN_CUT_REFETCH;
}

int tern_cut_check_remote(tern_segment *seg, const tern_request *r, char *msg, size_t msglen)
{
    if (remote_ok(seg, r))
        return 0;
    pthread_rwlock_rdlock(&seg->lock);
    unsigned long long gen = (unsigned long long)seg->desc_gen;
    pthread_rwlock_unlock(&seg->lock);
    return tern_errf(msg, msglen, TERN_ERR_RANGE,
                     "remote address 0x%llx (+%llu bytes) is not inside any registration of "
                     "segment %s (its descriptor refetched: generation %llu) (%s)",
                     (unsigned long long)r->remote, (unsigned long long)r->length, seg->name,
                     gen, tern_strerror(TERN_ERR_RANGE));
}

static tern_cslice *cslice_new(tern_batch *b, size_t idx, tern_segment *seg, uint64_t off,
                               uint64_t len)
{
    tern_cslice *cs = calloc(1, sizeof *cs);
    if (!cs)
        return NULL;
    const tern_request *r = &b->reqs[idx].r;
    cs->s.struct_size = sizeof cs->s;
    cs->s.opcode = r->opcode;
    cs->s.local = (char *)r->local + off;
    cs->s.remote = r->remote + off;
    cs->s.length = len;
    cs->s.core = cs;
    cs->b = b;
    cs->idx = idx;
    cs->seg = seg;
    cs->seg_gen = seg->gen; /* seg's lock is held by the caller */
    cs->desc_gen = seg->desc_gen;
    cs->epoch = atomic_load(&seg->fail_epoch);
    cs->offset = off;
    cs->local_dev = -1;
    cs->pair = -1;
    cs->gpu = -1;
    return cs;
}

tern_cslice *tern_cut_whole(tern_batch *b, size_t idx, tern_segment *seg)
{
    pthread_rwlock_rdlock(&seg->lock);
    tern_cslice *cs = cslice_new(b, idx, seg, 0, b->reqs[idx].r.length);
    pthread_rwlock_unlock(&seg->lock);
    if (cs)
        cs->whole = 1;
    return cs;
}

/* Length of the slice at offset off: tail rule, then both buffer ends. */
static uint64_t slice_len(tern_memory *m, const tern_request *r, tern_segment *seg,
                          uint64_t off, uint64_t slice_size)
{
    uint64_t n = tern_slice_next(r->length - off, slice_size);
    const tern_membuf *lb = tern_memory_find_locked(m, (uintptr_t)r->local + off);
    const tern_buffer_desc *rb = tern_segment_find_buffer(seg->desc, r->remote + off, 1);
    if (!lb || !rb)
        return 0;
    uint64_t lrem = lb->addr + lb->len - ((uintptr_t)r->local + off);
    uint64_t rrem = rb->addr + rb->length - (r->remote + off);
    n = n < lrem ? n : lrem;
    return n < rrem ? n : rrem;
}

static int list_room(tern_cut_list *l)
{
    tern_cslice **nv = tern_array_room(l->v, l->n, &l->cap, sizeof *nv, 64);
    if (!nv)
        return TERN_ERR_NOMEM;
    l->v = nv;
    return 0;
}

int tern_cut_list_add(tern_cut_list *l, tern_cslice *cs)
{
    if (list_room(l) != 0)
        return TERN_ERR_NOMEM;
    l->v[l->n++] = cs;
    return 0;
}

int tern_cut(tern_batch *b, size_t idx, tern_segment *seg, tern_cut_list *l)
{
    const tern_request *r = &b->reqs[idx].r;
    tern_engine *e = b->e;
    size_t first = l->n;
    int count = 0;
    pthread_rwlock_rdlock(&seg->lock);
    tern_memory_rdlock(&e->mem);
    uint64_t ss = seg->desc ? e->xports[seg->xport].slice_size : 0;
    for (uint64_t off = 0; off < r->length && count >= 0;) {
        uint64_t n = seg->desc ? slice_len(&e->mem, r, seg, off, ss) : 0;
        tern_cslice *cs = NULL;
        if (list_room(l) == 0 && n)
            cs = cslice_new(b, idx, seg, off, n);
        if (!cs) {
            count = n ? TERN_ERR_NOMEM : TERN_ERR_RANGE; /* unregistered meanwhile */
            break;
        }
        const tern_membuf *lb = tern_memory_find_locked(&e->mem, (uintptr_t)r->local + off);
        cs->gpu = lb ? lb->gpu : -1;
        l->v[l->n++] = cs;
        count++;
        off += n;
    }
    tern_memory_unlock(&e->mem);
    pthread_rwlock_unlock(&seg->lock);
    if (count < 0) {
        for (size_t i = first; i < l->n; i++)
            free(l->v[i]);
        l->n = first;
    }
    return count;
}
