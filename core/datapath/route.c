/* core/datapath/route.c: path choice and the endpoint for a slice (see
 * route.h). */
#include "datapath/route.h"

#include <stdio.h>
#include <string.h>

#include "desc/segment_desc.h"
#include "datapath/heal.h"
#include "engine/endpoint.h"
#include "base/util.h"

/* The index of topology device d in the segment's device list for this
 * transport (keys are indexed by it).  Resolved by name, so a topology
 * whose indices follow another order (a JSON matrix) still gets the right
 * key; without a device list the topology's index is used. */
static int path_dev_index(const tern_topology *topo, int d, const tern_seg_transport *st,
                          const char *seg, const char *side, char *err, size_t errlen)
{
    if (!st || st->ndevices == 0)
        return d;
    const char *name = tern_topology_device_name(topo, d);
    if ((size_t)d < st->ndevices && strcmp(st->devices[d].name, name) == 0)
        return d;  /* the usual case: the same order */
    for (size_t i = 0; i < st->ndevices; i++)
        if (strcmp(st->devices[i].name, name) == 0)
            return (int)i;
    return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                     "%s device '%s' chosen by the topology is not in the '%s' device list "
                     "of segment '%s' (%zu devices): the descriptor and topology disagree",
                     side, name, st->name, seg, st->ndevices);
}

/* One side: buffer -> location -> device -> key.  forced >= 0: that
 * topology device (chosen by spreading) instead of a pick. */
static int path_side(const tern_segment_desc *seg, tern_topology *topo, const char *transport,
                     uint64_t addr, uint64_t len, int retry, const char *hint, int forced,
                     const char *side, int *dev_out, const char **name_out, uint64_t *key_out, int remote,
                     char *err, size_t errlen)
{
    const tern_buffer_desc *b = tern_segment_find_buffer(seg, addr, len);
    if (!b)
        return tern_errf(err, errlen, TERN_ERR_RANGE,
                         "%s address 0x%llx (+%llu bytes) is not inside any buffer of segment "
                         "'%s' (%zu buffers)%s", side, (unsigned long long)addr,
                         (unsigned long long)len, seg->name, seg->nbuffers,
                         remote ? ": stale descriptor? refetch it" : ": register it first");
    const tern_seg_transport *st = tern_segment_find_transport(seg, transport);
    if (!topo && st)
        topo = st->topology;
    if (!topo)
        return tern_errf(err, errlen, TERN_ERR_NOT_FOUND,
                         "%s segment '%s' has no topology for transport '%s'", side, seg->name,
                         transport);
    int d = forced >= 0 ? forced : tern_topology_select(topo, b->location, retry, hint);
    if (d < 0)
        return tern_errf(err, errlen, d,
                         "%s segment '%s': no usable '%s' device for location '%s' "
                         "(all marked down?)", side, seg->name, transport, b->location);
    int idx = path_dev_index(topo, d, st, seg->name, side, err, errlen);
    if (idx < 0)
        return idx;
    const tern_buffer_keys *k = tern_buffer_find_keys(b, transport);
    if (!k)
        return tern_errf(err, errlen, TERN_ERR_NOT_FOUND,
                         "%s buffer 0x%llx of segment '%s' has no keys for transport '%s'",
                         side, (unsigned long long)b->addr, seg->name, transport);
    if (!remote && k->ndev == 0 && strncmp(b->location, "cuda:", 5) == 0) {
        /* GPU memory the transport did not register: staged, with the
         * staging buffer's key (docs/gpu.md, Registration). */
        *dev_out = idx;
        *name_out = tern_topology_device_name(topo, d);
        *key_out = 0;
        return 0;
    }
    if (idx >= k->ndev || idx >= TERN_MAX_DEVICES)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "%s buffer 0x%llx of segment '%s' has %d '%s' keys; device '%s' "
                         "needs index %d", side, (unsigned long long)b->addr, seg->name,
                         k->ndev, transport, tern_topology_device_name(topo, d), idx);
    *dev_out = idx;
    *name_out = tern_topology_device_name(topo, d);
    *key_out = remote ? k->rkey[idx] : k->lkey[idx];
    return 0;
}

/* "server@nic": memcpy, as snprintf costs more than the rest of the choice. */
static void path_join(char *out, size_t outlen, const char *server, const char *nic)
{
    size_t a = strlen(server), b = strlen(nic);
    if (a + 1 + b >= outlen) { /* not with the descriptor's sizes; truncate */
        snprintf(out, outlen, "%s@%s", server, nic);
        return;
    }
    memcpy(out, server, a);
    out[a] = '@';
    memcpy(out + a + 1, nic, b + 1);
}

