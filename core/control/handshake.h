/* core/control/handshake.h: the control plane as one include: frames
 * (frames.h), the daemon (server.h) and the client (client.h).  The
 * shared-secret exchange is auth.h.  docs/protocol.md, "Handshake frames". */
#ifndef TERN_CORE_CONTROL_HANDSHAKE_H
#define TERN_CORE_CONTROL_HANDSHAKE_H

#include "control/client.h"
#include "control/frames.h"
#include "control/server.h"

#endif
