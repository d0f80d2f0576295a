/* transports/shm/shm.c: the same-host transport ("shm").
 *
 * Two engines on one host move bytes with ONE copy between their
 * registered memory: the initiator calls process_vm_writev (WRITE) or
 * process_vm_readv (READ) on the target process (cross-memory attach), in
 * chunks spread over a pool of worker threads, so one large request uses
 * several cores; a chunk of memory the peer maps is a memcpy (shm_map.c),
 * and a large chunk of private memory goes through the target's relay, two
 * memcpy calls on two CPUs with no page pinned (shm_relay.c).  Otherwise
 * nothing runs in the target: it keeps, in its own memory, the table of its
 * current registrations and its handshake proofs, which the initiator reads
 * the same way.
 *
 * Reachability is proven before an endpoint is used: same boot, same pid
 * namespace, the pid still held by the process that published it (start
 * time), its table at the published address with its random instance, and a
 * fresh nonce of ours that the peer wrote into its own table during the
 * handshake (only the process that answered our handshake can show it).
 * When any of that fails (or the kernel refuses access: ptrace scope, other
 * user, no CAP_SYS_PTRACE) ep_open/ep_connect return TERN_ERR_UNREACHABLE
 * with the cause and the fix, logged once, and the core moves the peer to
 * the next transport both sides share.  The protocol is in
 * docs/protocol.md, "Same-host transport". */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm_internal.h"

#define MAX_WORKERS 64
#define AUTO_WORKERS_MAX 8
_Static_assert(MAX_WORKERS <= SHM_COPY_SLOTS, "a copying[] slot for every worker");

/* One WARN line per distinct cause, so a peer that shm cannot reach costs
 * one log line and not one per slice. */
static int unreachable(shm_ctx *ctx, int rc, const char *err)
{
    if (rc != TERN_ERR_UNREACHABLE)
        return rc;
    pthread_mutex_lock(&ctx->log_lock);
    int fresh = strcmp(ctx->last_unreachable, err) != 0;
    if (fresh)
        snprintf(ctx->last_unreachable, sizeof ctx->last_unreachable, "%s", err);
    pthread_mutex_unlock(&ctx->log_lock);
    if (fresh) /* the host's log names the transport already */
        ctx->host->log(ctx->host->host, TERN_LOG_WARN,
                       "%s; falling back to the next transport both sides share",
                       strncmp(err, "shm: ", 5) == 0 ? err + 5 : err);
    return rc;
}

/* ---- options (tern/plugin_kit.h: one list, the table and where each goes) ----- */

#define SHM_OPTIONS(X)                                                                    \
    X(shm_opts, workers, "workers", TERN_OPT_INT, 0, MAX_WORKERS, NULL, "0",              \
      "copy threads; 0 = the number of online CPUs, at most 8")                           \
    X(shm_opts, chunk_size, "chunk_size", TERN_OPT_SIZE, 4096, 1ll << 30, NULL, "256K",   \
      "bytes one worker copies at a time (a large slice is spread over the workers)")     \
    X(shm_opts, slice_size, "slice_size", TERN_OPT_SIZE, 4096, 64ll << 20, NULL, "4M",    \
      "bytes per slice on this transport")                                                \
    X(shm_opts, max_registrations, "max_registrations", TERN_OPT_INT, 1, 1 << 20, NULL,   \
      "4096", "entries of the published registration table")                              \
    X(shm_opts, unregister_wait_ms, "unregister_wait_ms", TERN_OPT_INT, 0, 600000, NULL,  \
      "1000", "how long a deregistration waits for peers' copies into the range to finish") \
    X(shm_opts, relay_slots, "relay_slots", TERN_OPT_INT, 0, SHM_RELAY_MAX_SLOTS, NULL,   \
      "8", "slots of each relay ring (memory neither side can map is copied in two halves " \
      "through them); 0 = no relay, cross-memory attach only")                            \
    X(shm_opts, relay_slot_size, "relay_slot_size", TERN_OPT_SIZE, 4096,                  \
      SHM_RELAY_MAX_SLOT_SIZE, NULL, "64K",                                               \
      "bytes of one relay slot; a chunk shorter than four slots uses cross-memory attach")      \
    X(shm_opts, relay_timeout_ms, "relay_timeout_ms", TERN_OPT_INT, 10, 600000, NULL,     \
      "10000", "how long a copier waits for the peer's relay before it copies that chunk " \
      "with cross-memory attach and stops using the relay")

