/* core/engine/peer_check.c: a passive endpoint only for the segment that asked.
 * The protocol is in docs/protocol.md, "Handshake frames" (Connection
 * confirmation); why it exists is in peer_check.h. */
#include "engine/peer_check.h"

#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "engine/engine_state.h"
#include "control/handshake.h"
#include "desc/handshake_desc.h"
#include "base/log.h"
#include "base/util.h"

static int sha256(const char *json, size_t len, uint8_t out[TERN_PEER_CHECK_DIGEST])
{
    unsigned int n = 0;
    return EVP_Digest(json, len, out, &n, EVP_sha256(), NULL) == 1 &&
                   n == TERN_PEER_CHECK_DIGEST
               ? 0
               : TERN_ERR_NOMEM;
}

/* "host:port@dev" into its server and device parts; both must be there. */
static int split_nic(const char *path, char *server, size_t slen, char *dev, size_t dlen)
{
    const char *at = strrchr(path, '@');
    if (!at || at == path || !at[1] || (size_t)(at - path) >= slen || strlen(at + 1) >= dlen)
        return TERN_ERR_PROTOCOL;
    memcpy(server, path, (size_t)(at - path));
    server[at - path] = '\0';
    strcpy(dev, at + 1);
    return 0;
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* ---- passive side ------------------------------------------------------------ */

static char *confirm_request(const char *transport, const char *local_nic,
                             const char *peer_nic, const uint8_t d[TERN_PEER_CHECK_DIGEST])
{
    char hex[2 * TERN_PEER_CHECK_DIGEST + 1];
    tern_auth_hex(d, TERN_PEER_CHECK_DIGEST, hex);
    json_object *c = json_object_new_object(), *o = json_object_new_object();
    json_object_object_add(c, "transport", json_object_new_string(transport));
    json_object_object_add(c, "local_nic_path", json_object_new_string(local_nic));
    json_object_object_add(c, "peer_nic_path", json_object_new_string(peer_nic));
    json_object_object_add(c, "sha256", json_object_new_string(hex));
    json_object_object_add(o, "confirm", c);
    char *s = tern_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return s;
}

/* Ask `server` whether it sent this frame; 0 when it says so.  *denied is
 * set when it answered that it did not (a tern segment that saw no such
 * connect), as opposed to not answering the question at all. */
static int confirm_call(tern_engine *e, const char *server, const char *req, int *denied,
                        char *msg, size_t msglen)
{
    char *reply = NULL, why[TERN_ERRMSG_MAX] = "";
    size_t rlen = 0;
    int tmo = TERN_PEER_CHECK_TIMEOUT_MS;
    if (e->cfg->connect_timeout_ms > 0 && e->cfg->connect_timeout_ms < tmo)
        tmo = e->cfg->connect_timeout_ms;
    int rc = tern_hs_request_auth(e->auth, server, TERN_HS_PROBE, req, strlen(req), &reply,
                                  &rlen, TERN_HS_LIMIT_PROBE_REPLY, tmo, tmo, why, sizeof why);
    if (rc)
        return tern_errf(msg, msglen, TERN_ERR_REFUSED,
                         "cannot confirm the Connection with %s, the segment it names: %s",
                         server, why);
    json_tokener *tok = json_tokener_new();
    json_object *o = tok && rlen < INT32_MAX ? json_tokener_parse_ex(tok, reply, (int)rlen)
                                             : NULL;
    json_tokener_free(tok);
    free(reply);
    json_object *v = NULL;
    int has = o && json_object_object_get_ex(o, "confirmed", &v) &&
              json_object_is_type(v, json_type_boolean);
    int yes = has && json_object_get_boolean(v);
    const char *reason = str_of(o, "reason");
    if (!has)
        rc = tern_errf(msg, msglen, TERN_ERR_REFUSED,
                       "%s, the segment the Connection names, does not confirm handshakes "
                       "(an older tern or another implementation): refused",
                       server);
    else if (!yes) {
        *denied = 1;
        rc = tern_errf(msg, msglen, TERN_ERR_REFUSED,
                       "%s, the segment the Connection names, did not send it (%s): refused",
                       server, reason ? reason : "no reason given");
    }
    json_object_put(o);
    return rc;
}

/* A confirmed reconnect replaces our endpoint for the key: say so. */
static void note_replace(tern_engine *e, tern_xport *x, const tern_handshake_desc *hd,
                         const char *mydev)
{
    char key[400];
    void *ep = NULL;
    tern_epstore_key(key, sizeof key, mydev, hd->local_nic_path);
    tern_ep_ref *ref = tern_epstore_get(x->eps, key, &ep);
    if (!ref)
        return;
    tern_epstore_release(x->eps, ref);
    tern_log(&e->log, TERN_LOG_INFO,
                    "%s: %s reconnected (confirmed by its daemon): its new endpoint replaces "
                    "the one we had", x->pl->name, hd->local_nic_path);
}

static int has_device(const tern_xport *x, const char *dev)
{
    for (int i = 0; i < x->pl->ndevices; i++)
        if (strcmp(x->pl->devices[i].name, dev) == 0)
            return 1;
    return 0;
}

/* ---- small string sets, under x->conn_lock ---------------------------------- */

#define STRSET_MAX 4096

static int strset_has(const tern_strset *s, const char *k)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], k) == 0)
            return 1;
    return 0;
}

