/* core/desc/desc_sign.c: signed segment descriptors (see desc_sign.h and
 * docs/protocol.md, "Signed descriptors").  The envelope is checked before
 * the descriptor inside it is even parsed, so a store writer without the
 * secret reaches nothing but the envelope reader. */
#include "desc/desc_sign.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "desc/desc_json.h"
#include "desc/mooncake_desc.h"
#include "tern/errors.h"
#include "base/util.h"

#define SIGN_LABEL "tern-desc-v1"
#define SIGN_ALG "hmac-sha256"
#define SIGN_HINT "check auth_secret_file: every engine of the cluster must hold the same secret"

/* HMAC over label, segment, generation and the descriptor's exact bytes. */
static int sign_mac(const struct tern_auth *a, const char *segment, uint64_t gen,
                    const char *desc, size_t dlen, uint8_t out[TERN_AUTH_MAC])
{
    size_t sl = strlen(segment), hl = sizeof SIGN_LABEL + sl + 1 + 8;
    uint8_t *msg = malloc(hl + dlen + 1);
    if (!msg)
        return TERN_ERR_NOMEM;
    memcpy(msg, SIGN_LABEL, sizeof SIGN_LABEL); /* with its NUL */
    memcpy(msg + sizeof SIGN_LABEL, segment, sl + 1);
    for (int i = 0; i < 8; i++)
        msg[sizeof SIGN_LABEL + sl + 1 + i] = (uint8_t)(gen >> (56 - 8 * i));
    memcpy(msg + hl, desc, dlen);
    int rc = tern_auth_mac(a, msg, hl + dlen, out);
    free(msg);
    return rc;
}

int tern_desc_sign(const struct tern_auth *a, const char *segment, const char *json, char **out,
                   char *err, size_t errlen)
{
    json_object *d = NULL, *ts;
    uint64_t gen = 0;
    *out = NULL;
    int rc = tern_json_parse_object(json, strlen(json), &d, err, errlen);
    if (rc)
        return rc;
    if (!json_object_object_get_ex(d, "timestamp", &ts) || tern_json_to_u64(ts, &gen) != 0) {
        json_object_put(d);
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "signing the descriptor of %s: it has no integer timestamp", segment);
    }
    json_object_put(d);
    uint8_t mac[TERN_AUTH_MAC];
    char hex[2 * TERN_AUTH_MAC + 1];
    rc = sign_mac(a, segment, gen, json, strlen(json), mac);
    if (rc)
        return tern_errf(err, errlen, rc, "signing the descriptor of %s: HMAC failed", segment);
    tern_auth_hex(mac, TERN_AUTH_MAC, hex);
    json_object *e = json_object_new_object();
    json_object_object_add(e, "tern_signed", json_object_new_int(1));
    json_object_object_add(e, "alg", json_object_new_string(SIGN_ALG));
    json_object_object_add(e, "segment", json_object_new_string(segment));
    json_object_object_add(e, "generation", json_object_new_uint64(gen));
    json_object_object_add(e, "mac", json_object_new_string(hex));
    json_object_object_add(e, "descriptor", json_object_new_string(json));
    *out = tern_strdup(json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN));
    json_object_put(e);
    return *out ? 0 : tern_errf(err, errlen, TERN_ERR_NOMEM, "signing a descriptor: out of memory");
}

int tern_desc_is_signed(const char *text, size_t len)
{
    json_object *e = NULL;
    char e2[8];
    if (tern_json_parse_object(text, len, &e, e2, sizeof e2) != 0)
        return 0;
    int yes = json_object_object_get_ex(e, "tern_signed", NULL);
    json_object_put(e);
    return yes;
}

static const char *str_of(json_object *o, const char *key, size_t *len)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    if (len)
        *len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