static const tern_option shm_options[] = {SHM_OPTIONS(TERN_KIT_OPTION) TERN_KIT_OPTIONS_END};
static const tern_kit_field shm_fields[] = {SHM_OPTIONS(TERN_KIT_FIELD) TERN_KIT_FIELDS_END};

/* ---- init / fini / devices ------------------------------------------------------ */

static int auto_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > AUTO_WORKERS_MAX ? AUTO_WORKERS_MAX : (int)n;
}

static int shm_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    if (!TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) || !host->complete)
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                    "shm: the core offers no complete() host service (ABI 1.1 needed)");
    shm_ctx *ctx = host->alloc(sizeof *ctx);
    if (!ctx)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "shm: out of memory for the context");
    memset(ctx, 0, sizeof *ctx);
    ctx->host = host;
    tern_kit_options_fill(host, shm_options, shm_fields, &ctx->opt);
    ctx->workers = ctx->opt.workers == 0 ? auto_workers() : (int)ctx->opt.workers;
    ctx->chunk = (uint64_t)ctx->opt.chunk_size;
    int64_t cap = ctx->opt.max_registrations;
    pthread_mutex_init(&ctx->log_lock, NULL);
    shm_copiers_init(&ctx->copiers);
    int rc = shm_local_init(&ctx->local, (uint64_t)cap, err, errlen);
    if (rc == 0)
        rc = shm_ident_self(&ctx->self, ctx->local.t->head.instance,
                            (uint64_t)(uintptr_t)ctx->local.t, err, errlen);
    if (rc == 0)
        rc = shm_pool_start(ctx, ctx->workers, &ctx->pool, err, errlen);
    if (rc) {
        shm_local_fini(&ctx->local);
        shm_copiers_fini(&ctx->copiers);
        pthread_mutex_destroy(&ctx->log_lock);
        host->free(ctx);
        return rc;
    }
    host->log(host->host, TERN_LOG_DEBUG, "shm: pid %llu instance %llx, %d workers, chunk %llu",
              (unsigned long long)ctx->self.pid, (unsigned long long)ctx->self.instance,
              ctx->workers, (unsigned long long)ctx->chunk);
    *out = ctx;
    return 0;
}

static void shm_fini(void *vctx)
{
    shm_ctx *ctx = vctx;
    shm_pool_stop(ctx->pool);
    shm_local_fini(&ctx->local);
    shm_copiers_fini(&ctx->copiers);
    pthread_mutex_destroy(&ctx->log_lock);
    ctx->host->free(ctx);
}

static int shm_devices(void *vctx, tern_device_info *out, int max)
{
    (void)vctx;
    if (max < 1)
        return 0;
    memset(&out[0], 0, sizeof out[0]);
    snprintf(out[0].name, sizeof out[0].name, "shm0");
    out[0].numa_node = -1; /* host memory: reachable from every node */
    return 1;
}

/* ---- registrations ---------------------------------------------------------------- */

/* The registration handle IS the key (never 0): nothing to allocate, so
 * nothing is left behind when fini runs with registrations still in the
 * table (the table goes with the context). */
static int shm_mr_register(void *vctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                           char *err, size_t errlen)
{
    shm_ctx *ctx = vctx;
    if (!addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                    "shm: cannot register %p length %zu: empty or wraps around", addr, len);
    uint64_t key = 0;
    shm_entry e = {.addr = (uintptr_t)addr, .len = len};
    shm_backing_find(&e); /* a shared file (tern_alloc_memory): peers may map it */
    if (shm_local_add(&ctx->local, &e, &key) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM,
                    "shm: %llu registrations already: raise transports.shm.max_registrations",
                    (unsigned long long)ctx->local.t->head.cap);
    memset(keys, 0, sizeof *keys);
    keys->ndev = 1;
    keys->lkey[0] = keys->rkey[0] = key;
    *out = (void *)(uintptr_t)key;
    return 0;
}

/* After it returns no byte lands in the range: the copies checked against
 * the table before the change are waited for, up to unregister_wait_ms
 * (shm_drain.c); what is left then is logged. */
