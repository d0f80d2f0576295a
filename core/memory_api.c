/* core/memory_api.c: the named-buffer API: registering with a name or many
 * regions at once (memory.c does the work), listing or finding a peer's
 * buffers from its descriptor, fetched again so that what the peer
 * registered since it was opened is seen (the descriptor generation, see
 * docs/architecture.md, Healing; docs/api.md, Memory), and memory tern
 * allocates and registers (allocs.c holds it). */
#include <stdlib.h>
#include <string.h>

#include "memory/allocs.h"
#include "engine/engine_error.h"
#include "engine/engine_state.h"
#include "base/log.h"
#include "memory/pages.h"
#include "base/util.h"

/* `huge_pages` (core/memory/pages.c): after the registration, outside its lock (a
 * collapse copies the region).  Host memory the application allocated only:
 * tern_alloc_memory's is a shared file the peer maps, and GPU memory has no
 * pages here to advise. */
static void advise_pages(tern_engine *e, const tern_memory_region *r)
{
    size_t alen = 0, done = 0;
    if (tern_allocs_find(e->allocs, r->addr, &alen) ||
        tern_memory_gpu_at(&e->mem, (uintptr_t)r->addr) != -1)
        return;
    char msg[512] = "";
    if (tern_pages_advise(r->addr, r->length, e->cfg->huge_pages, &done, msg, sizeof msg))
        tern_log(&e->log, TERN_LOG_WARN, "register %p (+%zu): huge_pages: %s", r->addr,
                 r->length, msg);
    else
        tern_log(&e->log, TERN_LOG_DEBUG, "register %p (+%zu): %zu bytes %s huge pages",
                 r->addr, r->length, done,
                 e->cfg->huge_pages == TERN_HUGE_COLLAPSE ? "collapsed to" : "advised to");
}

TERN_EXPORT int tern_register_memory_named(tern_engine *e, void *addr, size_t len,
                                           const char *location, const char *name)
{
    if (!e)
        return TERN_ERR_INVAL;
    tern_memory_region r = {addr, len, location, name && *name ? name : NULL};
    return tern_register_memory_batch(e, &r, 1);
}

TERN_EXPORT int tern_register_memory_batch(tern_engine *e, const tern_memory_region *r,
                                           size_t n)
{
    if (!e)
        return TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_memory_register_many(&e->mem, r, n, msg, sizeof msg);
    if (rc)
        return tern_engine_fail(e, rc, "%s", msg);
    for (size_t i = 0; i < n && e->cfg->huge_pages != TERN_HUGE_OFF; i++)
        advise_pages(e, &r[i]);
    tern_engine_clear_error(e);
    return 0;
}

TERN_EXPORT int tern_unregister_memory_batch(tern_engine *e, void *const *addrs, size_t n)
{
    if (!e)
        return TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_memory_unregister_many(&e->mem, addrs, n, msg, sizeof msg);
    return rc ? tern_engine_fail(e, rc, "%s", msg) : 0;
}

/* Fetch the peer's descriptor unless one was fetched after this call
 * began, so a registration the peer made before this call is seen.  Not
 * held to the per-peer refetch rate limit (that is for healing): a listing
 * costs one round trip, not the rest of the limit's 100 ms. */
static int refresh(tern_engine *e, tern_segment *s, char *err, size_t errlen)
{
    int rc = tern_segment_refetch_asked(&e->segs, s, tern_now_ns(), err, errlen);
    return rc < 0 ? rc : 0;
}

static void info_from(const tern_buffer_desc *b, tern_buffer_info *o)
{
    memset(o, 0, sizeof *o);
    tern_strlcpy(o->name, b->app_name, sizeof o->name);
    tern_strlcpy(o->location, b->location, sizeof o->location);
    o->addr = b->addr;
    o->length = b->length;
}

/* Copy the cached descriptor's buffers; returns the count or an error. */
static int list_cached(tern_engine *e, tern_segment *s, tern_buffer_info *out, size_t max)
{
    pthread_rwlock_rdlock(&s->lock);
    if (!s->used || !s->desc) {
        pthread_rwlock_unlock(&s->lock);
        return tern_engine_fail(e, TERN_ERR_CLOSED, "segment %s was closed", s->name);
    }
    size_t n = s->desc->nbuffers;
    for (size_t i = 0; i < n && i < max; i++)
        info_from(&s->desc->buffers[i], &out[i]);
    pthread_rwlock_unlock(&s->lock);
    return (int)n;
}

static int find_cached(tern_segment *s, const char *name, tern_buffer_info *out)
{
    int found = 0;
    pthread_rwlock_rdlock(&s->lock);
    for (size_t i = 0; s->desc && i < s->desc->nbuffers && !found; i++)
        if (strcmp(s->desc->buffers[i].app_name, name) == 0) {
            if (out)
                info_from(&s->desc->buffers[i], out);
            found = 1;
        }
    pthread_rwlock_unlock(&s->lock);
    return found;
}

