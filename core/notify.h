/* core/notify.h: notifications, both directions: tern_notify_send (a
 * Notify frame to a peer's daemon) and the bounded queue the daemon fills
 * for tern_notify_recv (oldest dropped when full).  The queue owns its
 * lock. */
#ifndef TERN_CORE_NOTIFY_H
#define TERN_CORE_NOTIFY_H

#include <stdint.h>

#include "engine_state.h"


struct tern_notes *tern_notes_create(void);
void tern_notes_free(struct tern_notes *q);
/* Queue one received notification (the daemon's Notify handler). */
void tern_notes_push(struct tern_notes *q, const char *from, const char *name, const char *msg);
uint64_t tern_notes_dropped(struct tern_notes *q);

#endif