static int shm_mr_deregister(void *vctx, void *mr)
{
    shm_ctx *ctx = vctx;
    uint64_t seq = 0;
    int rc = shm_local_remove(&ctx->local, (uint64_t)(uintptr_t)mr, &seq);
    char msg[256];
    int wait_ms = (int)ctx->opt.unregister_wait_ms;
    if (rc == 0 && shm_drain_wait(ctx, seq, wait_ms, msg, sizeof msg) != 0)
        ctx->host->log(ctx->host->host, TERN_LOG_WARN, "deregistering key %llu: %s",
                       (unsigned long long)(uintptr_t)mr, msg);
    return rc;
}

static int shm_segment_describe(void *vctx, tern_desc *out)
{
    shm_ctx *ctx = vctx;
    return shm_ident_put(ctx->host, out, &ctx->self);
}

/* ---- endpoints ------------------------------------------------------------------- */

static shm_ep *ep_new(shm_ctx *ctx, int passive)
{
    shm_ep *ep = ctx->host->alloc(sizeof *ep);
    if (!ep)
        return NULL;
    memset(ep, 0, sizeof *ep);
    ep->ctx = ctx;
    ep->passive = passive;
    atomic_init(&ep->refs, 1);
    atomic_init(&ep->running, 0);
    atomic_init(&ep->closing, 0);
    pthread_mutex_init(&ep->lock, NULL);
    pthread_cond_init(&ep->idle, NULL);
    shm_remote_init(&ep->remote, 0, 0, 0);
    shm_maps_init(&ep->maps);
    shm_relay_tx_init(&ep->tx);
    return ep;
}

static void ep_set_peer(shm_ep *ep, const shm_ident *peer)
{
    ep->peer = *peer;
    shm_remote_fini(&ep->remote);
    shm_remote_init(&ep->remote, (pid_t)peer->pid, peer->table, peer->instance);
    shm_maps_fini(&ep->maps); /* another process: its files are others */
    shm_maps_init(&ep->maps);
}

static int shm_ep_open(void *vctx, const tern_ep_params *params, void **out, char *err,
                       size_t errlen)
{
    shm_ctx *ctx = vctx;
    const char *who = params->peer_name ? params->peer_name : "?";
    if (params->local_dev != 0 || params->peer_dev != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "shm: only device 0 exists (asked local %d, "
                    "peer %d)", params->local_dev, params->peer_dev);
    shm_ident peer;
    char why[400] = "";
    int have = shm_ident_get(ctx->host, params->peer_segment, &peer, why, sizeof why) == 0;
    if (!params->passive) {
        /* Active: the published identity must be reachable before any
         * handshake (other boot, other pid namespace, dead pid, no access). */
        if (!have)
            return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s (peer %s)", why, who);
        int rc = shm_ident_reach(&ctx->self, &peer, why, sizeof why);
        if (rc) {
            tern_kit_errf(err, errlen, rc, "%s (peer %s)", why, who);
            return unreachable(ctx, rc, err);
        }
    }
    shm_ep *ep = ep_new(ctx, params->passive);
    if (!ep)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "shm: out of memory for an endpoint");
    if (have) {
        ep->have_blob = 1;
        ep_set_peer(ep, &peer);
    }
    const char *self = ctx->host->server_name ? ctx->host->server_name : "";
    snprintf(ep->initiator, sizeof ep->initiator, "%s", params->passive ? who : self);
    snprintf(ep->target, sizeof ep->target, "%s", params->passive ? self : who);
    *out = ep;
    return 0;
}

/* The relay (shm_relay.c).  Active: our ring's descriptor and inode, so
 * the target can open and check it; a ring that cannot be made is no
 * relay, not an error.  Passive: "relay" 1 when we serve the initiator's. */
static int describe_relay(shm_ep *ep, tern_desc *out)
{
    shm_ctx *ctx = ep->ctx;
    const tern_host_services *h = ctx->host;
    if (ep->passive)
        return ep->rx ? h->desc_set_u64(out, "relay", 1) : 0;
    if (ctx->opt.relay_slots == 0)
        return 0;
    char why[256];
    if (shm_relay_tx_create(&ep->tx, (uint32_t)ctx->workers, (uint32_t)ctx->opt.relay_slots,
                            (uint32_t)ctx->opt.relay_slot_size, why, sizeof why) != 0) {
        h->log(h->host, TERN_LOG_WARN, "%s; copies use cross-memory attach", why + 5);
        return 0;
    }
    int rc = h->desc_set_u64(out, "relay_fd", (uint64_t)ep->tx.fd);
    return rc ? rc : h->desc_set_u64(out, "relay_ino", ep->tx.ino);
}

