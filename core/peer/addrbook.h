/* core/peer/addrbook.h: the other addresses peers' handshake daemons answer on
 * (a descriptor's "handshake_addrs"), learned from each descriptor
 * fetched, so that a later request to a peer whose named address stopped
 * answering (its NIC is down) can try the others (docs/topology.md,
 * Stalled NIC pairs).  Thread-safe; its own lock. */
#ifndef TERN_CORE_ADDRBOOK_H
#define TERN_CORE_ADDRBOOK_H

#include <stddef.h>

#include "desc/desc.h"

typedef struct tern_addrbook tern_addrbook;

tern_addrbook *tern_addrbook_new(void);
void tern_addrbook_free(tern_addrbook *b);
/* What the descriptor of `name` lists now (n == 0 forgets the name). */
void tern_addrbook_note(tern_addrbook *b, const char *name,
                        const char (*addrs)[TERN_DESC_HS_ADDR_MAX], size_t n);
/* The addresses to try for name, best first: the one that answered last
 * (tern_addrbook_answered), then name itself, then the others it lists.
 * Returns how many were written (0: nothing known, try name alone). */
size_t tern_addrbook_order(tern_addrbook *b, const char *name,
                           char (*out)[TERN_DESC_HS_ADDR_MAX], size_t max);
/* addr answered for name: try it first from now on. */
void tern_addrbook_answered(tern_addrbook *b, const char *name, const char *addr);

#endif