/* The envelope's MAC, segment and generation.  0 or TERN_ERR_AUTH. */
static int check_envelope(const struct tern_auth *a, const char *segment, json_object *e,
                          const char **desc, size_t *dlen, uint64_t *gen, char *err,
                          size_t errlen)
{
    json_object *g;
    const char *alg = str_of(e, "alg", NULL), *seg = str_of(e, "segment", NULL);
    const char *mac = str_of(e, "mac", NULL);
    uint8_t got[TERN_AUTH_MAC], want[TERN_AUTH_MAC];
    *desc = str_of(e, "descriptor", dlen);
    if (!json_object_object_get_ex(e, "tern_signed", NULL))
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: its descriptor is not signed; with auth_secret_file set "
                         "only descriptors signed with the shared secret are used (it was "
                         "written by an engine without the secret, a Mooncake engine or a "
                         "third party that can write the metadata store; " SIGN_HINT ")",
                         segment);
    if (!alg || strcmp(alg, SIGN_ALG) || !seg || !mac || !*desc ||
        !json_object_object_get_ex(e, "generation", &g) || tern_json_to_u64(g, gen) ||
        tern_auth_unhex(mac, strlen(mac), got, sizeof got))
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: its signed descriptor is malformed (it needs alg \""
                         SIGN_ALG "\", segment, generation, mac of 64 hex digits and "
                         "descriptor)", segment);
    if (strcmp(seg, segment) != 0)
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: the descriptor under its key is signed for segment "
                         "%.200s, not for %s (another engine's descriptor was put there); "
                         "refused", segment, seg, segment);
    int rc = sign_mac(a, segment, *gen, *desc, *dlen, want);
    if (rc)
        return tern_errf(err, errlen, rc, "segment %s: checking its signature: HMAC failed",
                         segment);
    if (!tern_auth_equal(want, got, sizeof want))
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: the signature of its descriptor does not match: it was "
                         "altered after signing or signed with another secret (" SIGN_HINT ")",
                         segment);
    return 0;
}

/* The foreign data format ("wire", the one key the core reserves in an
 * address blob) any transport of the descriptor points at, or NULL. */
static const char *foreign_wire(json_object *d)
{
    json_object *ts, *addr;
    if (!json_object_object_get_ex(d, "transports", &ts) ||
        !json_object_is_type(ts, json_type_array))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(ts); i++) {
        json_object *t = json_object_array_get_idx(ts, i);
        const char *w = json_object_is_type(t, json_type_object) &&
                                json_object_object_get_ex(t, "addr", &addr) &&
                                json_object_is_type(addr, json_type_object)
                            ? str_of(addr, "wire", NULL)
                            : NULL;
        if (w)
            return w;
    }
    return NULL;
}

/* What the signed descriptor itself must say: tern's shape, its segment,
 * its generation, no unauthenticated wire. */
static int check_inner(const char *segment, json_object *d, uint64_t gen, char *err,
                       size_t errlen)
{
    json_object *ts;
    uint64_t t = 0;
    const char *name = str_of(d, "name", NULL);
    if (tern_mooncake_desc_is(d))
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: its descriptor is in Mooncake's shape, whose data format "
                         "cannot prove the shared secret; refused because auth_secret_file is "
                         "set", segment);
    if (!json_object_object_get_ex(d, "timestamp", &ts) || tern_json_to_u64(ts, &t) || t != gen)
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: its signed descriptor's timestamp is not the signed "
                         "generation %llu; refused", segment, (unsigned long long)gen);
    if (name && strcmp(name, segment) != 0)
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: its signed descriptor names segment %.200s; refused",
                         segment, name);
    const char *wire = foreign_wire(d);
    if (wire)
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: its descriptor lists a transport on a foreign data "
                         "format (\"wire\": \"%.40s\"), which cannot prove the shared "
                         "secret; refused because auth_secret_file is set", segment, wire);
    return 0;
}

int tern_desc_verify(const struct tern_auth *a, const char *segment, const char *text,
                     size_t len, char **json, char *err, size_t errlen)
{
    json_object *e = NULL, *d = NULL;
    const char *desc = NULL;
    size_t dlen = 0;
    uint64_t gen = 0;
    char msg[512];
    *json = NULL;
    if (!a || !segment || !text)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "descriptor check: no secret or text");
    if (tern_json_parse_object(text, len, &e, msg, sizeof msg) != 0)
        return tern_errf(err, errlen, TERN_ERR_AUTH,
                         "segment %s: what its key holds is not a signed descriptor (%s)",
                         segment, msg);
    int rc = check_envelope(a, segment, e, &desc, &dlen, &gen, err, errlen);
    if (!rc && tern_json_parse_object(desc, dlen, &d, msg, sizeof msg) != 0)
        rc = tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                       "segment %s: its signed descriptor is not a JSON object (%s)", segment,
                       msg);
    if (!rc)
        rc = check_inner(segment, d, gen, err, errlen);
    if (!rc) {
        *json = malloc(dlen + 1);
        if (*json) {
            memcpy(*json, desc, dlen);
            (*json)[dlen] = '\0';
        } else {
            rc = tern_errf(err, errlen, TERN_ERR_NOMEM, "descriptor check: out of memory");
        }
    }
    json_object_put(d);
    json_object_put(e);
    return rc;
}
