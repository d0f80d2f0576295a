/* tests/support/helpers/fault_peer.c: a target engine in its own process for
 * tests/system/test_faults.c and tests/core/test_auth.c (public API only).
 *
 *   tern-test-fault-peer [auth_secret_file]
 * Creates an engine (tcp, p2p, 127.0.0.1:0, io_timeout 2 s), registers
 * 16 MiB (log level warn with a secret, so refusals show on stderr), prints "READY <server name> <addr> <len>" and waits until stdin
 * closes (or it is killed: the point of the fault tests). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern/tern.h"

#define LEN (16u << 20)

int main(int argc, char **argv)
{
    char yaml[1024], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: tcp\n"
             "io_timeout_ms: 2000\nconnect_timeout_ms: 2000\nlog_level: %s\n%s%s%s",
             argc > 1 ? "warn" : "error", argc > 1 ? "auth_secret_file: \"" : "", argc > 1 ? argv[1] : "",
             argc > 1 ? "\"\n" : "");
    tern_engine *e = tern_engine_create_from_yaml(yaml, "fault_peer", err, sizeof err);
    if (!e) {
        fprintf(stderr, "fault_peer: %s\n", err);
        printf("FAILED %s\n", err);
        return 1;
    }
    uint8_t *buf = calloc(1, LEN);
    if (!buf || tern_register_memory(e, buf, LEN, NULL) != 0) {
        fprintf(stderr, "fault_peer: register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    printf("READY %s %" PRIuPTR " %u\n", tern_engine_server_name(e), (uintptr_t)buf, LEN);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin))
        ;
    tern_unregister_memory(e, buf);
    tern_engine_destroy(e);
    free(buf);
    return 0;
}
