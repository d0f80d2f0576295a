/* core/datapath/batch_state.c: the batch state that the completion path
 * changes: waking waiters (condition and eventfd), a notification riding on
 * requests advanced as each ends, and the batch's own allocations.  The
 * ground floor of the data path: request.c calls it, it calls nothing of
 * the data path (sending a notification is the notification object's
 * sender thread's job, notify.c, never the completion path's). */
#include "datapath/batch_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine_state.h"
#include "engine/notify.h"
#include "obs/stats.h"
#include "base/util.h"

void tern_batch_signal_locked(tern_batch *b)
{
    pthread_cond_broadcast(&b->cond);
    if (b->efd >= 0) {
        uint64_t one = 1;
        if (write(b->efd, &one, sizeof one) < 0) { /* counter full: already readable */
        }
    }
}

/* Clear the eventfd (lock held): the caller is about to look at state. */
void tern_batch_drain_fd_locked(tern_batch *b)
{
    uint64_t v;
    if (b->efd >= 0 && read(b->efd, &v, sizeof v) < 0) { /* nothing to drain */
    }
}

void tern_batch_notes_clear_locked(tern_batch *b)
{
    for (size_t i = 0; i < b->nnotes; i++) {
        free(b->notes[i].name);
        free(b->notes[i].msg);
        free(b->notes[i].why);
    }
    free(b->notes);
    b->notes = NULL;
    b->nnotes = 0;
}

/* Every batch-owned allocation besides the request array (tern_batch_free). */
void tern_batch_release_locked(tern_batch *b)
{
    tern_stats_flush(b->e->stats, &b->acc); /* nothing is left there: every request ended */
    tern_batch_notes_clear_locked(b);
    if (b->efd >= 0)
        close(b->efd);
    b->efd = -1;
}

static void note_done(void *arg, size_t idx, int rc, const char *why)
{
    tern_batch *b = arg;
    pthread_mutex_lock(&b->lock);
    tern_bnote *nt = &b->notes[idx];
    nt->state = rc;
    if (rc)
        nt->why = tern_strdup(why);
    b->notes_busy--;
    tern_batch_signal_locked(b);
    pthread_mutex_unlock(&b->lock);
}

static void note_fail_locked(tern_batch *b, tern_bnote *nt, int code, const char *why)
{
    nt->state = code;
    nt->why = tern_strdup(why);
    b->notes_busy--;
}

void tern_batch_note_req_locked(tern_batch *b, size_t idx)
{
    int ni = b->reqs[idx].note;
    if (ni < 0 || !b->notes)
        return;
    tern_bnote *nt = &b->notes[ni];
    if (nt->state != 1)
        return;
    if (b->reqs[idx].status != TERN_COMPLETED) {
        char why[256];
        snprintf(why, sizeof why, "not sent: request %zu ended %s", idx,
                 tern_strerror(b->reqs[idx].error ? b->reqs[idx].error : TERN_ERR_INVAL));
        note_fail_locked(b, nt, b->reqs[idx].error ? b->reqs[idx].error : TERN_ERR_INVAL, why);
        return;
    }
    if (--nt->left)
        return;
    /* Every byte is in: hand it to the sender thread (never sent from here). */
    int rc = tern_notes_post(b->e->notes, nt->peer, nt->name, nt->msg, note_done, b, (size_t)ni);
    if (rc)
        note_fail_locked(b, nt, rc, "not sent: the sender could not take it");
    else
        nt->state = 2;
}
