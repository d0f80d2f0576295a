/* core/engine_handler.c: what our handshake daemon answers.
 *
 *   Connection -> the passive side of an endpoint (engine/endpoint.c)
 *   Metadata   -> our segment descriptor (the p2p backend)
 *   Notify     -> {from, name, msg} onto the notification queue (notify.c)
 *   Probe      -> {"ok":true,"name":<server name>}
 * Handlers run on the daemon's threads, concurrently. */
#include "engine_handler.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "control/frames.h"
#include "engine/endpoint.h"
#include "engine/notify.h"
#include "engine/peer_check.h"
#include "base/util.h"

static char *json_dup(json_object *o)
{
    char *s = tern_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return s;
}

static char *metadata_reply(tern_engine *e)
{
    char *json = tern_metadata_local_json(e->md);
    if (json)
        return json;
    json = tern_memory_json(&e->mem);
    return json ? json : tern_hs_refusal("no segment descriptor published yet");
}

static char *probe_reply(tern_engine *e)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_boolean(1));
    json_object_object_add(o, "name", json_object_new_string(e->server_name));
    json_object_object_add(o, "status", json_object_new_string("success")); /* Mooncake's */
    return json_dup(o);
}

/* ---- notifications in (queued by notify.c) ----------------------------------- */

static const char *str_member(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static char *notify_reply(tern_engine *e, const char *json, size_t len, int *rc)
{
    json_tokener *tok = json_tokener_new();
    json_object *o = tok && len < INT32_MAX ? json_tokener_parse_ex(tok, json, (int)len) : NULL;
    json_tokener_free(tok);
    const char *from = o ? str_member(o, "from") : NULL;
    const char *name = o ? str_member(o, "name") : NULL;
    const char *msg = o ? str_member(o, "msg") : NULL;
    /* Mooncake's shape: {name, notify_msg}, no sender; tern sends {from,
     * name, notify_msg} so that one frame suits both receivers; older tern
     * senders wrote msg (docs/protocol.md, Mooncake compatibility) */
    const char *mc_msg = o ? str_member(o, "notify_msg") : NULL;
    if (!msg && mc_msg) {
        msg = mc_msg;
        if (!from)
            from = "";
    }
    char *reply;
    if (!from || !name || !msg || strlen(msg) > TERN_NOTIFY_MAX) {
        *rc = TERN_ERR_PROTOCOL;
        reply = tern_hs_refusal("notify: expected {\"from\", \"name\", \"msg\" or \"notify_msg\"} "
                            "strings, the message at most 65536 bytes");
    } else if (tern_notes_push(e->notes, from, name, msg) != 0) {
        /* refused, never dropped: the sender gets TERN_ERR_BUSY
         * (docs/protocol.md, Notify) */
        json_object *busy = tern_hs_refusal_object("notification queue full (the receiver "
                                                   "reads slower than it is sent to); try again");
        json_object_object_add(busy, "busy", json_object_new_boolean(1));
        reply = json_dup(busy);
    } else {
        json_object *ok = json_object_new_object();
        json_object_object_add(ok, "ok", json_object_new_boolean(1));
        json_object_object_add(ok, "name", json_object_new_string(""));  /* Mooncake's reply */
        json_object_object_add(ok, "notify_msg", json_object_new_string("success"));
        reply = json_dup(ok);
    }
    json_object_put(o);
    return reply;
}

/* ---- the daemon's handler ------------------------------------------------------ */

int tern_engine_hs_handler(void *arg, int type, const char *json, size_t len, char **reply,
                           size_t *replylen)
{
    tern_engine *e = arg;
    int rc = 0;
    switch (type) {
    case TERN_HS_CONNECTION: *reply = tern_endpoint_accept(e, json, len); break;
    case TERN_HS_METADATA: *reply = metadata_reply(e); break;
    case TERN_HS_NOTIFY: *reply = notify_reply(e, json, len, &rc); break;
    case TERN_HS_PROBE: /* a confirmation request (peer_check.h) or a plain probe */
        if (!(*reply = tern_peer_check_probe(e, json, len)))
            *reply = probe_reply(e);
        break;
    default:
        rc = TERN_ERR_PROTOCOL;
        *reply = tern_hs_refusal("unknown frame type");
    }
    if (!*reply)
        return TERN_ERR_NOMEM;
    *replylen = strlen(*reply);
    return rc;
}
