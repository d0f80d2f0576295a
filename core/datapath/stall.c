/* core/datapath/stall.c: stalled NIC pairs (see stall.h). */
#include "datapath/stall.h"

#include <stdio.h>
#include <string.h>

#include "desc/segment_desc.h"
#include "base/log.h"
#include "base/util.h"

#define STALL_BATCH 64 /* stalls handled per check; more wait for the next */

typedef struct stall_hit {
    tern_segment *seg;
    tern_spread_stall st;
} stall_hit;

/* Reset the endpoint of one stalled pair: the transport fails the slices
 * on it (they come back through complete() and go elsewhere) and keeps
 * the endpoint for later. */
static void stall_reset(tern_engine *e, const stall_hit *h)
{
    tern_segment *seg = h->seg;
    char peer_path[320] = "", key[400], name[256] = "";
    void *ep = NULL;
    tern_ep_ref *ref = NULL;
    tern_xport *x = NULL;
    const char *lname = NULL;
    pthread_rwlock_rdlock(&seg->lock);
    if (seg->desc) {
        x = &e->xports[seg->xport];
        const tern_seg_transport *st = tern_segment_find_transport(seg->desc, x->pl->name);
        const char *pname = st && st->topology
                                ? tern_topology_device_name(st->topology, h->st.pdev) : NULL;
        lname = tern_topology_device_name(x->topo, h->st.ldev);
        tern_strlcpy(name, seg->name, sizeof name);
        if (lname && pname) {
            snprintf(peer_path, sizeof peer_path, "%s@%s", seg->desc->name, pname);
            tern_epstore_key(key, sizeof key, lname, peer_path);
            ref = tern_epstore_get(x->eps, key, &ep);
        }
    }
    pthread_rwlock_unlock(&seg->lock);
    if (!x)
        return;
    int rc = ref ? x->ops->ep_reset(ep) : TERN_ERR_NOT_FOUND;
    if (ref)
        tern_epstore_release(x->eps, ref);
    const char *what = "its slices go to the other pairs";
    if (rc == TERN_ERR_NOT_FOUND)
        what = "its endpoint is not up yet: the connect's own deadline ends it";
    else if (rc)
        what = "the transport cannot reset an endpoint: its slices wait for the transport's "
               "own deadline (io_timeout_ms)";
    tern_log(&e->log, TERN_LOG_WARN,
             "peer %s: NIC pair %s -> %s stalled (nothing done for %llu ms while another "
             "pair moved, %llu bytes in flight): paused for %llu ms, %s", name,
             lname ? lname : "?", peer_path[0] ? peer_path : "?",
             (unsigned long long)h->st.silent_ms, (unsigned long long)h->st.inflight,
             (unsigned long long)h->st.pause_ms, what);
}

void tern_stall_check(tern_engine *e)
{
    stall_hit hits[STALL_BATCH];
    int n = 0;
    uint64_t now = tern_now_ns();
    tern_segments *t = &e->segs;
    /* Slots are taken from the front and never freed before the engine:
     * the first empty one ends the scan. */
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < TERN_MAX_SEGMENTS && t->segs[i] && n < STALL_BATCH; i++) {
        tern_segment *seg = t->segs[i];
        if (!seg->used)
            continue;
        tern_spread_stall st[TERN_SPREAD_PAIRS];
        int k = tern_spread_stalls(&seg->spread, now, st, TERN_SPREAD_PAIRS);
        for (int j = 0; j < k && n < STALL_BATCH; j++)
            hits[n++] = (stall_hit){seg, st[j]};
    }
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < n; i++) /* no lock held: ep_reset completes slices */
        stall_reset(e, &hits[i]);
}