static tern_segment *open_seg(tern_engine *e, tern_segment_id id, const char *what)
{
    tern_segment *s = tern_segments_get(&e->segs, id);
    if (!s)
        tern_engine_fail(e, TERN_ERR_NOT_FOUND, "%s: no open segment %d", what, (int)id);
    return s;
}

TERN_EXPORT int tern_segment_buffers(tern_engine *e, tern_segment_id id, tern_buffer_info *out,
                                     size_t max)
{
    if (!e || (!out && max))
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_buffers: out is NULL, max %zu",
                                    max)
                 : TERN_ERR_INVAL;
    if (id == TERN_LOCAL_SEGMENT)
        return (int)tern_memory_list(&e->mem, out, max);
    tern_segment *s = open_seg(e, id, "segment_buffers");
    if (!s)
        return TERN_ERR_NOT_FOUND;
    char msg[TERN_ERRMSG_MAX] = "";
    if (refresh(e, s, msg, sizeof msg) != 0) /* unreachable: the cache answers */
        tern_log(&e->log, TERN_LOG_WARN,
                 "segment_buffers: refetching %s failed, listing the cached descriptor: %s",
                 s->name, msg);
    return list_cached(e, s, out, max);
}

TERN_EXPORT int tern_segment_buffer_find(tern_engine *e, tern_segment_id id, const char *name,
                                         tern_buffer_info *out)
{
    if (!e || !name || !*name)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_buffer_find: name is empty")
                 : TERN_ERR_INVAL;
    if (id == TERN_LOCAL_SEGMENT) {
        size_t n = tern_memory_list(&e->mem, NULL, 0);
        tern_buffer_info *all = calloc(n ? n : 1, sizeof *all);
        if (!all)
            return tern_engine_fail(e, TERN_ERR_NOMEM, "segment_buffer_find: out of memory");
        n = tern_memory_list(&e->mem, all, n);
        int rc = TERN_ERR_NOT_FOUND;
        for (size_t i = 0; i < n && rc; i++)
            if (strcmp(all[i].name, name) == 0) {
                if (out)
                    *out = all[i];
                rc = 0;
            }
        free(all);
        return rc ? tern_engine_fail(e, rc, "segment_buffer_find: no buffer named \"%s\" "
                                     "registered on this engine", name)
                  : 0;
    }
    tern_segment *s = open_seg(e, id, "segment_buffer_find");
    if (!s)
        return TERN_ERR_NOT_FOUND;
    if (find_cached(s, name, out))
        return 0;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = refresh(e, s, msg, sizeof msg);
    if (find_cached(s, name, out))
        return 0;
    return tern_engine_fail(e, TERN_ERR_NOT_FOUND,
                            "segment_buffer_find: segment %s has no buffer named \"%s\"%s%s",
                            s->name, name, rc ? "; refetching its descriptor failed: " : "",
                            rc ? msg : "");
}

/* ---- memory tern allocates (core/memory/allocs.c holds it) ---------------------------------------------- */

TERN_EXPORT int tern_alloc_memory(tern_engine *e, size_t len, const char *location,
                                  const char *name, void **out)
{
    if (!e)
        return TERN_ERR_INVAL;
    if (!out)
        return tern_engine_fail(e, TERN_ERR_INVAL, "alloc_memory: out is NULL");
    char msg[TERN_ERRMSG_MAX] = "";
    void *p = NULL;
    int rc = tern_allocs_new(e->allocs, len, &p, msg, sizeof msg);
    if (rc)
        return tern_engine_fail(e, rc, "%s", msg);
    size_t got = len;
    tern_allocs_find(e->allocs, p, &got);
    rc = tern_register_memory_named(e, p, got, location, name);
    if (rc) { /* the registration's message stays the engine's last error */
        tern_allocs_release(e->allocs, p);
        return rc;
    }
    *out = p;
    return 0;
}

TERN_EXPORT int tern_free_memory(tern_engine *e, void *p)
{
    if (!e)
        return TERN_ERR_INVAL;
    if (!tern_allocs_find(e->allocs, p, NULL))
        return tern_engine_fail(e, TERN_ERR_NOT_FOUND,
                                "free_memory: %p was not returned by tern_alloc_memory on "
                                "this engine (or is freed already)", p);
    /* Unregistered first: no peer copies into the pages once they are gone. */
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_memory_unregister(&e->mem, p, msg, sizeof msg);
    if (rc && rc != TERN_ERR_NOT_FOUND)
        return tern_engine_fail(e, rc, "%s", msg);
    tern_allocs_release(e->allocs, p);
    return 0;
}
