/* tests/support/helpers/reopen_peer.c: an initiator that opens a segment,
 * moves data, closes it, and opens it again when told (public API only),
 * for tests/lab/test_handshake_addrs.sh.
 *
 *   reopen_peer CONFIG SEGMENT
 *
 * Opens SEGMENT, writes 1 MiB of a pattern into the peer's first buffer,
 * reads it back and compares, closes the segment (the descriptor and the
 * endpoints go), prints "DESCRIPTOR <json>" (the segment's, as fetched)
 * and "OPENED <transport>"; then reads a line from stdin
 * and does it all again, printing "REOPENED <transport> <ms>" (the time the
 * second open took).  Any failure: "FAILED <what>: <engine's message>" on
 * stdout, exit status 1. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tern/tern.h"

#define LEN (1u << 20)

static int failed(tern_engine *e, const char *what)
{
    printf("FAILED %s: %s\n", what, e ? tern_engine_last_error(e) : "");
    fflush(stdout);
    return 1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Open, write a pattern (round k), read it back, compare, close. */
static int round_trip(tern_engine *e, const char *seg, uint8_t *buf, unsigned k, char *xport,
                      size_t xlen)
{
    tern_segment_id s = tern_segment_open(e, seg);
    if (s < 0)
        return failed(e, "segment_open");
    tern_buffer_info b;
    if (tern_segment_buffers(e, s, &b, 1) < 1)
        return failed(e, "segment_buffers");
    for (size_t i = 0; i < LEN; i++)
        buf[i] = (uint8_t)(i * 7u + k);
    if (tern_transfer_sync(e, TERN_WRITE, buf, s, b.addr, LEN, 20000) != 0)
        return failed(e, "write");
    memset(buf, 0, LEN);
    if (tern_transfer_sync(e, TERN_READ, buf, s, b.addr, LEN, 20000) != 0)
        return failed(e, "read");
    for (size_t i = 0; i < LEN; i++)
        if (buf[i] != (uint8_t)(i * 7u + k)) {
            printf("FAILED verify: byte %zu is %u, not %u\n", i, buf[i], (uint8_t)(i * 7u + k));
            return 1;
        }
    if (tern_segment_transport(e, s, xport, xlen) != 0)
        snprintf(xport, xlen, "?");
    char *json = NULL;
    if (k == 1 && tern_segment_descriptor(e, s, &json) == 0) {
        printf("DESCRIPTOR %s\n", json);
        free(json);
    }
    if (tern_segment_close(e, s) != 0)
        return failed(e, "segment_close");
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024] = "", xport[64] = "", line[64];
    if (argc != 3) {
        fprintf(stderr, "usage: reopen_peer CONFIG SEGMENT\n");
        return 2;
    }
    tern_engine *e = tern_engine_create(argv[1], err, sizeof err);
    if (!e) {
        printf("FAILED engine: %s\n", err);
        return 1;
    }
    uint8_t *buf = malloc(LEN);
    int rc = !buf || tern_register_memory(e, buf, LEN, NULL) != 0 ? failed(e, "register") : 0;
    if (!rc)
        rc = round_trip(e, argv[2], buf, 1, xport, sizeof xport);
    if (!rc) {
        printf("OPENED %s\n", xport);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            rc = 1;
    }
    if (!rc) {
        double t0 = now_ms();
        rc = round_trip(e, argv[2], buf, 2, xport, sizeof xport);
        if (!rc)
            printf("REOPENED %s %.0f\n", xport, now_ms() - t0);
    }
    fflush(stdout);
    tern_engine_destroy(e);
    free(buf);
    return rc;
}
