/* fuzz/handshake_desc.c: tern_handshake_desc_decode on arbitrary text; a
 * descriptor that decodes must encode and decode again to the same fields. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc/handshake_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    char *json = malloc(size ? size : 1); /* not NUL-terminated on purpose */
    memcpy(json, data, size);
    tern_handshake_desc a;
    if (tern_handshake_desc_decode(json, size, &a, err, sizeof err) != 0) {
        if (getenv("FUZZ_VERBOSE")) /* seed check: why it was refused */
            fprintf(stderr, "refused: %s\n", err);
    } else {
        char *again = tern_handshake_desc_encode(&a);
        if (again) {
            tern_handshake_desc b;
            if (a.nqp > TERN_HS_DESC_MAX_QP) /* the per-key limits (docs/protocol.md) */
                abort();
            if (tern_handshake_desc_decode(again, strlen(again), &b, err, sizeof err) != 0) {
                if (strstr(err, "keys, at most")) { /* encode added the reference keys */
                    free(again);
                    tern_handshake_desc_clear(&a);
                    free(json);
                    return 0;
                }
                abort(); /* our own output must decode */
            }
            if (strcmp(a.local_nic_path, b.local_nic_path) || a.nqp != b.nqp ||
                a.local_lid != b.local_lid || strcmp(a.reply_msg, b.reply_msg) ||
                memcmp(a.qp_num, b.qp_num, a.nqp * sizeof a.qp_num[0]))
                abort();
            tern_handshake_desc_clear(&b);
            free(again);
        }
        tern_handshake_desc_clear(&a);
    }
    free(json);
    return 0;
}
