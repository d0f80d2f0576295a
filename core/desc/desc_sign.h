/* core/desc/desc_sign.h: signed segment descriptors (auth_secret_file).
 *
 * With a shared secret every descriptor an engine publishes, to any store
 * (p2p replies, redis, etcd, http), is wrapped in an envelope that binds it
 * to the segment name it is published under and to its generation (the
 * descriptor's timestamp):
 *
 *   {"tern_signed": 1, "alg": "hmac-sha256", "segment": <name>,
 *    "generation": <u64>, "mac": <64 hex digits>, "descriptor": <text>}
 *
 * mac = HMAC-SHA256(secret, "tern-desc-v1" 0x00 segment 0x00
 *                   generation (u64 big-endian) descriptor-bytes)
 *
 * The descriptor travels as a JSON string, so its exact bytes are what the
 * MAC covers (no canonical form needed).  A reader with the secret accepts
 * only an envelope whose MAC matches for the segment it asked for, whose
 * descriptor is in tern's shape (never Mooncake's: that format cannot prove
 * the secret), names that segment, carries that generation as timestamp and
 * lists no transport on the Mooncake wire.  docs/protocol.md, "Signed
 * descriptors". */
#ifndef TERN_CORE_DESC_SIGN_H
#define TERN_CORE_DESC_SIGN_H

#include <stddef.h>

struct tern_auth;

/* Wrap our descriptor json (tern's shape, with a timestamp) for `segment`;
 * *out malloc()ed. */
int tern_desc_sign(const struct tern_auth *a, const char *segment, const char *json,
                   char **out, char *err, size_t errlen);

/* Check text read from a store for `segment` and unwrap it: *json is the
 * descriptor (malloc()ed).  TERN_ERR_AUTH with a message naming the
 * segment and what is wrong (unsigned, signed for another segment, altered
 * or another secret, Mooncake-shaped, Mooncake wire, generation mismatch). */
int tern_desc_verify(const struct tern_auth *a, const char *segment, const char *text,
                     size_t len, char **json, char *err, size_t errlen);

/* 1 when text is a signed envelope (for a reader without a secret, which
 * cannot use it and says so). */
int tern_desc_is_signed(const char *text, size_t len);

#endif
