/* tests/support/shm_common.h: what the same-host transport's two-process tests
 * share (test_shm_integration.c, test_shm_fallback.c): starting
 * tests/support/helpers/shm_peer.c with its transports, and an initiator
 * engine with a given transport list.  shm_common.c holds the code; the
 * rest of the harness is integration_common.h (include that first). */
#ifndef TERN_TESTS_SHM_COMMON_H
#define TERN_TESTS_SHM_COMMON_H

#include "integration_common.h"

#define SHM_PEER_PATH TERN_BUILD_DIR "/bin/tern-test-shm-peer"

/* The peer with transports xp ("shm,tcp", "shm", "tcp") at server name
 * (NULL: 127.0.0.1:0). */
void shm_peer_start(it_peer *p, const char *xp, const char *name);

/* The peer ("shm,tcp", 127.0.0.1:0) in a pid namespace of its own
 * (unshare --pid); skips the test when not root. */
void shm_peer_start_in_pid_ns(it_peer *p);

/* An initiator engine whose transports are xp ("shm", "shm,tcp"). */
tern_engine *shm_engine_new(const char *xp, const char *who);

#endif
