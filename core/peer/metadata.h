/* core/peer/metadata.h: where segment descriptors are published and fetched.
 * Implemented in metadata.c.  Backends by URI: "p2p" (built in: publish keeps the
 * descriptor for our daemon's Metadata replies, fetch asks the peer's
 * daemon), or a plugin libtern-meta-<scheme>.so (include/tern/metastore.h)
 * under keys "tern/<cluster-id>/segments/<segment-name>". */
#ifndef TERN_CORE_METADATA_H
#define TERN_CORE_METADATA_H

#include <stddef.h>

#include "config/config.h"

typedef struct tern_metadata tern_metadata;

int tern_metadata_open(const tern_config *cfg, tern_metadata **out, char *err, size_t errlen);
void tern_metadata_close(tern_metadata *md);
const char *tern_metadata_backend(const tern_metadata *md); /* "p2p", "redis", ... */

/* Publish (replace) our descriptor. */
int tern_metadata_publish(tern_metadata *md, const char *segment, const char *json,
                          char *err, size_t errlen);
/* Fetch a peer's descriptor (*json malloc()ed).  TERN_ERR_NOT_FOUND if none. */
int tern_metadata_fetch(tern_metadata *md, const char *segment, char **json,
                        char *err, size_t errlen);
/* The same without waiting for the store: the descriptor is handed to the
 * keep-alive thread, which writes it at once and, while the store fails or
 * hangs, again with a backoff (100 ms doubling up to the keep-alive
 * period); a newer one replaces it.  p2p: as tern_metadata_publish.  For
 * callers holding a lock that requests take (memory.c). */
int tern_metadata_publish_async(tern_metadata *md, const char *segment, const char *json,
                                char *err, size_t errlen);
/* Waits at most ms for the descriptors handed to publish_async to be in
 * the store; 1 when they are (p2p: always), 0 when still pending (they are
 * written later).  Called with no lock held. */
int tern_metadata_publish_wait(tern_metadata *md, int ms);
int tern_metadata_unpublish(tern_metadata *md, const char *segment, char *err, size_t errlen);
/* p2p: the descriptor our daemon serves (copy, malloc()ed), NULL if none. */
char *tern_metadata_local_json(tern_metadata *md);

/* ---- listing, the handshake side, keys --------------------------------- */

/* Every published segment name of this cluster (p2p: our own, if any);
 * cb returns non-zero to stop. */
int tern_metadata_list(tern_metadata *md, int (*cb)(void *arg, const char *segment),
                       void *arg, char *err, size_t errlen);
/* The reply to a Metadata handshake request (the p2p backend's server side):
 * our descriptor, or {"reply_msg": "..."} when none is published.  For the
 * engine's tern_hs_handler; *reply malloc()ed. */
int tern_metadata_hs_reply(tern_metadata *md, const char *request, size_t len, char **reply,
                           size_t *replylen);
/* The store key of a segment: "tern/<cluster-id>/segments/<segment>". */
int tern_metadata_key(const tern_metadata *md, const char *segment, char *key, size_t keylen);

/* p2p fetches prove the shared secret (control/auth.h); the
 * engine keeps ownership of auth and frees it after tern_metadata_close. */
struct tern_auth;
void tern_metadata_set_auth(tern_metadata *md, const struct tern_auth *auth);
/* Where peers' other handshake addresses are kept (the engine's, borrowed):
 * a p2p fetch tries them when the segment's own address does not connect,
 * and whoever decodes a fetched descriptor notes them there. */
struct tern_addrbook;
void tern_metadata_set_addrbook(tern_metadata *md, struct tern_addrbook *book);
struct tern_addrbook *tern_metadata_addrbook(const tern_metadata *md);

/* With a store: our entry lives ttl_s seconds unless refreshed, and is
 * written again every period_ms (defaults 5000 ms and 20 s; docs/protocol.md,
 * Metadata store entries).  Takes effect from the next write. */
void tern_metadata_set_keepalive(tern_metadata *md, int period_ms, int ttl_s);
/* Keep-alive rounds done so far (tests wait on it). */
unsigned long tern_metadata_keepalive_rounds(tern_metadata *md);

#endif