/* Passive, the initiator proven: serve its ring when it offers one. */
static void serve_relay(shm_ep *ep, const tern_desc *peer, pid_t pid)
{
    shm_ctx *ctx = ep->ctx;
    const tern_host_services *h = ctx->host;
    uint64_t fd, ino;
    if (ctx->opt.relay_slots == 0 || h->desc_get_u64(peer, "relay_fd", &fd) < 0 ||
        h->desc_get_u64(peer, "relay_ino", &ino) < 0 || fd > INT32_MAX)
        return;
    char why[256];
    shm_relay_rx_stop(ep->rx); /* a second handshake on this endpoint */
    ep->rx = NULL;
    if (shm_relay_rx_start(&ctx->local, &ctx->served_bytes, pid, (int64_t)fd, ino, &ep->rx, why,
                           sizeof why) != 0) {
        h->log(h->host, TERN_LOG_WARN, "no relay for process %ld: %s; its copies use "
               "cross-memory attach", (long)pid, why);
        return;
    }
    uint32_t rings, slots, size;
    shm_relay_rx_describe(ep->rx, &rings, &slots, &size);
    h->log(h->host, TERN_LOG_DEBUG, "relay for process %ld: %u rings of %u slots of %u bytes",
           (long)pid, rings, slots, size);
}

/* Our identity, the handshake's nonce and the proof slot that holds it. */
static int shm_ep_describe(void *vep, tern_desc *out)
{
    shm_ep *ep = vep;
    shm_ctx *ctx = ep->ctx;
    const tern_host_services *h = ctx->host;
    if (!ep->passive) { /* a fresh nonce, proven to the peer from our table */
        uint64_t bound[2];
        if (shm_random(ep->nonce, sizeof ep->nonce) != 0 ||
            shm_bind(h, 0, ep->nonce, ep->initiator, ep->target, bound) != 0)
            return TERN_ERR_IO;
        ep->slot = shm_local_prove(&ctx->local, ep->peer.instance, bound);
    }
    int rc = shm_ident_put(h, out, &ctx->self);
    rc = rc ? rc : describe_relay(ep, out);
    rc = rc ? rc : h->desc_set_u64(out, "nonce0", ep->nonce[0]);
    rc = rc ? rc : h->desc_set_u64(out, "nonce1", ep->nonce[1]);
    rc = rc ? rc : h->desc_set_u64(out, "proof_slot", ep->slot);
    return rc;
}

/* The peer's table must hold, at its proof slot, our instance and the
 * nonce bound to the direction and both segment names (shm_bind): the
 * target's echo (to_target) or the initiator's own proof. */
static int check_proof(shm_ep *ep, uint64_t slot, uint64_t want_instance, int to_target,
                       char *err, size_t errlen)
{
    shm_proof pr;
    uint64_t want[2];
    int rc = shm_remote_proof(&ep->remote, (unsigned)(slot < SHM_PROOF_SLOTS ? slot : 0), &pr,
                              err, errlen);
    if (rc)
        return rc;
    if (shm_bind(ep->ctx->host, to_target, ep->nonce, ep->initiator, ep->target, want) != 0 ||
        slot >= SHM_PROOF_SLOTS || pr.magic != SHM_PROOF_MAGIC ||
        pr.peer_instance != want_instance || pr.nonce[0] != want[0] || pr.nonce[1] != want[1])
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                    "shm: process %llu does not show this handshake's nonce bound to segments "
                    "%.100s -> %.100s in its table (proof slot %llu): it is not the engine "
                    "that answered the handshake for %.100s (a relayed handshake, or another "
                    "engine's descriptor)", (unsigned long long)ep->peer.pid, ep->initiator,
                    ep->target, (unsigned long long)slot,
                    to_target ? ep->target : ep->initiator);
    return 0;
}

