/* tern/accept.h: what every listener of tern (the handshake daemon, the
 * tcp data port, the Mooncake-format port) does when accept() fails for
 * want of a resource (docs/protocol.md, "Connection budgets"): it stops
 * watching the listening socket, which stays readable while connections
 * wait in its backlog (watching it would spin a core), and watches it
 * again once one of its connections closed or TERN_ACCEPT_PAUSE_MS passed
 * (the descriptors may be held by someone else in the process). */
#ifndef TERN_ACCEPT_H
#define TERN_ACCEPT_H

#include <errno.h>

#define TERN_ACCEPT_PAUSE_MS 100

/* Whether accept() failed with errno e for want of a resource that time or
 * a closing connection gives back: open files (EMFILE, ENFILE), buffers or
 * memory (ENOBUFS, ENOMEM). */
static inline int tern_accept_starved(int e)
{
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

#endif
