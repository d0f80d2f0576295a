/* core/peer/mooncake_compat.c: a Mooncake Transfer Engine's handshake bodies
 * (docs/protocol.md, "Mooncake compatibility"); its segment descriptors
 * are read by mooncake_desc.c. */
#include "peer/mooncake_compat.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desc/handshake_desc.h"
#include "desc/segment_desc.h"
#include "peer/metadata.h"

/* A Connection request without tern's "transport" key comes from a Mooncake
 * engine, whose handshake is per transport but unnamed: an EFA address says
 * efa, anything else is its RDMA transport (TCP takes no handshake). */
const char *tern_mooncake_infer_transport(const tern_handshake_desc *hd)
{
    if (!hd || hd->transport[0])
        return hd ? hd->transport : "";
    return hd->efa_addr[0] ? "efa" : "rdma";
}

/* Mooncake v0.3.10's Connection bodies carry no local_lid / local_gid (its
 * engines take them from the segment descriptor's device named in
 * local_nic_path): fill them in from there, so transports read one shape. */
void tern_mooncake_handshake_fill(tern_handshake_desc *hd, const tern_seg_transport *st)
{
    if (!hd || !hd->fields || !st)
        return;
    int has_lid = json_object_object_get_ex((json_object *)hd->fields, "local_lid", NULL);
    int has_gid = json_object_object_get_ex((json_object *)hd->fields, "local_gid", NULL);
    const char *at = strrchr(hd->local_nic_path, '@');
    if ((has_lid && has_gid) || !at)
        return;
    for (size_t i = 0; i < st->ndevices; i++) {
        const tern_device_desc *d = &st->devices[i];
        if (strcmp(d->name, at + 1) != 0)
            continue;
        if (!has_lid) {
            hd->local_lid = (uint16_t)d->lid;
            json_object_object_add((json_object *)hd->fields, "local_lid",
                                   json_object_new_uint64(d->lid));
        }
        if (!has_gid) {
            snprintf(hd->local_gid, sizeof hd->local_gid, "%s", d->gid);
            json_object_object_add((json_object *)hd->fields, "local_gid",
                                   json_object_new_string(d->gid));
        }
        return;
    }
}

void tern_mooncake_handshake_fill_passive(tern_metadata *md, tern_handshake_desc *hd,
                                          const char *xname)
{
    if (!md || !hd || !hd->fields ||
        (json_object_object_get_ex((json_object *)hd->fields, "local_lid", NULL) &&
         json_object_object_get_ex((json_object *)hd->fields, "local_gid", NULL)))
        return;
    char seg[320], msg[512];
    const char *at = strrchr(hd->local_nic_path, '@');
    if (!at || (size_t)(at - hd->local_nic_path) >= sizeof seg)
        return;
    memcpy(seg, hd->local_nic_path, (size_t)(at - hd->local_nic_path));
    seg[at - hd->local_nic_path] = '\0';
    char *json = NULL;
    tern_segment_desc *d = NULL;
    if (tern_metadata_fetch(md, seg, &json, msg, sizeof msg) == 0 &&
        tern_segment_desc_decode(json, strlen(json), &d, msg, sizeof msg) == 0)
        tern_mooncake_handshake_fill(hd, tern_segment_find_transport(d, xname));
    free(json);
    if (d)
        tern_segment_desc_free(d);
}