static int read_fields(shm_ep *ep, const tern_desc *peer, shm_ident *id, uint64_t *nonce,
                       uint64_t *slot, char *err, size_t errlen)
{
    const tern_host_services *h = ep->ctx->host;
    int rc = shm_ident_get(h, peer, id, err, errlen);
    if (rc)
        return rc;
    if (h->desc_get_u64(peer, "nonce0", &nonce[0]) < 0 ||
        h->desc_get_u64(peer, "nonce1", &nonce[1]) < 0 ||
        h->desc_get_u64(peer, "proof_slot", slot) < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "shm: the peer's handshake has no nonce "
                    "or proof_slot");
    return 0;
}

/* Active: the reply must come from the process the segment names, and that
 * process must show our nonce in its own table. */
static int connect_active(shm_ep *ep, const tern_desc *peer, const shm_ident *id,
                          const uint64_t nonce[2], uint64_t slot, char *err, size_t errlen)
{
    shm_ctx *ctx = ep->ctx;
    if (id->pid != ep->peer.pid || id->instance != ep->peer.instance ||
        id->table != ep->peer.table || nonce[0] != ep->nonce[0] || nonce[1] != ep->nonce[1])
        return unreachable(ctx, tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                           "shm: the handshake reply names process %llu instance %llx, the "
                           "segment names process %llu instance %llx",
                           (unsigned long long)id->pid, (unsigned long long)id->instance,
                           (unsigned long long)ep->peer.pid,
                           (unsigned long long)ep->peer.instance), err);
    int rc = shm_ident_reach(&ctx->self, &ep->peer, err, errlen);
    if (rc == 0)
        rc = check_proof(ep, slot, ctx->self.instance, 1, err, errlen);
    if (rc)
        return unreachable(ctx, rc, err);
    uint64_t relay = 0;
    if (ctx->host->desc_get_u64(peer, "relay", &relay) == 0 && relay == 1)
        shm_relay_tx_start(&ep->tx, (pid_t)ep->peer.pid);
    ep->connected = 1;
    return 0;
}

/* Passive: prove the initiator as far as we can (its table shows our
 * instance and its nonce).  When we cannot, the endpoint still answers the
 * handshake (the initiator reaching us does not depend on it) but refuses
 * to copy towards that peer. */
static int connect_passive(shm_ep *ep, const tern_desc *peer, const shm_ident *id,
                           const uint64_t nonce[2], uint64_t slot)
{
    shm_ctx *ctx = ep->ctx;
    char why[400] = "";
    int rc = 0;
    if (ep->have_blob && (id->pid != ep->peer.pid || id->instance != ep->peer.instance))
        rc = tern_kit_errf(why, sizeof why, TERN_ERR_UNREACHABLE,
                  "shm: the handshake names process %llu instance %llx, the initiator's "
                  "segment process %llu instance %llx", (unsigned long long)id->pid,
                  (unsigned long long)id->instance, (unsigned long long)ep->peer.pid,
                  (unsigned long long)ep->peer.instance);
    ep_set_peer(ep, id);
    ep->nonce[0] = nonce[0];
    ep->nonce[1] = nonce[1];
    if (rc == 0)
        rc = shm_ident_reach(&ctx->self, id, why, sizeof why);
    if (rc == 0)
        rc = check_proof(ep, slot, ctx->self.instance, 0, why, sizeof why);
    if (rc) {
        ep->unreachable = 1;
        snprintf(ep->why, sizeof ep->why, "%s", why);
    } else {
        shm_copiers_add(&ctx->copiers, id); /* proven: it may copy into us */
        serve_relay(ep, peer, (pid_t)id->pid);
    }
    /* Echo the initiator's nonce, bound to our own name, into our own
     * table: its proof of us (never of the name a relay asked for). */
    uint64_t bound[2] = {0, 0};
    shm_bind(ctx->host, 1, nonce, ep->initiator, ep->target, bound);
    ep->slot = shm_local_prove(&ctx->local, id->instance, bound);
    ep->connected = 1;
    return 0;
}

static int shm_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    shm_ep *ep = vep;
    if (!peer)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "shm: no handshake fields from the peer");
    shm_ident id;
    uint64_t nonce[2], slot;
    int rc = read_fields(ep, peer, &id, nonce, &slot, err, errlen);
    if (rc)
        return rc;
    return ep->passive ? connect_passive(ep, peer, &id, nonce, slot)
                       : connect_active(ep, peer, &id, nonce, slot, err, errlen);
}