/* When full, the oldest goes: for both sets forgetting is the safe side
 * (one more WARN line; an endpoint taken for active, so not replaced). */
static void strset_add(tern_strset *s, const char *k)
{
    if (strset_has(s, k))
        return;
    char *d = tern_strdup(k);
    if (!d)
        return;
    if (s->n == STRSET_MAX) {
        free(s->v[0]);
        memmove(s->v, s->v + 1, (s->n - 1) * sizeof *s->v);
        s->n--;
    }
    char **n = realloc(s->v, (s->n + 1) * sizeof *n);
    if (!n) {
        free(d);
        return;
    }
    s->v = n;
    s->v[s->n++] = d;
}

static void strset_del(tern_strset *s, const char *k)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], k) == 0) {
            free(s->v[i]);
            s->v[i] = s->v[--s->n];
            return;
        }
}

void tern_peer_check_inserted(tern_xport *x, const char *key, int passive)
{
    if (passive)
        strset_add(&x->passive_keys, key);
    else
        strset_del(&x->passive_keys, key);
    strset_del(&x->recheck_keys, key); /* a fresh endpoint, whoever made it */
    atomic_store(&x->nrecheck, (int)x->recheck_keys.n);
}

void tern_peer_check_opened(tern_xport *x, const char *peer)
{
    size_t plen = strlen(peer);
    pthread_mutex_lock(&x->conn_lock);
    for (size_t i = 0; i < x->passive_keys.n; i++) {
        const char *bar = strchr(x->passive_keys.v[i], '|'); /* "<dev>|host:port@nic" */
        if (bar && strncmp(bar + 1, peer, plen) == 0 && bar[1 + plen] == '@')
            strset_add(&x->recheck_keys, x->passive_keys.v[i]);
    }
    atomic_store(&x->nrecheck, (int)x->recheck_keys.n);
    pthread_mutex_unlock(&x->conn_lock);
}

int tern_peer_check_marked(tern_xport *x, const char *key)
{
    return strset_has(&x->recheck_keys, key);
}

int tern_peer_check_replaceable(tern_xport *x, const char *key)
{
    void *ep = NULL;
    tern_ep_ref *ref = tern_epstore_get(x->eps, key, &ep);
    if (!ref)
        return 1;
    tern_epstore_release(x->eps, ref);
    return strset_has(&x->passive_keys, key);
}

/* 1 when an unconfirmed frame for this key would take over our own active
 * endpoint or a connect of ours in flight. */
