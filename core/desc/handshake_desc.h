/* core/desc/handshake_desc.h: the handshake descriptor (handshake_desc.c),
 * the object two peers exchange to connect an endpoint. */
#ifndef TERN_CORE_DESC_HANDSHAKE_DESC_H
#define TERN_CORE_DESC_HANDSHAKE_DESC_H

#include "desc/desc.h"

/* Handshake descriptor: the keys every transport's body has; the rest of
 * the object (a transport's own keys) stays in fields, untyped.  The
 * reference's rdma / efa keys are typed by peer/mooncake_compat.h.
 * Limits per key: docs/protocol.md, Handshake frames. */
#define TERN_HS_DESC_MAX_KEYS 64 /* members of a handshake descriptor object */
typedef struct tern_handshake_desc {
    char transport[TERN_NAME_MAX];     /* tern's addition: "transport" */
    char local_nic_path[320];
    char peer_nic_path[320];
    char reply_msg[512];
    tern_desc *fields;                 /* the whole object, for transports */
} tern_handshake_desc;

char *tern_handshake_desc_encode(const tern_handshake_desc *d);
int tern_handshake_desc_decode(const char *json, size_t len, tern_handshake_desc *out,
                               char *err, size_t errlen);
void tern_handshake_desc_clear(tern_handshake_desc *d); /* frees fields */

#endif
