/* core/peer/mooncake_compat.c: a Mooncake Transfer Engine's handshake bodies
 * (docs/protocol.md, "Mooncake compatibility"); its segment descriptors
 * are read by mooncake_desc.c. */
#include "peer/mooncake_compat.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "desc/desc_json.h"
#include "desc/handshake_desc.h"
#include "desc/segment_desc.h"
#include "peer/metadata.h"

/* The reference keys, read after the generic ones and in the order the
 * decoder always read them: a body with several bad keys is refused naming
 * the same key as before. */
static int hs_keys_read(json_object *root, tern_mooncake_hs *mk, char *err, size_t errlen)
{
    uint64_t lid = 0;
    int rc = tern_json_get_uint(root, "", "local_lid", UINT16_MAX, 0, &lid, err, errlen);
    mk->local_lid = (uint16_t)lid;
    if (!rc)
        rc = tern_json_get_gid(root, "", "local_gid", mk->local_gid, sizeof mk->local_gid, err,
                               errlen);
    if (!rc)
        rc = tern_json_get_uint_array(root, "", "qp_num", UINT32_MAX, NULL, mk->qp_num,
                                      TERN_MOONCAKE_HS_MAX_QP, &mk->nqp, err, errlen);
    if (!rc)
        rc = tern_json_get_str(root, "", "efa_addr", 0, mk->efa_addr, sizeof mk->efa_addr, err,
                               errlen);
    return rc;
}

int tern_mooncake_hs_decode(const char *json, size_t len, tern_handshake_desc *hd,
                            tern_mooncake_hs *mk, char *err, size_t errlen)
{
    if (!mk)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "handshake descriptor: no output");
    memset(mk, 0, sizeof *mk);
    int rc = tern_handshake_desc_decode(json, len, hd, err, errlen);
    if (!rc && (rc = hs_keys_read((json_object *)hd->fields, mk, err, errlen)) != 0) {
        tern_handshake_desc_clear(hd);
        memset(mk, 0, sizeof *mk);
    }
    return rc;
}

/* Mooncake's body interleaves its keys with the generic ones (local_nic_path,
 * local_lid, local_gid, peer_nic_path, qp_num, reply_msg).  The generic keys'
 * places are held here with nulls; the generic encoder replaces a present
 * key in place, so the bytes keep that order. */
char *tern_mooncake_hs_encode(const tern_handshake_desc *hd, const tern_mooncake_hs *mk)
{
    if (!hd || !mk)
        return NULL;
    json_object *root = NULL;
    if (hd->fields)
        json_object_deep_copy((json_object *)hd->fields, &root, NULL);
    if (!root)
        root = json_object_new_object();
    if (hd->transport[0])
        json_object_object_add(root, "transport", NULL);
    json_object_object_add(root, "local_nic_path", NULL);
    json_object_object_add(root, "local_lid", json_object_new_uint64(mk->local_lid));
    json_object_object_add(root, "local_gid", json_object_new_string(mk->local_gid));
    json_object_object_add(root, "peer_nic_path", NULL);
    size_t nqp = mk->nqp < TERN_MOONCAKE_HS_MAX_QP ? mk->nqp : TERN_MOONCAKE_HS_MAX_QP;
    json_object *qps = json_object_new_array_ext(nqp ? (int)nqp : 1);
    for (size_t i = 0; i < nqp; i++)
        json_object_array_add(qps, json_object_new_uint64(mk->qp_num[i]));
    json_object_object_add(root, "qp_num", qps);
    json_object_object_add(root, "reply_msg", NULL);
    if (mk->efa_addr[0])
        json_object_object_add(root, "efa_addr", json_object_new_string(mk->efa_addr));
    tern_handshake_desc whole = *hd;
    whole.fields = (tern_desc *)root;
    char *out = tern_handshake_desc_encode(&whole);
    json_object_put(root);
    return out;
}

/* A Connection request without tern's "transport" key comes from a Mooncake
 * engine, whose handshake is per transport but unnamed: an EFA address says
 * efa, anything else is its RDMA transport (TCP takes no handshake). */
const char *tern_mooncake_infer_transport(const tern_handshake_desc *hd,
                                          const tern_mooncake_hs *mk)
{
    if (!hd || hd->transport[0])
        return hd ? hd->transport : "";
    return mk && mk->efa_addr[0] ? "efa" : "rdma";
}

/* Mooncake v0.3.10's Connection bodies carry no local_lid / local_gid (its
 * engines take them from the segment descriptor's device named in
 * local_nic_path): fill them in from there, so transports read one shape.
 * Only the fields are filled: transports read nothing else, and nothing
 * reads a typed tern_mooncake_hs after this. */
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
        if (!has_lid)
            json_object_object_add((json_object *)hd->fields, "local_lid",
                                   json_object_new_uint64(d->lid));
        if (!has_gid)
            json_object_object_add((json_object *)hd->fields, "local_gid",
                                   json_object_new_string(d->gid));
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
