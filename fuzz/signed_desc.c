/* fuzz/signed_desc.c: signed segment descriptors (core/desc/desc_sign.c) on
 * arbitrary text, as a store writer without the secret could put it under
 * a segment's key.
 *  - tern_desc_verify on the input: it never crashes; what it accepts is the
 *    descriptor of the segment asked for, in tern's shape, carrying the
 *    signed generation;
 *  - when the input is a JSON object with an integer timestamp, it is signed
 *    as our descriptor: verifying that envelope gives back the very bytes,
 *    it is refused for another segment and under another secret, and any
 *    one byte changed in it is refused or still yields the same bytes. */
#define _GNU_SOURCE
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "desc/desc_sign.h"

#define SEG "127.0.0.1:12001"

static tern_auth *secret(const char *s)
{
    tern_auth *a = NULL;
    char err[128];
    if (tern_auth_from_secret(s, strlen(s), &a, err, sizeof err) != 0)
        abort();
    return a;
}

/* What verify accepted must say what the envelope checks promise. */
static void accepted(const char *json)
{
    json_object *d = json_tokener_parse(json), *v;
    if (!d || !json_object_is_type(d, json_type_object) ||
        !json_object_object_get_ex(d, "transports", NULL) ||
        !json_object_object_get_ex(d, "timestamp", &v))
        abort();
    if (json_object_object_get_ex(d, "name", &v) && json_object_is_type(v, json_type_string) &&
        strcmp(json_object_get_string(v), SEG) != 0)
        abort();
    json_object_put(d);
}

static void round_trip(const tern_auth *a, const tern_auth *other, const char *text)
{
    char err[512], *env = NULL, *back = NULL;
    if (tern_desc_sign(a, SEG, text, &env, err, sizeof err) != 0)
        return; /* no integer timestamp, or not an object */
    size_t n = strlen(env);
    int rc = tern_desc_verify(a, SEG, env, n, &back, err, sizeof err);
    if (rc == 0 && strcmp(back, text) != 0)
        abort(); /* the signed bytes come back unchanged */
    free(back);
    back = NULL;
    if (tern_desc_verify(a, "127.0.0.1:12002", env, n, &back, err, sizeof err) == 0 ||
        tern_desc_verify(other, SEG, env, n, &back, err, sizeof err) == 0)
        abort(); /* bound to the segment and the secret */
    for (size_t i = 0; i < n; i += 1 + n / 64) {
        char *m = strdup(env);
        m[i] ^= 0x20;
        if (tern_desc_verify(a, SEG, m, n, &back, err, sizeof err) == 0 && strcmp(back, text))
            abort(); /* a changed envelope never yields other bytes */
        free(back);
        back = NULL;
        free(m);
    }
    free(env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tern_auth *a, *other;
    if (!a) {
        a = secret("fuzz-secret-0123456789");
        other = secret("fuzz-secret-9876543210");
    }
    char *text = malloc(size + 1), err[512], *json = NULL;
    memcpy(text, data, size);
    text[size] = 0;
    if (tern_desc_verify(a, SEG, text, size, &json, err, sizeof err) == 0)
        accepted(json);
    else if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "refused: %s\n", err);
    free(json);
    if (strlen(text) == size)
        round_trip(a, other, text);
    free(text);
    return 0;
}
