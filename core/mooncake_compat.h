/* core/mooncake_compat.h: a Mooncake Transfer Engine's handshake bodies
 * (mooncake_compat.c; docs/protocol.md, "Mooncake compatibility"). */
#ifndef TERN_CORE_MOONCAKE_COMPAT_H
#define TERN_CORE_MOONCAKE_COMPAT_H

/* The transport a Connection request is for: its "transport" key, or for a
 * Mooncake peer (no such key) the one its fields imply. */
struct tern_handshake_desc;
const char *tern_mooncake_infer_transport(const struct tern_handshake_desc *hd);
/* A Connection body without local_lid / local_gid (Mooncake v0.3.10): take
 * them from the sender's segment descriptor, device named in local_nic_path. */
struct tern_seg_transport;
void tern_mooncake_handshake_fill(struct tern_handshake_desc *hd,
                                  const struct tern_seg_transport *st);

#endif
