/* tests/support/helpers/api_peer.c: the receiving process of
 * tests/system/test_api_twoproc.c (public API only).
 *
 *   api_peer recv <len>   registers <len> bytes named "dst", prints
 *                          READY <server name> and then, for each
 *                          notification "round <k> <from>", checks at
 *                          receipt that every byte of the buffer holds
 *                          round k's pattern, and answers "ack <k> <bad>"
 *                          to <from>.  "done" ends it: prints
 *                          RESULT rounds=<n> bad=<rounds with a stale byte>.
 *   api_peer flood         prints READY <server name>, reads nothing until
 *                          a line on stdin, then drains the queue and
 *                          prints RECEIVED <n> REFUSED <refused>.
 * Errors go to stderr with exit status 1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern/tern.h"

static const char *yaml = "server_name: 127.0.0.1:0\n"
                          "metadata: p2p\n"
                          "transports:\n"
                          "  - name: tcp\n"
                          "    slice_size: 16K\n"
                          "log_level: warn\n";

/* Byte i of round k (the sender writes the same). */
static uint8_t pattern(unsigned k, size_t i) { return (uint8_t)(k * 131u + (i >> 12) * 7u + 1u); }

static int die(tern_engine *e, const char *what)
{
    fprintf(stderr, "api_peer: %s: %s\n", what, e ? tern_engine_last_error(e) : "");
    return 1;
}

static int recv_mode(tern_engine *e, size_t len)
{
    uint8_t *buf = aligned_alloc(4096, len);
    if (!buf || tern_register_memory_named(e, buf, len, NULL, "dst") != 0)
        return die(e, "register");
    printf("READY %s\n", tern_engine_server_name(e));
    fflush(stdout);
    unsigned rounds = 0, bad = 0;
    tern_segment_id back = -1;
    char name[64], msg[512];
    for (;;) {
        int rc = tern_notify_recv_wait(e, NULL, 0, name, sizeof name, msg, sizeof msg, 60000);
        if (rc != 1)
            return die(e, rc == 0 ? "no notification for 60 s" : "notify_recv_wait");
        if (strcmp(name, "done") == 0)
            break;
        unsigned k;
        char from[256];
        if (sscanf(msg, "round %u %255s", &k, from) != 2)
            return die(e, "unexpected message");
        int stale = 0;
        for (size_t i = 0; i < len && !stale; i++)
            stale = buf[i] != pattern(k, i);
        bad += (unsigned)stale;
        rounds++;
        if (back < 0 && (back = tern_segment_open(e, from)) < 0)
            return die(e, "segment_open back");
        char ack[64];
        snprintf(ack, sizeof ack, "%u %d", k, stale);
        if (tern_notify_send(e, back, "ack", ack) != 0)
            return die(e, "notify_send ack");
    }
    printf("RESULT rounds=%u bad=%u\n", rounds, bad);
    fflush(stdout);
    tern_unregister_memory(e, buf);
    free(buf);
    return 0;
}

static int flood_mode(tern_engine *e)
{
    printf("READY %s\n", tern_engine_server_name(e));
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return die(e, "stdin closed");
    unsigned n = 0;
    while (tern_notify_recv_wait(e, NULL, 0, NULL, 0, NULL, 0, 1000) == 1)
        n++;
    tern_notify_stats st;
    tern_notify_stats_get(e, &st);
    printf("RECEIVED %u REFUSED %llu\n", n, (unsigned long long)st.refused);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, "api_peer", err, sizeof err);
    if (!e) {
        fprintf(stderr, "api_peer: engine: %s\n", err);
        return 1;
    }
    int rc = 1;
    if (argc == 3 && strcmp(argv[1], "recv") == 0)
        rc = recv_mode(e, strtoul(argv[2], NULL, 0));
    else if (argc == 2 && strcmp(argv[1], "flood") == 0)
        rc = flood_mode(e);
    else
        fprintf(stderr, "usage: api_peer recv <len> | api_peer flood\n");
    tern_engine_destroy(e);
    return rc;
}
