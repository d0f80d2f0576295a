/* core/engine/notify.h: notifications, both directions (see docs/api.md,
 * Notifications; docs/protocol.md, Notify).
 *
 * In: the bounded queue the daemon's Notify handler fills and
 * tern_notify_recv empties.  Nothing is dropped: a push to a full queue is
 * refused (the sender gets TERN_ERR_BUSY) and counted.  An eventfd is
 * readable exactly while the queue is not empty.
 *
 * Out: tern_notify_send on the caller's thread, and an outbox with one
 * sender thread (started on first use) for notifications riding on a
 * batch: the completion path must never block, so it only queues them.
 * The object owns its locks. */
#ifndef TERN_CORE_NOTIFY_H
#define TERN_CORE_NOTIFY_H

#include <stdint.h>

#include "engine/engine_state.h"

struct tern_notes *tern_notes_create(tern_engine *e);
/* Stops the sender (what is still in the outbox fails TERN_ERR_CLOSED). */
void tern_notes_free(struct tern_notes *q);
/* Queue one received notification (the daemon's Notify handler): 0, or
 * TERN_ERR_BUSY when the queue is full. */
int tern_notes_push(struct tern_notes *q, const char *from, const char *name, const char *msg);
uint64_t tern_notes_dropped(struct tern_notes *q);

/* Send (name, msg) to the daemon at `peer`; 0 once it queued it, or the
 * error (TERN_ERR_BUSY: its queue was full) with the reason in err. */
int tern_notes_deliver(struct tern_notes *q, const char *peer, const char *name,
                       const char *msg, char *err, size_t errlen);

/* Connections opened for sends so far (one per peer while kept). */
uint64_t tern_notes_connects(struct tern_notes *q);

/* Called by the sender thread with the outcome of an outbox entry. */
typedef void (*tern_notes_done_fn)(void *arg, size_t note, int rc, const char *why);
/* Queue a send for the sender thread; done(arg, note, rc, why) is called
 * from that thread once it is over.  Takes copies of the strings. */
int tern_notes_post(struct tern_notes *q, const char *peer, const char *name, const char *msg,
                    tern_notes_done_fn done, void *arg, size_t note);

#endif
