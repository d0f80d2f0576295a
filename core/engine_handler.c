/* core/engine_handler.c: what our handshake daemon answers, and the
 * application's notification queue.
 *
 *   Connection -> the passive side of an endpoint (engine_endpoint.c)
 *   Metadata   -> our segment descriptor (the p2p backend)
 *   Notify     -> {from, name, msg} onto a bounded queue (oldest dropped)
 *   Probe      -> {"ok":true,"name":<server name>}
 * Handlers run on the daemon's threads, concurrently. */
#include "engine.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "peer_check.h"
#include "util.h"

static char *json_dup(json_object *o)
{
    char *s = tern_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return s;
}

static char *error_reply(const char *msg)
{
    json_object *o = json_object_new_object(); /* the daemon's refusal convention */
    json_object_object_add(o, "reply_msg", json_object_new_string(msg));
    return json_dup(o);
}

static char *metadata_reply(tern_engine *e)
{
    char *json = tern_metadata_local_json(e->md);
    if (json)
        return json;
    pthread_rwlock_rdlock(&e->memlock);
    json = tern_strdup(e->local_json);
    pthread_rwlock_unlock(&e->memlock);
    return json ? json : error_reply("no segment descriptor published yet");
}

static char *probe_reply(tern_engine *e)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_boolean(1));
    json_object_object_add(o, "name", json_object_new_string(e->server_name));
    json_object_object_add(o, "status", json_object_new_string("success")); /* Mooncake's */
    return json_dup(o);
}

/* ---- notifications in ------------------------------------------------------ */

static void notes_push(tern_engine *e, const char *from, const char *name, const char *msg)
{
    char *copy = tern_strdup(msg);
    if (!copy)
        return;
    pthread_mutex_lock(&e->notelock);
    if (e->note_count == TERN_NOTIFY_QUEUE) { /* full: drop the oldest */
        free(e->notes[e->note_head].msg);
        e->note_head = (e->note_head + 1) % TERN_NOTIFY_QUEUE;
        e->note_count--;
        e->notes_dropped++;
    }
    tern_notification *n = &e->notes[(e->note_head + e->note_count) % TERN_NOTIFY_QUEUE];
    tern_strlcpy(n->from, from, sizeof n->from);
    tern_strlcpy(n->name, name, sizeof n->name);
    n->msg = copy;
    e->note_count++;
    pthread_mutex_unlock(&e->notelock);
}

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
    /* Mooncake's shape: {name, notify_msg}, no sender (docs/protocol.md,
     * Mooncake compatibility); tern's {from, name, msg} */
    const char *mc_msg = o ? str_member(o, "notify_msg") : NULL;
    if (!msg && mc_msg && !from) {
        msg = mc_msg;
        from = "";
    }
    char *reply;
    if (!from || !name || !msg || strlen(msg) > TERN_NOTIFY_MAX) {
        *rc = TERN_ERR_PROTOCOL;
        reply = error_reply("notify: expected {\"from\", \"name\", \"msg\"} or {\"name\", "
                            "\"notify_msg\"} strings, msg at most 4096 bytes");
    } else {
        notes_push(e, from, name, msg);
        json_object *ok = json_object_new_object();
        json_object_object_add(ok, "ok", json_object_new_boolean(1));
        json_object_object_add(ok, "name", json_object_new_string(""));  /* Mooncake's reply */
        json_object_object_add(ok, "notify_msg", json_object_new_string("success"));
        reply = json_dup(ok);
    }
    json_object_put(o);
    return reply;
}

TERN_EXPORT int tern_notify_recv(tern_engine *e, char *from, size_t fromlen, char *name,
                                 size_t namelen, char *msg, size_t msglen)
{
    if (!e)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&e->notelock);
    if (!e->note_count) {
        pthread_mutex_unlock(&e->notelock);
        return 0;
    }
    tern_notification n = e->notes[e->note_head];
    e->note_head = (e->note_head + 1) % TERN_NOTIFY_QUEUE;
    e->note_count--;
    pthread_mutex_unlock(&e->notelock);
    if (from && fromlen)
        tern_strlcpy(from, n.from, fromlen);
    if (name && namelen)
        tern_strlcpy(name, n.name, namelen);
    if (msg && msglen)
        tern_strlcpy(msg, n.msg, msglen);
    free(n.msg);
    return 1;
}

void tern_engine_notes_free(tern_engine *e)
{
    for (size_t i = 0; i < e->note_count; i++)
        free(e->notes[(e->note_head + i) % TERN_NOTIFY_QUEUE].msg);
    e->note_count = 0;
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
        *reply = error_reply("unknown frame type");
    }
    if (!*reply)
        return TERN_ERR_NOMEM;
    *replylen = strlen(*reply);
    return rc;
}