static int takes_over(tern_xport *x, const char *key)
{
    int busy = 0;
    pthread_mutex_lock(&x->conn_lock);
    for (tern_connecting *c = x->connecting; c && !busy; c = c->next)
        busy = strcmp(c->key, key) == 0;
    busy = busy || !tern_peer_check_replaceable(x, key);
    pthread_mutex_unlock(&x->conn_lock);
    return busy;
}

/* 1 the first time `peer` is seen here. */
static int first_unconfirmed(tern_xport *x, const char *peer)
{
    pthread_mutex_lock(&x->conn_lock);
    int first = !strset_has(&x->unconfirmed, peer);
    if (first)
        strset_add(&x->unconfirmed, peer);
    pthread_mutex_unlock(&x->conn_lock);
    return first;
}

/* handshake_confirm: false and the named segment could not answer (a
 * Mooncake peer): accept, unless it would take over our own active
 * endpoint or connect for its key (a passive one, which an earlier
 * Connection brought up, is replaced: the peer restarted).  See
 * docs/protocol.md, Accepting unconfirmed Connections. */
static int accept_unconfirmed(tern_engine *e, tern_xport *x, const tern_handshake_desc *hd,
                              const char *server, const char *mydev, const char *why,
                              char *msg, size_t msglen)
{
    char key[400];
    tern_epstore_key(key, sizeof key, mydev, hd->local_nic_path);
    if (takes_over(x, key))
        return tern_errf(msg, msglen, TERN_ERR_REFUSED,
                         "Connection from %s is unconfirmed (%s) and this engine's own "
                         "endpoint to it is established or connecting: an unconfirmed "
                         "Connection never replaces one (handshake_confirm: false)",
                         hd->local_nic_path, why);
    if (first_unconfirmed(x, server))
        tern_log(&e->log, TERN_LOG_WARN,
                 "%s: accepting an unconfirmed Connection from %s because handshake_confirm "
                 "is false (%s); the sender's identity is not verified (docs/protocol.md, "
                 "Connection confirmation); further ones from %s are not logged",
                 x->pl->name, hd->local_nic_path, why, server);
    return 0;
}

int tern_peer_check_connection(tern_engine *e, tern_xport *x, const tern_handshake_desc *hd,
                               const char *json, size_t len, int *unconfirmed, char *msg,
                               size_t msglen)
{
    *unconfirmed = 0;
    char server[320], dev[TERN_NAME_MAX], me[320], mydev[TERN_NAME_MAX], host[256];
    uint16_t port = 0;
    if (split_nic(hd->peer_nic_path, me, sizeof me, mydev, sizeof mydev) != 0 ||
        strcmp(me, e->server_name) != 0)
        return tern_errf(msg, msglen, TERN_ERR_REFUSED,
                         "Connection: peer_nic_path \"%s\" does not name this engine (%s@<device>)",
                         hd->peer_nic_path, e->server_name);
    if (!has_device(x, mydev))
        return tern_errf(msg, msglen, TERN_ERR_REFUSED,
                         "Connection: peer_nic_path \"%s\" names no %s device of this engine",
                         hd->peer_nic_path, x->pl->name);
    if (split_nic(hd->local_nic_path, server, sizeof server, dev, sizeof dev) != 0 ||
        tern_split_host_port(server, host, sizeof host, &port) != 0 || port == 0)
        return tern_errf(msg, msglen, TERN_ERR_REFUSED,
                         "Connection: local_nic_path \"%s\" is not <host>:<port>@<device>",
                         hd->local_nic_path);
    uint8_t d[TERN_PEER_CHECK_DIGEST];
    if (sha256(json, len, d) != 0)
        return tern_errf(msg, msglen, TERN_ERR_NOMEM, "Connection: cannot hash the frame");
    char *req = confirm_request(x->pl->name, hd->local_nic_path, hd->peer_nic_path, d);
    if (!req)
        return tern_errf(msg, msglen, TERN_ERR_NOMEM, "out of memory");
    int denied = 0;
    int rc = confirm_call(e, server, req, &denied, msg, msglen);
    free(req);
    if (rc && !denied && !e->cfg->handshake_confirm) {
        char why[TERN_ERRMSG_MAX];
        tern_strlcpy(why, msg, sizeof why);
        rc = accept_unconfirmed(e, x, hd, server, mydev, why, msg, msglen);
        *unconfirmed = rc == 0;
        return rc;
    }
    if (rc) {
        tern_log(&e->log, TERN_LOG_DEBUG, "%s", msg);
        return rc;
    }
    note_replace(e, x, hd, mydev);
    return 0;
}

