/* tests/support/shm_common.h: what the same-host transport's two-process tests
 * share (test_shm_integration.c, test_shm_fallback.c): starting
 * tests/support/helpers/shm_peer.c with arguments, possibly under unshare, and an
 * initiator engine with a given transport list.  Include after
 * integration_common.h. */
#ifndef TERN_TESTS_SHM_COMMON_H
#define TERN_TESTS_SHM_COMMON_H

#define SHM_PEER_PATH TERN_BUILD_DIR "/bin/tern-test-shm-peer"

/* Runs argv (argv[0] is the program) and waits for its READY line. */
static inline void shm_peer_startv(it_peer *p, char *const argv[])
{
    int in[2], out[2];
    cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->in = fdopen(in[1], "w");
    p->out = fdopen(out[0], "r");
    char line[512];
    peer_line(p, line, sizeof line, 30000);
    int n = sscanf(line, "READY %127s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, p->name,
                   &p->a, &p->la, &p->b, &p->lb);
    cr_assert_eq(n, 5, "unexpected line from the target: %s", line);
}

/* The peer with transports xp ("shm,tcp", "shm", "tcp") at server name. */
static inline void shm_peer_start(it_peer *p, const char *xp, const char *name)
{
    char *argv[] = {(char *)SHM_PEER_PATH, (char *)xp, (char *)(name ? name : "127.0.0.1:0"),
                    NULL};
    shm_peer_startv(p, argv);
}

/* Sends a command, returns the answer line in line. */
static inline void shm_peer_ask(it_peer *p, const char *cmd, char *line, size_t len)
{
    fprintf(p->in, "%s\n", cmd);
    fflush(p->in);
    peer_line(p, line, len, 10000);
}

/* An initiator engine whose transports are xp ("shm", "shm,tcp"). */
static inline tern_engine *shm_engine_new(const char *xp, const char *who)
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

/* Opens the peer's segment and checks the transport the core chose. */
static inline tern_segment_id shm_open_expect(tern_engine *e, const it_peer *p, const char *xp)
{
    tern_segment_id seg = tern_segment_open(e, p->name);
    cr_assert_geq(seg, 0, "open %s: %s", p->name, tern_engine_last_error(e));
    char got[32] = "";
    cr_assert_eq(tern_segment_transport(e, seg, got, sizeof got), 0);
    cr_assert_str_eq(got, xp, "segment %s uses %s, expected %s", p->name, got, xp);
    return seg;
}

#endif
