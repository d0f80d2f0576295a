/* kv_decode: the decode side of a KV-cache handoff.  It registers 256
 * free slots as "kv/slots", prints its server name, and waits for
 * prefill's notification "kv-ready" ("<prefill> <block>:<slot> ...").
 * The notification arrives after the data, so the slots are checked at
 * once; then it READs block 0 from prefill's "kv/blocks" and answers
 * "ok" (or what was wrong).
 *
 *   kv_decode <config.yaml>
 *
 * Build: cc kv_decode.c $(pkg-config --cflags --libs tern) -o kv_decode */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>

#define NSLOTS 256
#define BLOCK (128 * 1024)

/* The slots prefill writes into and a block to READ back into: static
 * storage, page-aligned (zeroed), nothing to free on any path. */
static _Alignas(4096) uint8_t slots[(size_t)NSLOTS * BLOCK];
static _Alignas(4096) uint8_t check[BLOCK];

static int fail(tern_engine *e, const char *what)
{
    fprintf(stderr, "kv_decode: %s failed: %s\n", what, tern_engine_last_error(e));
    tern_engine_destroy(e);
    return 1;
}

/* Byte j of prefill's block b (what kv_prefill fills in). */
static uint8_t expect(size_t b, size_t j) { return (uint8_t)(b * 7 + (b * BLOCK + j) % 251); }

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: kv_decode <config.yaml>\n");
        return 2;
    }
    char err[1024];
    tern_engine *e = tern_engine_create(argv[1], err, sizeof err);
    if (!e) {
        fprintf(stderr, "kv_decode: cannot create the engine: %s\n", err);
        return 1;
    }
    tern_memory_region r[2] = {{slots, (size_t)NSLOTS * BLOCK, NULL, "kv/slots"},
                               {check, BLOCK, NULL, NULL}};
    if (tern_register_memory_batch(e, r, 2) != 0)
        return fail(e, "registering the slots");
    printf("READY %s\n", tern_engine_server_name(e));
    fflush(stdout);

    static char msg[TERN_NOTIFY_MAX + 1];
    char name[64];
    if (tern_notify_recv_wait(e, NULL, 0, name, sizeof name, msg, sizeof msg, 60000) != 1)
        return fail(e, "waiting for kv-ready");
    char prefill[256];
    int pos = 0, blocks = 0, bad = 0;
    if (strcmp(name, "kv-ready") != 0 || sscanf(msg, "%255s%n", prefill, &pos) != 1) {
        fprintf(stderr, "kv_decode: unexpected notification %s: %s\n", name, msg);
        tern_engine_destroy(e);
        return 1;
    }
    int b, s, n;
    for (const char *p = msg + pos; sscanf(p, " %d:%d%n", &b, &s, &n) == 2; p += n, blocks++)
        for (size_t j = 0; j < BLOCK; j++)
            bad += slots[(size_t)s * BLOCK + j] != expect((size_t)b, j);
    printf("decode: %d blocks arrived, %d bytes wrong\n", blocks, bad);

    /* READ prefill's block 0 by the name it registered it under. */
    tern_segment_id seg = tern_segment_open(e, prefill);
    tern_buffer_info kv;
    if (seg < 0 || tern_segment_buffer_find(e, seg, "kv/blocks", &kv) != 0)
        return fail(e, "finding kv/blocks");
    if (tern_transfer_sync(e, TERN_READ, check, seg, kv.addr, BLOCK, 60000) != 0)
        return fail(e, "reading block 0");
    for (size_t j = 0; j < BLOCK; j++)
        bad += check[j] != expect(0, j);
    const char *verdict = bad || blocks == 0 ? "bytes differ" : "ok";
    if (tern_notify_send(e, seg, "kv-done", verdict) != 0)
        return fail(e, "answering prefill");
    printf("decode: READ back block 0, %s\n", verdict);
    tern_engine_destroy(e);
    return strcmp(verdict, "ok") == 0 ? 0 : 1;
}
