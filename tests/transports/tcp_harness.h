/* tests/transports/tcp_harness.h: the TCP transport driven directly
 * through its vtable, as test_tcp_transport.c and test_tcp_transport_wire.c
 * (the test program test_tcp_transport) use it: the plugin dlopen()ed from
 * the build's lib/tern directory, plugin instances with host services
 * (support/plugin_harness.h) that queue completed slices, slices run to completion, and target memory with canary
 * bytes around a registered window. */
#ifndef TERN_TEST_TCP_HARNESS_H
#define TERN_TEST_TCP_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tern/tern.h"
#include "plugin_harness.h"
#include "tern/transport.h"

#define PLUGIN_PATH TERN_BUILD_DIR "/lib/tern/libtern-tcp.so"

/* The loaded plugin's vtable (load_plugin(), the suite's init). */
extern const tern_transport *T;

typedef struct inst {
    plugin_host ph; /* first: see plugin_harness.h */
    void *ctx;
    /* slices handed back through the host service complete() */
    pthread_mutex_t cq_mu;
    pthread_cond_t cq_cv;
    tern_slice *cq[4096];
    int ncq;
} inst;

/* The target's memory: a mapping with a registered window in the middle
 * and canary bytes around it. */
typedef struct region {
    uint8_t *map;
    size_t maplen;
    uint8_t *buf;
    size_t len;
    void *mr;
} region;

#define GUARD 8192

/* Up to max completed slices, waiting up to tmo_ms for the first. */
/* The host's complete(): queues s on the instance (host) for inst_poll. */
void inst_complete(void *host, tern_slice *s);
int inst_poll(inst *in, tern_slice **done, int max, int tmo_ms);
void load_plugin(void);
void unload_plugin(void);
/* A plugin instance with optional key=value options (pairs, NULL-ended). */
inst *inst_new(const char *k0, ...);
/* An instance named server_name whose host services prove the secret a
 * (auth_mac), as an engine with auth_secret_file. */
struct tern_auth;
inst *inst_new_auth(const struct tern_auth *a, const char *server_name);
void inst_free(inst *in);
/* An endpoint from `from` to `to`'s advertised data port, connected. */
void *ep_to(inst *from, inst *to);
uint64_t now_ms(void);
/* Submit n slices and poll until all came back (or fail after tmo_ms). */
void run_slices(inst *in, void *ep, tern_slice **s, int n, int tmo_ms);
tern_slice *mk(int op, void *local, uint64_t remote, uint64_t len);
/* One slice, synchronously; returns its status. */
int xfer1(inst *in, void *ep, int op, void *local, uint64_t remote, uint64_t len,
          char *msg, size_t msglen);
void fill(uint8_t *p, size_t n, unsigned seed);
void region_make(inst *in, region *r, size_t len);
void region_check_canaries(const region *r);
void region_free(inst *in, region *r);

#endif
