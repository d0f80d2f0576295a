/* tests/system/vm/rdma_vm_pair.h: the RDMA VM suite's harness (the test
 * program tern_rdma_vm_suite: rdma_vm_suite.c, rdma_vm_concurrent.c).
 * A side is libtern-rdma.so loaded through the real loader with one
 * registered buffer; a pair is this process (the active side) and a forked
 * child (the passive side), which exchange handshake descriptors and
 * commands over a socketpair. */
#ifndef TERN_TEST_RDMA_VM_PAIR_H
#define TERN_TEST_RDMA_VM_PAIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "desc/desc.h"
#include "plugin/plugin.h"
#include "tern/tern.h"
#include "tern/transport.h"

#define SLICE (64u << 10)
#define BUF_LEN ((17u << 20) + 64)
#define BIG ((16u << 20) + 3)

/* ---- one side: a loaded plugin with one registered buffer ------------------ */

typedef struct side {
    tern_config *cfg;
    tern_plugin_set set;
    tern_plugin *p;
    const tern_transport *t;
    void *ctx;
    uint8_t *buf;
    void *mr;
    tern_mr_keys keys;
    void *ep;
} side;

typedef struct pair {
    side a;
    int fd;
    pid_t pid;
    uint64_t peer_buf, peer_rkey;
} pair;

/* Up to max finished slices (of any side), waiting up to timeout_ms. */
int vm_poll(tern_slice **out, int max, int timeout_ms);

/* opts: extra YAML lines of the rdma entry, each "key: value", ';'-joined */
int side_open(side *s, const char *opts, char *err, size_t errlen);

void side_close(side *s);

int msg_send(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returns a malloc()ed NUL-terminated message or NULL (peer gone). */
char *msg_recv(int fd);

void fill(uint8_t *p, uint64_t len, uint64_t seed);

/* -1 when all bytes match, else the first wrong offset. */
int64_t check(const uint8_t *p, uint64_t len, uint64_t seed);

/* Cut [0, len) like the core does (64 KiB slices, a tail up to 16 KiB more
 * stays with the last one), submit everything, poll everything back.
 * Returns the first failing status (message in err) or 0. */
int xfer(side *s, int opcode, uint64_t loff, uint64_t raddr, uint64_t rkey, uint64_t len,
         char *err, size_t errlen);

void need_rxe(void);

void pair_start(pair *pr, const char *opts_active, const char *opts_passive);

void pair_stop(pair *pr);

/* The handshake: our descriptor out, the peer's (with reply_msg) back. */
int pair_connect(pair *pr, int reuse, char *err, size_t errlen);

/* WRITE len bytes from our buf+loff to the peer's buf+roff and have the peer
 * check them; then READ a fresh pattern back from the peer and check it. */
void write_read(pair *pr, uint64_t len, uint64_t loff, uint64_t roff, uint64_t seed);

#endif
