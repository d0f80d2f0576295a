/* fuzz/segment_desc.c: tern_segment_desc_decode on arbitrary text.  What
 * decodes must encode and decode again, and buffer lookups on it (including
 * ranges that overflow) must stay inside the descriptor. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc/segment_desc.h"

static void lookups(const tern_segment_desc *d)
{
    static const uint64_t probes[][2] = {
        {0, 1}, {UINT64_MAX, 1}, {UINT64_MAX - 1, 2}, {1, UINT64_MAX}, {4096, 4096}};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        (void)tern_segment_find_buffer(d, probes[i][0], probes[i][1]);
    for (size_t i = 0; i < d->nbuffers; i++) {
        const tern_buffer_desc *b = &d->buffers[i];
        const tern_buffer_desc *f = tern_segment_find_buffer(d, b->addr, b->length);
        if (b->length && !f)
            abort(); /* a buffer of the descriptor must cover itself */
        if (f && (f->addr > b->addr || b->length > f->length ||
                  b->addr - f->addr > f->length - b->length))
            abort(); /* the cover returned must contain the range */
        (void)tern_buffer_find_keys(b, "tcp");
    }
    (void)tern_segment_find_transport(d, "tcp");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    char *json = malloc(size ? size : 1);
    memcpy(json, data, size);
    tern_segment_desc *d = NULL;
    if (tern_segment_desc_decode(json, size, &d, err, sizeof err) != 0) {
        if (getenv("FUZZ_VERBOSE")) /* seed check: why it was refused */
            fprintf(stderr, "refused: %s\n", err);
    } else {
        lookups(d);
        char *again = tern_segment_desc_encode(d);
        if (again) {
            tern_segment_desc *d2 = NULL;
            if (tern_segment_desc_decode(again, strlen(again), &d2, err, sizeof err) != 0)
                abort(); /* our own output must decode */
            if (d2->nbuffers != d->nbuffers || d2->ntransports != d->ntransports ||
                d2->tcp_data_port != d->tcp_data_port)
                abort();
            tern_segment_desc_free(d2);
            free(again);
        }
        tern_segment_desc_free(d);
    }
    free(json);
    return 0;
}
