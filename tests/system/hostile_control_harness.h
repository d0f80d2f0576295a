/* tests/system/hostile_control_harness.h: what the files of
 * test_hostile_control share: an engine set up the way each attack needs
 * (transport, shared secret, handshake_confirm) and a request to a daemon. */
#ifndef TERN_TEST_HOSTILE_CONTROL_HARNESS_H
#define TERN_TEST_HOSTILE_CONTROL_HARNESS_H

#include <stddef.h>

#include "control/auth.h"
#include "tern/tern.h"

#define BUF (16u << 20)

typedef struct hc_env {
    const char *transport; /* "efa" (provider tcp on lo) or "tcp" */
    char secret_path[64];  /* "" without auth */
    tern_auth *auth;
    int no_confirm;        /* handshake_confirm: false */
} hc_env;

/* Writes a shared secret file and loads it into v->auth. */
void env_auth(hc_env *v);
/* An engine on 127.0.0.1:0 over v's transport (skips when efa cannot load). */
tern_engine *engine_new(const hc_env *v);
/* One request to `server`'s daemon with v's secret; the reply or NULL, *rc. */
char *hs_ask(const hc_env *v, const char *server, int type, const char *json,
             char *err, size_t errlen, int *rc);

#endif
