/* fuzz/handshake_desc.c: tern_mooncake_hs_decode (the handshake descriptor
 * and its reference keys, as the engine reads a Connection body) on
 * arbitrary text; a body that decodes must encode and decode again to the
 * same fields. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc/handshake_desc.h"
#include "peer/mooncake_compat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    char *json = malloc(size ? size : 1); /* not NUL-terminated on purpose */
    memcpy(json, data, size);
    tern_handshake_desc a;
    tern_mooncake_hs ak;
    if (tern_mooncake_hs_decode(json, size, &a, &ak, err, sizeof err) != 0) {
        if (getenv("FUZZ_VERBOSE")) /* seed check: why it was refused */
            fprintf(stderr, "refused: %s\n", err);
    } else {
        char *again = tern_mooncake_hs_encode(&a, &ak);
        if (again) {
            tern_handshake_desc b;
            tern_mooncake_hs bk;
            if (ak.nqp > TERN_MOONCAKE_HS_MAX_QP) /* the per-key limits (docs/protocol.md) */
                abort();
            if (tern_mooncake_hs_decode(again, strlen(again), &b, &bk, err, sizeof err) != 0) {
                if (strstr(err, "keys, at most")) { /* encode added the reference keys */
                    free(again);
                    tern_handshake_desc_clear(&a);
                    free(json);
                    return 0;
                }
                abort(); /* our own output must decode */
            }
            if (strcmp(a.local_nic_path, b.local_nic_path) || ak.nqp != bk.nqp ||
                ak.local_lid != bk.local_lid || strcmp(a.reply_msg, b.reply_msg) ||
                memcmp(ak.qp_num, bk.qp_num, ak.nqp * sizeof ak.qp_num[0]))
                abort();
            tern_handshake_desc_clear(&b);
            free(again);
        }
        tern_handshake_desc_clear(&a);
    }
    free(json);
    return 0;
}
