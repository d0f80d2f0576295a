/* kv_prefill: the prefill side of a KV-cache handoff.  It computes (here:
 * fills) NBLOCKS blocks of KV cache, WRITEs them into the decode process's
 * free slots -- scattered, block i into slot SLOT(i) -- and attaches a
 * notification that reaches decode only after every byte is there.
 *
 *   kv_prefill <config.yaml> <decode server name>
 *
 * Build: cc kv_prefill.c $(pkg-config --cflags --libs tern) -o kv_prefill */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>

#define NBLOCKS 64
#define BLOCK (128 * 1024)
#define SLOT(i) (((i) * 37 + 11) % 256) /* decode has 256 slots */

/* Our KV blocks: static storage, page-aligned, nothing to free on any path. */
static _Alignas(4096) uint8_t kv[(size_t)NBLOCKS * BLOCK];

static int fail(tern_engine *e, const char *what)
{
    fprintf(stderr, "kv_prefill: %s failed: %s\n", what, tern_engine_last_error(e));
    tern_engine_destroy(e);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: kv_prefill <config.yaml> <decode server name>\n");
        return 2;
    }
    char err[1024];
    tern_engine *e = tern_engine_create(argv[1], err, sizeof err);
    if (!e) {
        fprintf(stderr, "kv_prefill: cannot create the engine: %s\n", err);
        return 1;
    }
    /* Our KV blocks, registered under a name decode can look up. */
    for (size_t i = 0; i < (size_t)NBLOCKS * BLOCK; i++)
        kv[i] = (uint8_t)(i / BLOCK * 7 + i % 251);
    if (tern_register_memory_named(e, kv, (size_t)NBLOCKS * BLOCK, NULL, "kv/blocks") != 0)
        return fail(e, "registering kv/blocks");

    /* Where the data goes: decode's buffer named "kv/slots". */
    tern_segment_id decode = tern_segment_open(e, argv[2]);
    if (decode < 0)
        return fail(e, "opening the decode segment");
    tern_buffer_info slots;
    if (tern_segment_buffer_find(e, decode, "kv/slots", &slots) != 0)
        return fail(e, "finding kv/slots");

    /* One WRITE per block into its slot, and the notification with them. */
    tern_request reqs[NBLOCKS];
    char msg[4096];
    int off = snprintf(msg, sizeof msg, "%s", tern_engine_server_name(e));
    for (int i = 0; i < NBLOCKS; i++) {
        reqs[i] = (tern_request){TERN_WRITE, kv + (size_t)i * BLOCK, decode,
                                 slots.addr + (uint64_t)SLOT(i) * BLOCK, BLOCK, 0};
        off += snprintf(msg + off, sizeof msg - (size_t)off, " %d:%d", i, SLOT(i));
    }
    tern_batch *batch = tern_batch_alloc(e, NBLOCKS);
    if (!batch || tern_batch_submit_with_notify(batch, reqs, NBLOCKS, decode, "kv-ready", msg) < 0)
        return fail(e, "submitting the blocks");
    if (tern_batch_wait(batch, 60000) != 0)
        return fail(e, "writing the blocks");
    tern_batch_free(batch);
    printf("prefill: %d blocks of %d KiB written to %s\n", NBLOCKS, BLOCK / 1024, argv[2]);

    /* Decode READs our blocks back to check them; stay until it is done. */
    char name[64], reply[256];
    if (tern_notify_recv_wait(e, NULL, 0, name, sizeof name, reply, sizeof reply, 60000) != 1)
        return fail(e, "waiting for decode");
    if (strcmp(reply, "ok") != 0) {
        fprintf(stderr, "kv_prefill: decode reported: %s\n", reply);
        tern_engine_destroy(e);
        return 1;
    }
    printf("prefill: decode confirmed\n");
    tern_unregister_memory(e, kv);
    tern_engine_destroy(e);
    return 0;
}