/* ---- active side ----------------------------------------------------------------- */

void tern_peer_check_sent(tern_xport *x, tern_connecting *c, const char *json, size_t len)
{
    uint8_t d[TERN_PEER_CHECK_DIGEST];
    int ok = sha256(json, len, d) == 0;
    pthread_mutex_lock(&x->conn_lock);
    if (ok)
        memcpy(c->sent_digest, d, sizeof d);
    c->sent = ok;
    pthread_mutex_unlock(&x->conn_lock);
}

static tern_xport *xport_by_name(tern_engine *e, const char *name)
{
    for (size_t i = 0; name && i < e->nxports; i++)
        if (strcmp(e->xports[i].pl->name, name) == 0)
            return &e->xports[i];
    return NULL;
}

/* 1 when a connect in flight on x sent exactly this frame. */
static int sent_by_us(tern_xport *x, const char *local_nic, const char *peer_nic,
                      const uint8_t d[TERN_PEER_CHECK_DIGEST])
{
    char key[400];
    const char *at = strrchr(local_nic, '@');
    tern_epstore_key(key, sizeof key, at ? at + 1 : "", peer_nic);
    int found = 0;
    pthread_mutex_lock(&x->conn_lock);
    for (tern_connecting *c = x->connecting; c && !found; c = c->next)
        found = c->sent && strcmp(c->key, key) == 0 &&
                strcmp(c->local_nic_path, local_nic) == 0 &&
                tern_auth_equal(c->sent_digest, d, TERN_PEER_CHECK_DIGEST);
    pthread_mutex_unlock(&x->conn_lock);
    return found;
}

static char *confirm_reply(tern_engine *e, int yes, const char *reason)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_boolean(1));
    json_object_object_add(o, "name", json_object_new_string(e->server_name));
    json_object_object_add(o, "confirmed", json_object_new_boolean(yes));
    if (!yes)
        json_object_object_add(o, "reason", json_object_new_string(reason));
    char *s = tern_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return s;
}

char *tern_peer_check_probe(tern_engine *e, const char *json, size_t len)
{
    if (!json || !len || len > TERN_HS_LIMIT_PROBE)
        return NULL;
    json_tokener *tok = json_tokener_new_ex(TERN_HS_JSON_DEPTH);
    json_object *o = tok ? json_tokener_parse_ex(tok, json, (int)len) : NULL;
    json_tokener_free(tok);
    json_object *c = NULL;
    if (!o || !json_object_object_get_ex(o, "confirm", &c)) {
        json_object_put(o);
        return NULL; /* a plain probe */
    }
    const char *xp = str_of(c, "transport"), *ln = str_of(c, "local_nic_path"),
               *pn = str_of(c, "peer_nic_path"), *hex = str_of(c, "sha256");
    uint8_t d[TERN_PEER_CHECK_DIGEST];
    tern_xport *x = xport_by_name(e, xp);
    char *reply;
    if (!ln || !pn || !hex || !x ||
        tern_auth_unhex(hex, strlen(hex), d, sizeof d) != 0)
        reply = confirm_reply(e, 0, "malformed confirm request: expected transport, "
                                    "local_nic_path, peer_nic_path and a 64-digit sha256");
    else if (!sent_by_us(x, ln, pn, d))
        reply = confirm_reply(e, 0, "no connect in flight here sent that Connection frame");
    else
        reply = confirm_reply(e, 1, NULL);
    json_object_put(o);
    return reply;
}
