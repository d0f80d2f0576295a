/* core/engine/peer_check.h: who may bring up a passive endpoint.
 *
 * A Connection frame names its sender in local_nic_path ("host:port@dev")
 * and us in peer_nic_path.  Before the passive side opens an endpoint from
 * it, the frame must be vouched for by the segment it names: we call that
 * segment's handshake daemon back (at the address we would use ourselves)
 * with a Probe {"confirm": {...}} carrying the SHA-256 of the frame's JSON,
 * and it answers "confirmed": true only if it has a connect in flight that
 * sent exactly those bytes.  A stranger therefore cannot make us replace an
 * endpoint or point one at an address of its choosing.  With
 * handshake_confirm: false a frame whose segment cannot answer (a Mooncake
 * peer) is accepted all the same, but never over an endpoint we hold.  See
 * docs/protocol.md, "Handshake frames" (Connection confirmation). */
#ifndef TERN_CORE_PEER_CHECK_H
#define TERN_CORE_PEER_CHECK_H

#include <stddef.h>
#include <stdint.h>

struct tern_engine;
struct tern_xport;
struct tern_connecting;
struct tern_handshake_desc;

#define TERN_PEER_CHECK_DIGEST 32
#define TERN_PEER_CHECK_TIMEOUT_MS 3000 /* the confirming call, each of connect and I/O */

/* Passive side: 0 when the frame (json, len), decoded as hd, may bring up
 * an endpoint on transport x; else a refusal code with the reason in msg.
 * *unconfirmed is set when it was accepted without confirmation
 * (handshake_confirm: false): that endpoint must not replace one already
 * held for its key. */
int tern_peer_check_connection(struct tern_engine *e, struct tern_xport *x,
                               const struct tern_handshake_desc *hd, const char *json,
                               size_t len, int *unconfirmed, char *msg, size_t msglen);

/* Either side, under x->conn_lock, after an endpoint was inserted for key:
 * whether a Connection (passive = 1) or our own connect brought it up.  An
 * unconfirmed Connection may replace only the former. */
void tern_peer_check_inserted(struct tern_xport *x, const char *key, int passive);
/* Under x->conn_lock: 1 when the endpoint held for key came from a
 * Connection (or none is held), 0 when it is our own active one. */
int tern_peer_check_replaceable(struct tern_xport *x, const char *key);

/* We opened the segment of peer "host:port": an endpoint a Connection from
 * it brought up earlier may be stale (the peer closed our segment and, with
 * it, its side of the endpoint; an RDMA QP learns nothing of that), so each
 * such key is marked for a fresh handshake on its next use.  Takes
 * x->conn_lock. */
void tern_peer_check_opened(struct tern_xport *x, const char *peer);
/* Under x->conn_lock: 1 while key is marked, else 0.  The mark goes when
 * an endpoint is inserted for key (tern_peer_check_inserted). */
int tern_peer_check_marked(struct tern_xport *x, const char *key);

/* Active side: remember the digest of the request JSON about to be sent
 * for the connect in flight c, so our daemon can confirm it. */
void tern_peer_check_sent(struct tern_xport *x, struct tern_connecting *c, const char *json,
                          size_t len);

/* Our daemon's answer to a Probe: a confirmation reply (malloc()ed JSON)
 * when the probe asks for one, NULL for a plain probe. */
char *tern_peer_check_probe(struct tern_engine *e, const char *json, size_t len);

#endif
