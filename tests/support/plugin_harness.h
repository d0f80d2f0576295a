/* tests/support/plugin_harness.h: the host side of a transport plugin that
 * a test drives directly through its vtable (test_tcp_transport,
 * test_tcp_pool, test_shm_transport): the plugin dlopen()ed from the build
 * tree, host services whose configuration is a short list of key=value
 * options, and an endpoint to the segment another instance advertises.
 * What a test does with completed slices stays in the test (its
 * complete() callback).  plugin_harness.c holds the code. */
#ifndef TERN_TESTS_PLUGIN_HARNESS_H
#define TERN_TESTS_PLUGIN_HARNESS_H

#include <stdarg.h>

#include "tern/transport.h"

/* One plugin instance's host side.  It is the FIRST member of the test's
 * own instance struct: services.host is that instance, the plugin hands it
 * back to every callback, and config_get reads the options through it. */
struct tern_auth;

typedef struct plugin_host {
    tern_host_services hs;
    const char *keys[8], *vals[8];
    int nkv;
    /* set before plugin_host_start, both optional: the shared secret the
     * host service auth_mac uses (none: auth_mac absent) and the server
     * name (default 127.0.0.1:0) */
    const struct tern_auth *auth;
    const char *server_name;
} plugin_host;

/* dlopen()s the plugin at path (*dl keeps the handle for dlclose) and
 * returns its vtable; fails the test when either is missing. */
const tern_transport *plugin_load(const char *path, void **dl);

/* Fills h: options from key, value pairs up to a NULL key (8 at most);
 * services that log warnings and errors to stderr (everything with
 * TERN_TEST_VERBOSE set), use the core's descriptor functions and malloc,
 * name the server 127.0.0.1:0 and hand slices to complete.  Then starts
 * an instance of t on them and returns its context. */
void *plugin_host_start(plugin_host *h, const tern_transport *t, int io_timeout_ms,
                        void (*complete)(void *host, tern_slice *s), const char *k0,
                        va_list ap);

/* An endpoint from the instance from to the segment the instance to
 * advertises, opened and connected (the one-sided handshake tcp uses). */
void *plugin_ep_to(const tern_transport *t, void *from, void *to);

/* A slice to submit (calloc()ed, the caller frees it): status 12345 until
 * the plugin sets it, core pointing at the slice itself so that a test can
 * tell a slice handed back twice or one it never submitted. */
tern_slice *plugin_slice_new(int op, void *local, uint64_t lkey, uint64_t remote, uint64_t rkey,
                             uint64_t len);

#endif
