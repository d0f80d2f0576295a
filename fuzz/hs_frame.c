/* fuzz/hs_frame.c: the handshake frame reader as the daemon and the client
 * use it: an 8-byte length header checked against max_frame, then the
 * payload split into type and JSON (old protocol included), then the JSON
 * decoded as a handshake descriptor.  Input: header + payload bytes, like a
 * peer would send them.  Also checks encode/header agree (round trip). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "desc/handshake_desc.h"
#include "peer/mooncake_compat.h"
#include "control/handshake.h"
#include "tern/errors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    if (size < 8)
        return 0;
    uint64_t len = 0;
    /* A small limit so that the fuzzer also reaches "fits". */
    uint64_t max = data[0] & 1 ? TERN_HS_DEFAULT_MAX_FRAME : 4096;
    int rc = tern_hs_frame_header(data, max, &len);
    if (rc == 0 && (len == 0 || len > max))
        abort(); /* accepted a length outside (0, max] */
    if (rc != 0)
        return 0;
    size_t avail = size - 8;
    if (len > avail)
        return 0; /* the daemon would wait for more (or time out) */
    /* Per-type request limits (docs/protocol.md, Handshake frames): the
     * daemon drops a request over its type's limit before decoding it. */
    size_t lim = tern_hs_request_limit(data[8 % size]);
    if (lim == 0 || lim > TERN_HS_LIMIT_REQUEST)
        abort();
    if (len && size > 8 && len > tern_hs_request_limit(data[8]))
        return 0;
    /* The payload as its own allocation, so ASan sees an overread. */
    uint8_t *p = malloc(len);
    memcpy(p, data + 8, len);
    int type = -1;
    const char *json = NULL;
    size_t jlen = 0;
    rc = tern_hs_frame_payload(p, len, &type, &json, &jlen, err, sizeof err);
    if (rc == 0) {
        if (type < 0 || type > 3 || jlen > len || json < (const char *)p ||
            json + jlen > (const char *)p + len)
            abort();
        tern_handshake_desc hd;
        tern_mooncake_hs mk;
        if (tern_mooncake_hs_decode(json, jlen, &hd, &mk, err, sizeof err) == 0)
            tern_handshake_desc_clear(&hd);
        /* Re-encode what was read: the header must give back jlen + 1. */
        uint8_t *f = NULL;
        size_t flen = 0;
        if (tern_hs_frame_encode(type, json, jlen, &f, &flen) == 0) {
            uint64_t l2 = 0;
            if (flen != jlen + 9 || tern_hs_frame_header(f, UINT64_MAX, &l2) != 0 ||
                l2 != jlen + 1 || f[8] != type)
                abort();
            free(f);
        }
    }
    free(p);
    return 0;
}