int tern_path_choose(const struct tern_segment_desc *local, tern_topology *local_topo,
                     const struct tern_segment_desc *peer, tern_topology *peer_topo,
                     const char *transport, uint64_t local_addr, uint64_t remote_addr,
                     uint64_t len, int retry, tern_path *out, char *err, size_t errlen)
{
    return tern_path_choose_hint(local, local_topo, peer, peer_topo, transport, local_addr,
                                 remote_addr, len, retry, NULL, out, err, errlen);
}

/* The path with both devices chosen (ldev, pdev: topology indices, -1 for
 * a pick at this retry). */
static int path_choose_devs(const struct tern_segment_desc *local, tern_topology *local_topo,
                            const struct tern_segment_desc *peer, tern_topology *peer_topo,
                            const char *transport, uint64_t local_addr, uint64_t remote_addr,
                            uint64_t len, int retry, const char *local_hint, int ldev,
                            int pdev, tern_path *out, char *err, size_t errlen)
{
    if (!local || !peer || !transport || !out)
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "path choice: missing local/peer descriptor, transport or output");
    const char *lname, *pname;
    int rc = path_side(local, local_topo, transport, local_addr, len, retry, local_hint, ldev,
                       "local", &out->local_dev, &lname, &out->lkey, 0, err, errlen);
    if (rc == 0)
        rc = path_side(peer, peer_topo, transport, remote_addr, len, retry, NULL, pdev, "peer",
                       &out->peer_dev, &pname, &out->rkey, 1, err, errlen);
    if (rc)
        return rc;
    path_join(out->local_nic_path, sizeof(out->local_nic_path), local->name, lname);
    path_join(out->peer_nic_path, sizeof(out->peer_nic_path), peer->name, pname);
    return 0;
}

int tern_path_choose_hint(const struct tern_segment_desc *local, tern_topology *local_topo,
                          const struct tern_segment_desc *peer, tern_topology *peer_topo,
                          const char *transport, uint64_t local_addr, uint64_t remote_addr,
                          uint64_t len, int retry, const char *local_hint, tern_path *out,
                          char *err, size_t errlen)
{
    return path_choose_devs(local, local_topo, peer, peer_topo, transport, local_addr,
                            remote_addr, len, retry, local_hint, -1, -1, out, err, errlen);
}

/* First attempt with several NIC pairs to the peer: the least loaded pair
 * (spread.h).  0 with *slot the spread slot and *path set, or *slot -1
 * when there is nothing to spread over (the caller picks as before); or a
 * tern_err.  Segment and memory locks held. */
static int route_spread(tern_cslice *cs, tern_xport *x, const char *hint, tern_path *path,
                        int *slot_out, char *err, size_t errlen)
{
    *slot_out = -1;
    tern_engine *e = cs->b->e;
    tern_segment *seg = cs->seg;
    const tern_seg_transport *st = seg->st; /* the negotiated transport's */
    /* One device on each side (most transports, tcp on loopback): nothing
     * to spread, and no lookup spent on the way. */
    if (!st || !st->topology ||
        tern_topology_device_count(x->topo) * tern_topology_device_count(st->topology) < 2)
        return 0;
    uint64_t laddr = (uint64_t)(uintptr_t)cs->s.local;
    const tern_buffer_desc *lb = tern_segment_find_buffer(e->mem.local_desc, laddr, cs->s.length);
    const tern_buffer_desc *pb = tern_segment_find_buffer(seg->desc, cs->s.remote, cs->s.length);
    if (!lb || !pb)
        return 0; /* the plain choice says what is wrong */
    int ldev, pdev;
    int slot = tern_spread_pick(&seg->spread, x->topo, lb->location, hint, st->topology,
                                pb->location, cs->s.length, &ldev, &pdev);
    if (slot < 0)
        return 0;
    int rc = path_choose_devs(e->mem.local_desc, x->topo, seg->desc, NULL, x->pl->name, laddr,
                              cs->s.remote, cs->s.length, 0, hint, ldev, pdev, path, err,
                              errlen);
    if (rc) {
        tern_spread_done(&seg->spread, slot, cs->s.length, 0, -1);
        return rc;
    }
    *slot_out = slot;
    return 0;
}

/* The peer's buffer is GPU memory: only a transport whose target side
 * reaches it (TERN_CAP_GPU_TARGET, e.g. tcp's bounce buffer) or that takes
 * device addresses (TERN_CAP_GPU_DIRECT) can serve it; another one says
 * UNREACHABLE so the peer moves to the next transport both sides list
 * (docs/gpu.md, Transports).  Segment lock held. */
