/* tests/system/hostile_control_harness.c: see hostile_control_harness.h. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "control/handshake.h"
#include "hostile_control_harness.h"

void env_auth(hc_env *v)
{
    snprintf(v->secret_path, sizeof v->secret_path, "/tmp/tern-hc-secret-%d", (int)getpid());
    FILE *f = fopen(v->secret_path, "w");
    cr_assert(f);
    fputs("hostile-control-shared-secret-42\n", f);
    fclose(f);
    char err[512];
    cr_assert_eq(tern_auth_load(v->secret_path, &v->auth, err, sizeof err), 0, "%s", err);
}

tern_engine *engine_new(const hc_env *v)
{
    char yaml[1024], err[2048] = "", auth[160] = "";
    if (v->secret_path[0])
        snprintf(auth, sizeof auth, "auth_secret_file: %s\n", v->secret_path);
    if (v->no_confirm)
        strcat(auth, "handshake_confirm: false\n");
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: p2p\nslice_size: 64K\nretries: 1\n"
             "io_timeout_ms: 3000\nlog_level: %s\n%stransports:\n%s",
             v->no_confirm ? "warn" : "error", auth,
             strcmp(v->transport, "efa") == 0 ? "  - name: efa\n    provider: tcp\n"
                                                "    iface: lo\n"
                                              : "  - name: tcp\n");
    tern_engine *e = tern_engine_create_from_yaml(yaml, "test_hostile_control", err, sizeof err);
    if (!e && strstr(err, "efa") && strstr(err, "provider"))
        cr_skip_test("efa cannot load here: %s", err);
    cr_assert(e, "engine: %s", err);
    return e;
}

char *hs_ask(const hc_env *v, const char *server, int type, const char *json,
                    char *err, size_t errlen, int *rc)
{
    char *reply = NULL;
    size_t rl = 0;
    *rc = tern_hs_request_auth(v->auth, server, type, json, strlen(json), &reply, &rl,
                               1 << 20, 3000, 3000, err, errlen);
    return reply;
}
