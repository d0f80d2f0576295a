/* core/peer/mooncake_compat.h: a Mooncake Transfer Engine's handshake bodies
 * (mooncake_compat.c; docs/protocol.md, "Mooncake compatibility"). */
#ifndef TERN_CORE_MOONCAKE_COMPAT_H
#define TERN_CORE_MOONCAKE_COMPAT_H

#include <stddef.h>
#include <stdint.h>

/* The reference's rdma / efa keys of a Connection body, typed: what
 * Mooncake's RDMA transport sends (local_lid, local_gid, qp_num) and the
 * efa address.  The generic keys are the handshake descriptor's
 * (desc/handshake_desc.h).  Limits: docs/protocol.md, Handshake frames. */
#define TERN_MOONCAKE_HS_MAX_QP 64 /* qp_num entries */
typedef struct tern_mooncake_hs {
    uint16_t local_lid;
    char local_gid[48];
    uint32_t qp_num[TERN_MOONCAKE_HS_MAX_QP];
    size_t nqp;
    char efa_addr[512];
} tern_mooncake_hs;

/* A handshake descriptor (tern_handshake_desc_decode) and its reference
 * keys typed into mk: a body whose reference keys have the wrong type is
 * refused, whatever its transport.  On failure hd and mk are cleared. */
struct tern_handshake_desc;
int tern_mooncake_hs_decode(const char *json, size_t len, struct tern_handshake_desc *hd,
                            tern_mooncake_hs *mk, char *err, size_t errlen);
/* hd's fields, then the generic keys and mk's in Mooncake's order. */
char *tern_mooncake_hs_encode(const struct tern_handshake_desc *hd, const tern_mooncake_hs *mk);

/* The transport a Connection request is for: its "transport" key, or for a
 * Mooncake peer (no such key) the one its fields imply. */
const char *tern_mooncake_infer_transport(const struct tern_handshake_desc *hd,
                                          const tern_mooncake_hs *mk);
/* A Connection body without local_lid / local_gid (Mooncake v0.3.10): take
 * them from the sender's segment descriptor, device named in local_nic_path,
 * into hd's fields (what transports read). */
struct tern_seg_transport;
void tern_mooncake_handshake_fill(struct tern_handshake_desc *hd,
                                  const struct tern_seg_transport *st);
/* The same on the passive side, where no segment of the sender is open:
 * fetch its descriptor (segment = the host:port of local_nic_path) through
 * md and fill from the entry of transport xname.  A body that has both
 * keys is left alone; a failed fetch leaves it too, and the transport then
 * refuses the body, naming what is missing. */
struct tern_metadata;
void tern_mooncake_handshake_fill_passive(struct tern_metadata *md,
                                          struct tern_handshake_desc *hd, const char *xname);

#endif
