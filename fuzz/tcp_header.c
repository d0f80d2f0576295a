/* fuzz/tcp_header.c: the TCP transport's request header decode and the
 * target's range check (tcp_mr_find) as pure functions, fast: every 32
 * bytes of input are one request header checked against a table of
 * registered ranges that includes ranges touching 0 and 2^64-1.  A range
 * the check accepts must lie inside one registered range, without
 * wrapping; a length of 0 is never accepted. */
#define _GNU_SOURCE /* pthread_rwlock_t in tcp_internal.h */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_internal.h"
#include "tcp_wire.h"

/* Host ranges (gpu -1), each held once by the table (refs 1), so a pin and
 * its unpin never free them. */
static tcp_mr ranges[] = {
    {0x1000, 0x1000, 1, -1, 1, 0, 0},
    {0x2000, 0x10, 2, -1, 1, 0, 0}, /* adjacent to the first */
    {0x7f0000000000ull, 1ull << 30, 3, -1, 1, 0, 0},
    {UINT64_MAX - 0xfff, 0x1000, 4, -1, 1, 0, 0}, /* ends exactly at 2^64 */
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tcp_ctx *ctx;
    static tcp_mr *table[4];
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        for (int i = 0; i < 4; i++)
            table[i] = &ranges[i];
        ctx->mrs = table;
        ctx->nmr = ctx->capmr = 4;
    }
    for (size_t off = 0; off + TCP_REQ_SIZE <= size; off += TCP_REQ_SIZE) {
        tcp_req q, q2;
        tcp_req_decode(data + off, &q);
        uint8_t again[TCP_REQ_SIZE];
        tcp_req_encode(again, &q);
        if (memcmp(again, data + off, TCP_REQ_SIZE) != 0)
            abort(); /* decode/encode must round-trip byte-exactly */
        tcp_req_decode(again, &q2);
        tcp_mr *m = tcp_mr_pin(ctx, q.addr, q.length); /* the target's own lookup */
        if (!m)
            continue;
        tcp_mr_unpin(m);
        if (q.length == 0 || q.addr < m->addr || q.addr + q.length < q.addr ||
            q.addr - m->addr > m->len || q.length > m->len - (q.addr - m->addr)) {
            fprintf(stderr, "accepted [%#llx, +%#llx) outside [%#llx, +%#llx)\n",
                    (unsigned long long)q.addr, (unsigned long long)q.length,
                    (unsigned long long)m->addr, (unsigned long long)m->len);
            abort();
        }
    }
    return 0;
}