static int route_gpu_target(const tern_segment *seg, const tern_xport *x, uint64_t remote,
                            uint64_t len, char *err, size_t errlen)
{
    if (x->ops->caps & (TERN_CAP_GPU_DIRECT | TERN_CAP_GPU_TARGET))
        return 0;
    const tern_buffer_desc *b = tern_segment_find_buffer(seg->desc, remote, len);
    if (!b || strncmp(b->location, "cuda:", 5) != 0)
        return 0;
    return tern_errf(err, errlen, TERN_ERR_UNREACHABLE,
                     "peer buffer 0x%llx of segment '%s' is GPU memory (%s), which transport "
                     "'%s' cannot reach on the target side", (unsigned long long)b->addr,
                     seg->name, b->location, x->pl->name);
}

_Static_assert(TERN_OP_READ == TERN_READ && TERN_OP_WRITE == TERN_WRITE &&
                   TERN_CAP_OP(TERN_OP_READ) == TERN_CAP_READ &&
                   TERN_CAP_OP(TERN_OP_WRITE) == TERN_CAP_WRITE,
               "the ABI's operations are the API's opcodes");

/* A transport is sent only the operations its caps carry: for a peer that
 * needs another one it is a transport that cannot reach it, and
 * UNREACHABLE moves the peer to the next transport both sides list
 * (<tern/transport.h>, capability bits).  Segment lock held. */
static int route_op(const tern_segment *seg, const tern_xport *x, int op, char *err,
                    size_t errlen)
{
    if (x->ops->caps & TERN_CAP_OP(op))
        return 0;
    const char *name = op == TERN_OP_WRITE ? "WRITE" : "READ";
    return tern_errf(err, errlen, TERN_ERR_UNREACHABLE,
                     "transport '%s' does not do %s (its caps lack TERN_CAP_%s), which a "
                     "request to segment '%s' needs", x->pl->name, name, name, seg->name);
}

int tern_route(tern_cslice *cs, int connect, char *err, size_t errlen)
{
    tern_engine *e = cs->b->e;
    tern_segment *seg = cs->seg;
    pthread_rwlock_rdlock(&seg->lock);
    if (!seg->desc || seg->gen != cs->seg_gen) {
        pthread_rwlock_unlock(&seg->lock);
        tern_errf(err, errlen, TERN_ERR_CLOSED, "segment %s was closed", seg->name);
        return TERN_ROUTE_SEG_CLOSED;
    }
    tern_xport *x = &e->xports[seg->xport];
    cs->x = x;
    int rc = route_op(seg, x, cs->s.opcode, err, errlen);
    if (rc) {
        pthread_rwlock_unlock(&seg->lock);
        return rc;
    }
    tern_xport_device_revive(x, tern_now_ms());
    tern_cslice_unpair(cs, -1); /* routed before and not sent (a refused submit) */
    tern_path path;
    tern_memory_rdlock(&e->mem);
    /* GPU memory prefers the NIC closest to its GPU (docs/gpu.md, Topology). */
    const char *hint = cs->gpu >= 0 && cs->gpu < TERN_GPU_NEAR_MAX && x->gpu_near[cs->gpu][0]
                           ? x->gpu_near[cs->gpu] : NULL;
    /* A first attempt goes to the least loaded NIC pair; a retry walks the
     * devices in order, so a failing pair is left (docs/topology.md). */
    int pair = -1;
    rc = cs->attempt == 0 ? route_spread(cs, x, hint, &path, &pair, err, errlen) : 0;
    if (rc == 0 && pair < 0)
        rc = tern_path_choose_hint(e->mem.local_desc, x->topo, seg->desc, NULL, x->pl->name,
                                   (uint64_t)(uintptr_t)cs->s.local, cs->s.remote, cs->s.length,
                                   cs->attempt, hint, &path, err, errlen);
    tern_memory_unlock(&e->mem);
    if (rc == 0)
        rc = route_gpu_target(seg, x, cs->s.remote, cs->s.length, err, errlen);
    void *ep = NULL;
    tern_ep_ref *ref = NULL;
    if (rc == 0)
        rc = connect ? tern_endpoint_get(x, seg, &path, &ep, &ref, err, errlen)
                     : tern_endpoint_cached(x, &path, &ep, &ref);
    uint64_t gen = seg->desc_gen;
    pthread_rwlock_unlock(&seg->lock);
    if (rc) { /* no endpoint: a failed connect pauses the pair */
        if (pair >= 0)
            tern_spread_done(&seg->spread, pair, cs->s.length, 0,
                             rc < 0 && tern_heal_drops_endpoint(rc) ? 0 : -1);
        return rc;
    }
    if (pair >= 0) {
        cs->pair = pair;
        cs->sent_ns = tern_now_ns();
    }
    cs->ref = ref;
    cs->s.ep = ep;
    cs->s.lkey = path.lkey;
    cs->s.rkey = path.rkey;
    cs->local_dev = path.local_dev;
    cs->desc_gen = gen;
    tern_strlcpy(cs->peer_nic_path, path.peer_nic_path, sizeof cs->peer_nic_path);
    return 0;
}
