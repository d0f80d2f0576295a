/* core/plugin/epstore.h: the endpoint cache keyed by (local device, peer NIC path).
 * Bounded capacity with SIEVE eviction (FIFO selectable).
 * Entries are reference counted: an evicted or removed endpoint is closed
 * (close callback) only when its last user releases it.  Thread-safe. */
#ifndef TERN_CORE_EPSTORE_H
#define TERN_CORE_EPSTORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tern_epstore tern_epstore;
typedef struct tern_ep_ref tern_ep_ref;   /* a held reference */

typedef void (*tern_ep_close_fn)(void *arg, void *ep);

tern_epstore *tern_epstore_create(size_t capacity, int policy /* TERN_EVICT_* */,
                                  tern_ep_close_fn close_fn, void *arg);
/* Closes every endpoint, each exactly once.  One still held (a slice in a
 * transport) is freed by the release of its last reference, which the
 * transport's close usually triggers; if one is still held after that, the
 * store itself is left allocated (a late release must not touch freed
 * memory). */
void tern_epstore_destroy(tern_epstore *s);

/* Key: "<local device>|<peer nic path>" built by tern_epstore_key(). */
void tern_epstore_key(char *out, size_t outlen, const char *local_dev,
                      const char *peer_nic_path);

/* Find and hold; NULL if absent.  *ep receives the endpoint. */
tern_ep_ref *tern_epstore_get(tern_epstore *s, const char *key, void **ep);
/* Insert and hold.  If the key is already present, the new ep is NOT
 * inserted (the caller closes it) and the existing one is held and returned
 * in *ep with TERN_ERR_EXISTS.  ref may be NULL: insert without holding.
 * Inserting into a full store evicts one entry (SIEVE or FIFO); an evicted
 * endpoint still held is closed by the release that drops its last ref. */
int tern_epstore_insert(tern_epstore *s, const char *key, void *ep_in, void **ep,
                        tern_ep_ref **ref);
void tern_epstore_release(tern_epstore *s, tern_ep_ref *ref);
/* One more hold on an endpoint already held through ref (release it like
 * any other).  The submitter keeps one across a transport's submit call:
 * the slices' own holds may all drop inside it, when the transport
 * completes them before it returns. */
void tern_epstore_hold(tern_ep_ref *ref);
/* Release without closing on this thread: when it was the last reference
 * of a removed endpoint, the endpoint waits for tern_epstore_reap()
 * (returns 1 then).  For threads that must not call ep_close, e.g. a
 * transport's own thread inside complete(). */
int tern_epstore_release_deferred(tern_epstore *s, tern_ep_ref *ref);
/* Close the endpoints release_deferred left; returns how many. */
size_t tern_epstore_reap(tern_epstore *s);
/* Drop the key (e.g. after an endpoint failed); closed when unreferenced. */
void tern_epstore_remove(tern_epstore *s, const char *key);

/* Drop every endpoint to a NIC of peer "host:port" (its segment was
 * closed); each is closed when unreferenced.  Returns how many. */
size_t tern_epstore_remove_peer(tern_epstore *s, const char *peer);

typedef struct tern_epstore_stats {
    uint64_t hits, misses, evictions, closes;
    size_t size, capacity;
} tern_epstore_stats;
void tern_epstore_stats_get(tern_epstore *s, tern_epstore_stats *out);

#endif
