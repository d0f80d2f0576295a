/* tests/support/stores.h: real Redis and etcd servers on loopback for tests
 * (test_metadata.c, test_metadata_keepalive.c), and the configuration that
 * opens a metadata handle on a store (those and test_metadata_http.c).
 *
 * Each server is a child process of the test (killed with it, output to
 * /dev/null), described by a test_store the caller owns: nothing here is
 * global.  A server that is not installed skips the test with
 * cr_skip_test and the Debian package to install; one that does not come
 * up fails it.  Compile stores.c into the test program and include this
 * after <criterion/criterion.h> with _GNU_SOURCE defined. */
#ifndef TERN_TESTS_STORES_H
#define TERN_TESTS_STORES_H

#include <stddef.h>
#include <sys/types.h>

#include "config/config.h"
#include "peer/metadata.h"

/* The build tree's plugin directory, where the tests find the stores. */
#define TEST_MD_PLUGIN_DIR TERN_BUILD_DIR "/lib/tern"

/* One server.  port 0 before a start: free ports are picked; else the
 * server starts again on the same ports (a restart), empty. */
typedef struct test_store {
    pid_t pid;      /* 0: not running */
    int port;       /* client port on 127.0.0.1 */
    int peer_port;  /* etcd's peer port */
    char dir[256];  /* etcd's data directory ("" when none) */
} test_store;

/* A TCP port on 127.0.0.1 that was free a moment ago (bound, then closed). */
int test_free_port(void);

/* 1 if `name` is a command on $PATH. */
int test_have_binary(const char *name);

/* redis-server without persistence: a restart is empty. */
void test_redis_start(test_store *s);

/* A one-member etcd cluster in a new temporary data directory. */
void test_etcd_start(test_store *s);

/* Kills the server (SIGKILL) and removes its data directory; the ports are
 * kept for a restart. */
void test_store_stop(test_store *s);

/* A configuration for metadata `uri` in `cluster`, plugins from
 * TEST_MD_PLUGIN_DIR, connect and I/O timeouts of timeout_ms. */
tern_config test_md_config(const char *uri, const char *cluster, int timeout_ms);

/* Opens `uri` in `cluster` with 2 s timeouts; the test fails, naming the
 * URI and err, if it does not open. */
tern_metadata *test_md_open(const char *uri, const char *cluster, char *err, size_t errlen);

#endif
