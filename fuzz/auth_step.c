/* fuzz/auth_step.c: the daemon's side of the authentication exchange
 * (tern_auth_hs_server_step) and the client's refusal parser on arbitrary
 * frames.  Input: a sequence of frames separated by "\n--\n"; the first is
 * fed as the hello, the next as the proof (like a peer would send them). */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "tern/errors.h"

static tern_auth *a;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    if (!a && tern_auth_from_secret("fuzzing-shared-secret", 21, &a, err, sizeof err) != 0)
        abort();
    tern_auth_session ss = {.step = 1};
    const uint8_t *p = data, *end = data + size;
    while (p <= end && ss.step) {
        const uint8_t *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
        size_t n = sep ? (size_t)(sep - p) : (size_t)(end - p);
        uint8_t *frame = malloc(n ? n : 1); /* its own allocation: ASan sees overreads */
        memcpy(frame, p, n);
        uint8_t *out = NULL;
        size_t outlen = 0;
        int rc = tern_auth_hs_server_step(a, &ss, frame, n, "fuzz:1", &out, &outlen, err,
                                          sizeof err);
        if (rc < 0 && ss.step == 0)
            abort(); /* refused but marked authenticated */
        if (out && outlen > 8) /* what the client would make of our answer */
            (void)tern_auth_hs_refused((const char *)out + 8, outlen - 8, "fuzz:1", err,
                                       sizeof err);
        (void)tern_auth_hs_refused((const char *)frame, n, "fuzz:1", err, sizeof err);
        free(out);
        free(frame);
        if (rc < 0 || !sep)
            break;
        p = sep + 4;
    }
    return 0;
}
