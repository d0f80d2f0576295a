/* tests/support/shm_common.c: see shm_common.h. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "shm_common.h"

void shm_peer_start(it_peer *p, const char *xp, const char *name)
{
    char *argv[] = {(char *)SHM_PEER_PATH, (char *)xp, (char *)(name ? name : "127.0.0.1:0"),
                    NULL};
    peer_startv(p, argv);
}

void shm_peer_start_in_pid_ns(it_peer *p)
{
    if (geteuid() != 0)
        cr_skip_test("needs root for unshare --pid");
    cr_assert_eq(access("/usr/bin/unshare", X_OK), 0, "unshare(1) is needed (util-linux)");
    char *argv[] = {"/usr/bin/unshare", "--pid", "--fork", (char *)SHM_PEER_PATH, "shm,tcp",
                    "127.0.0.1:0", NULL};
    peer_startv(p, argv);
}

tern_engine *shm_engine_new(const char *xp, const char *who)
{
    char yaml[512], list[128] = "", copy[64];
    snprintf(copy, sizeof copy, "%s", xp);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        snprintf(list + strlen(list), sizeof list - strlen(list), "  - name: %s\n", t);
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n%sslice_size: 64K\n"
             "retries: 2\nio_timeout_ms: 3000\nlog_level: warn\n", list);
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml, who, err, sizeof err);
    cr_assert(e, "engine: %s", err);
    return e;
}
