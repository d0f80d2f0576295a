/* transports/tcp/tcp_auth.h: shared-secret authentication of TCP data
 * connections, used only when the host services offer auth_mac and it works
 * (the engine has auth_secret_file): the plugin never sees the secret and
 * does not link a crypto library.  The frames (HELLO, CHALLENGE, PROOF,
 * VERDICT) and the proofs are in docs/protocol.md, "TCP data frames". */
#ifndef TERN_TCP_AUTH_H
#define TERN_TCP_AUTH_H

#include <stdint.h>

#include "tcp_internal.h"

#define TCP_AUTH_HELLO 0x55414E54u
#define TCP_AUTH_CHALLENGE 0x43414E54u
#define TCP_AUTH_PROOF 0x50414E54u
#define TCP_AUTH_VERDICT 0x56414E54u
#define TCP_AUTH_NAME_MAX 256 /* a segment name field of HELLO, NUL-padded */
#define TCP_AUTH_HELLO_SIZE (40 + 2 * TCP_AUTH_NAME_MAX)
#define TCP_AUTH_CHALLENGE_SIZE 72
#define TCP_AUTH_PROOF_SIZE 40
#define TCP_AUTH_VERDICT_SIZE 8

/* Is authentication on?  Only an explicit TERN_ERR_NOT_SUPPORTED (no
 * secret configured) turns it off: a secret that fails to load must not
 * leave the data port open, its proofs just fail. */
int tcp_auth_enabled(const tcp_ctx *ctx);
/* Initiator, right after connect (blocking, bounded by io_timeout): prove
 * the secret and check the target's proof, both bound to our segment name
 * and to `segment`, the one we asked for.  0, or TERN_ERR_AUTH with the
 * reason in err. */
int tcp_auth_client(tcp_ctx *ctx, int fd, const char *peer, const char *segment, char *err,
                    size_t errlen);
/* Target, driven by the I/O thread without blocking: the challenge for a
 * HELLO (ns receives our nonce; a HELLO that asks for another segment
 * than ours gets a challenge with status TERN_ERR_AUTH and no proof, and
 * the call returns TERN_ERR_AUTH), then the check of the PROOF (0,
 * TERN_ERR_PROTOCOL when it is not a PROOF frame, TERN_ERR_AUTH). */
int tcp_auth_challenge(const tcp_ctx *ctx, const uint8_t *hello, uint8_t *ch, uint8_t *ns);
int tcp_auth_verify(const tcp_ctx *ctx, const uint8_t *hello, const uint8_t *ns,
                    const uint8_t *proof);

#endif