/* Slices still queued fail (CLOSED) as workers reach them; waits for the
 * chunks being copied, so nothing touches the peer after it returns. */
static void shm_ep_close(void *vep)
{
    shm_ep *ep = vep;
    atomic_store(&ep->closing, 1);
    pthread_mutex_lock(&ep->lock);
    while (atomic_load(&ep->running) > 0)
        pthread_cond_wait(&ep->idle, &ep->lock);
    pthread_mutex_unlock(&ep->lock);
    shm_relay_rx_stop(ep->rx); /* the initiator's copies through it fail CLOSED */
    ep->rx = NULL;
    shm_ep_unref(ep);
}

/* ---- data path ----------------------------------------------------------------- */

static int bad_slice(const tern_slice *s)
{
    return (s->opcode != TERN_OP_READ && s->opcode != TERN_OP_WRITE) || s->length == 0 ||
           s->remote + s->length < s->remote;
}

static int shm_submit(void *vep, tern_slice *const *slices, int n)
{
    shm_ep *ep = vep;
    shm_ctx *ctx = ep->ctx;
    if (!ep->connected || atomic_load(&ep->closing))
        return TERN_ERR_CLOSED;
    if (ep->unreachable) /* a passive endpoint whose initiator was not proven */
        return unreachable(ctx, TERN_ERR_UNREACHABLE, ep->why);
    shm_job *first = NULL, *last = NULL;
    int i = 0, queued = 0;
    for (; i < n; i++) {
        tern_slice *s = slices[i];
        s->ep = ep;
        s->errmsg[0] = '\0';
        if (bad_slice(s)) {
            s->status = TERN_ERR_INVAL;
            s->transferred = 0;
            snprintf(s->errmsg, sizeof s->errmsg, "shm: bad slice (opcode %d, %llu bytes at "
                     "0x%llx)", s->opcode, (unsigned long long)s->length,
                     (unsigned long long)s->remote);
            ctx->host->complete(ctx->host->host, s);
            continue;
        }
        shm_job *j = shm_job_new(ctx->pool, ep, s);
        if (!j)
            break; /* the core resubmits the rest */
        if (last)
            shm_job_link(last, j);
        else
            first = j;
        last = j;
        queued++;
    }
    shm_pool_push(ctx->pool, first, last, queued);
    return i > 0 || n == 0 ? i : TERN_ERR_NOMEM;
}

static int shm_query(void *vctx, const char *what, char *out, size_t outlen)
{
    shm_ctx *ctx = vctx;
    (void)what;
    pthread_rwlock_rdlock(&ctx->local.lock);
    unsigned long long n = ctx->local.t->head.n;
    pthread_rwlock_unlock(&ctx->local.lock);
    snprintf(out, outlen,
             "pid=%llu workers=%d chunk=%llu registrations=%llu mapped_bytes=%llu cma_bytes=%llu "
             "relay_bytes=%llu relay_served_bytes=%llu",
             (unsigned long long)ctx->self.pid, ctx->workers, (unsigned long long)ctx->chunk, n,
             (unsigned long long)atomic_load(&ctx->mapped_bytes),
             (unsigned long long)atomic_load(&ctx->cma_bytes),
             (unsigned long long)atomic_load(&ctx->relay_bytes),
             (unsigned long long)atomic_load(&ctx->served_bytes));
    return 0;
}

/* ---- the exported symbol ---------------------------------------------------------- */

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    TERN_KIT_TRANSPORT_HEAD("shm", SHM_VERSION),
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_HANDSHAKE,
    .options = shm_options,
    .default_slice_size = 4u << 20,
    .init = shm_init,
    .fini = shm_fini,
    .devices = shm_devices,
    .mr_register = shm_mr_register,
    .mr_deregister = shm_mr_deregister,
    .segment_describe = shm_segment_describe,
    .ep_open = shm_ep_open,
    .ep_describe = shm_ep_describe,
    .ep_connect = shm_ep_connect,
    .ep_close = shm_ep_close,
    .submit = shm_submit,
    .poll = NULL,
    .ep_reset = NULL,
    .query = shm_query,
};
