/* core/desc/handshake_desc.c: the handshake descriptor (handshake_desc.h): the keys every
 * transport's body has, plus the transport's own left untyped in fields, bounded per
 * docs/protocol.md, Handshake frames. */
#include "desc/handshake_desc.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "desc/desc_json.h"
#include "base/util.h"

#define AS_JSON(d) ((json_object *)(d))

char *tern_handshake_desc_encode(const tern_handshake_desc *d)
{
    if (!d)
        return NULL;
    json_object *root = NULL;
    if (d->fields)
        json_object_deep_copy(AS_JSON(d->fields), &root, NULL);
    if (!root)
        root = json_object_new_object();
    if (d->transport[0])
        json_object_object_add(root, "transport", json_object_new_string(d->transport));
    json_object_object_add(root, "local_nic_path", json_object_new_string(d->local_nic_path));
    json_object_object_add(root, "peer_nic_path", json_object_new_string(d->peer_nic_path));
    json_object_object_add(root, "reply_msg", json_object_new_string(d->reply_msg));
    char *out = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return out;
}

int tern_handshake_desc_decode(const char *json, size_t len, tern_handshake_desc *out,
                               char *err, size_t errlen)
{
    if (!out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "handshake descriptor: no output");
    memset(out, 0, sizeof *out);
    json_object *root;
    int rc = tern_json_parse_object(json, len, &root, err, errlen);
    if (rc)
        return rc;
    /* The object goes to transports whole: bound it (docs/protocol.md). */
    if (json_object_object_length(root) > TERN_HS_DESC_MAX_KEYS) {
        int n = json_object_object_length(root);
        json_object_put(root);
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "handshake descriptor: %d keys, at most %d", n, TERN_HS_DESC_MAX_KEYS);
    }
    rc = tern_json_get_str(root, "", "reply_msg", 0, out->reply_msg, sizeof out->reply_msg, err, errlen);
    /* A refusal may carry nothing but reply_msg; a descriptor needs both paths. */
    int need = !rc && out->reply_msg[0] == '\0';
    if (!rc)
        rc = tern_json_get_str(root, "", "transport", 0, out->transport, sizeof out->transport, err,
                     errlen);
    if (!rc)
        rc = tern_json_get_str(root, "", "local_nic_path", need, out->local_nic_path,
                     sizeof out->local_nic_path, err, errlen);
    if (!rc)
        rc = tern_json_get_str(root, "", "peer_nic_path", need, out->peer_nic_path,
                     sizeof out->peer_nic_path, err, errlen);
    if (rc) {
        json_object_put(root);
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->fields = (tern_desc *)root;
    return 0;
}

void tern_handshake_desc_clear(tern_handshake_desc *d)
{
    if (!d)
        return;
    tern_desc_free(d->fields);
    memset(d, 0, sizeof *d);
}
