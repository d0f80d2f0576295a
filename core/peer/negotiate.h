/* core/peer/negotiate.h: transport negotiation, a pure function. */
#ifndef TERN_CORE_NEGOTIATE_H
#define TERN_CORE_NEGOTIATE_H

#include <stddef.h>

#include "tern/errors.h"

/* First of local[] (preference order) that is usable here (loaded, and not
 * known to be unable to reach this peer) and that the peer lists; returns
 * its index in local[], or TERN_ERR_NO_TRANSPORT with both lists named in
 * err. */
int tern_negotiate(const char *const *local, size_t nlocal, const int *loaded,
                   const char *const *peer, size_t npeer, const char *peer_name,
                   char *err, size_t errlen);

#endif
