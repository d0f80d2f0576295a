/* core/peer/mooncake_compat.h: a Mooncake Transfer Engine's handshake bodies
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
/* The same on the passive side, where no segment of the sender is open:
 * fetch its descriptor (segment = the host:port of local_nic_path) through
 * md and fill from the entry of transport xname.  A body that has both
 * keys is left alone; a failed fetch leaves it too, and the transport then
 * refuses the body, naming what is missing. */
struct tern_metadata;
void tern_mooncake_handshake_fill_passive(struct tern_metadata *md,
                                          struct tern_handshake_desc *hd, const char *xname);

#endif
