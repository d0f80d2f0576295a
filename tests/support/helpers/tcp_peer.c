/* tests/support/helpers/tcp_peer.c: a target engine in its own process for
 * tests/transports/test_tcp_integration.c (public API only).
 *
 * It maps GUARD | A | B | GUARD, fills the guards with canary bytes,
 * registers A and B as two adjacent buffers, prints
 *   READY <server name> <addr A> <len A> <addr B> <len B>
 * and then answers commands on stdin:
 *   CHECK  -> "CANARY ok" or "CANARY bad <offset>" (guards untouched?)
 *   EXIT   -> unregisters, destroys the engine, exits 0 (EOF does the same).
 * The body is peer_serve() in tests/support/helpers/peer_common.h. */
#define _GNU_SOURCE
#include "peer_common.h"

static const char *yaml =
    "server_name: 127.0.0.1:0\n"
    "metadata: p2p\n"
    "transports:\n"
    "  - name: tcp\n"
    "slice_size: 64K\n"
    "log_level: warn\n";

int main(void)
{
    return peer_serve(yaml, "tcp_peer");
}
