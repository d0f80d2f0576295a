/* tests/transports/test_shm_integration.c: two engines in separate processes on one
 * host, through the public API, over the same-host transport "shm" (one
 * copy with process_vm_writev/readv).  The target is
 * tests/support/helpers/shm_peer.c (guard | A | B | guard, A 64 MiB + 64 KiB and B
 * 1 MiB registered, the guards full of canaries it checks on request); this
 * process is the initiator.  What needs the core to move a peer to another
 * transport, or to refetch a restarted peer by itself, is in
 * test_shm_fallback.c. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/stat.h>

#define IT_FILL_MUL 2246822519u
#define IT_FILL_SHIFT 7
#include "integration_common.h"
#include "shm_common.h"

TestSuite(shm_integration, .timeout = 240);

Test(shm_integration, write_read_byte_exact_1B_to_64MiB_plus_3)
{
    it_peer p;
    shm_peer_start(&p, "shm,tcp", NULL);
    tern_engine *e = shm_engine_new("shm,tcp", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    size_t cap = (64u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 2, 7, 4096, 65535, 65537, 1u << 20, (4u << 20) + 1,
                              (16u << 20) + 3, (64u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 11,
                        IT_PATTERN, "");
    peer_check_canaries(&p);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(shm_integration, request_spanning_both_buffers)
{
    it_peer p;
    shm_peer_start(&p, "shm,tcp", NULL);
    tern_engine *e = shm_engine_new("shm", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    uint64_t span = 300000;
    uint8_t *src = local_buf(e, span), *dst = local_buf(e, span);
    it_span_both_buffers(e, seg, &p, src, dst, span, 150001, 99, IT_PATTERN);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(shm_integration, unregistered_and_out_of_range_refused)
{
    it_peer p;
    shm_peer_start(&p, "shm,tcp", NULL);
    tern_engine *e = shm_engine_new("shm", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    uint8_t *buf = local_buf(e, 1 << 20);
    it_refuse_outside_buffers(e, seg, &p, buf, "");
    /* An unregistered LOCAL buffer is refused too, and untouched. */
    uint8_t *unreg = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(unreg, 0x77, 65536);
    char msg[512] = "";
    cr_assert_neq(one(e, seg, TERN_READ, unreg, p.a, 65536, msg, sizeof msg), TERN_COMPLETED,
                  "a READ into unregistered local memory completed");
    for (size_t i = 0; i < 65536; i++)
        cr_assert_eq(unreg[i], 0x77, "a refused READ wrote unregistered local memory");
    munmap(unreg, 65536);
    /* and the endpoint still works for a good request */
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.a, 4096, msg, sizeof msg), TERN_COMPLETED, "%s",
                 msg);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

/* The initiator still has the peer's old descriptor, which lists B; the
 * check against the peer's CURRENT table refuses B once it is gone. */
Test(shm_integration, buffer_unregistered_by_the_peer_is_never_written)
{
    it_peer p;
    shm_peer_start(&p, "shm,tcp", NULL);
    tern_engine *e = shm_engine_new("shm", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    uint8_t *buf = local_buf(e, 1 << 20);
    fill(buf, 1 << 20, 3);
    char msg[512] = "", line[128];
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.b, 65536, msg, sizeof msg), TERN_COMPLETED,
                 "B while registered: %s", msg);
    peer_ask(&p, "UNREG_B", line, sizeof line);
    cr_assert_str_eq(line, "UNREG ok\n");
    for (int op = TERN_READ; op <= TERN_WRITE; op++) {
        /* the first refusal makes the core refetch the descriptor: the
         * next request is refused against the fresh one (INVALID) */
        tern_status st = one(e, seg, op, buf, p.b + 4096, 65536, msg, sizeof msg);
        cr_assert(st == TERN_FAILED || st == TERN_INVALID,
                  "%s of an unregistered buffer did not fail", op == TERN_READ ? "READ" : "WRITE");
        cr_assert(strstr(msg, "registration"), "the refusal names the registration: %s", msg);
    }
    peer_ask(&p, "CHECK_B", line, sizeof line);
    cr_assert_str_eq(line, "B ok\n", "the unregistered buffer was written: %s", line);
    peer_check_canaries(&p);
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.a, 65536, msg, sizeof msg), TERN_COMPLETED,
                 "A still registered: %s", msg);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

/* After tern_unregister_memory returns in the target, no byte of a copy
 * that was under way lands in the range: the initiator announces each copy
 * in its own table before it checks the target's, and the target waits for
 * those that checked before its change (transports/shm/shm_drain.c).  200
 * cycles: A registered (full of 0x3C), 4 WRITEs of 16 MiB of 0x5A into it
 * queued, each one copy of 16 MiB (chunk_size); the peer unregisters A the
 * moment the first copy begins to land, and fills A with 0x3C; the batch
 * ends; A must hold only 0x3C.  Without the wait, the copy under way goes
 * on writing over the fill after the unregister returned. */
/* `cycles` of: A registered again, N WRITEs of 16 MiB queued into it, the
 * peer unregistering A as the first copy lands; returns in how many cycles
 * bytes landed after the unregister returned. */
static int unregister_while_copying(it_peer *p, tern_engine *e, int cycles)
{
    enum { N = 4, LEN = 16 << 20 };
    uint8_t *buf = local_buf(e, LEN);
    memset(buf, 0x5A, LEN);
    char line[128];
    int landed = 0, completed = 0;
    for (int c = 0; c < cycles; c++) {
        peer_ask(p, "REREG_A", line, sizeof line);
        cr_assert_str_eq(line, "REREG ok\n");
        tern_segment_id seg = open_expect(e, p, "shm");
        tern_batch *b = tern_batch_alloc(e, N);
        cr_assert_not_null(b, "%s", tern_engine_last_error(e));
        tern_request *r = same_writes(seg, buf, p->a, LEN, N);
        cr_assert_eq(tern_batch_submit(b, r, N), N);
        peer_ask(p, "UNREG_A_LIVE", line, sizeof line);
        cr_assert_str_eq(line, "UNREG ok\n", "cycle %d", c);
        uint64_t waited;
        completed += (int)(N - wait_after_kill(b, N, 30000, &waited));
        peer_ask(p, "CHECK_A", line, sizeof line);
        if (strcmp(line, "A ok\n") != 0 && landed++ == 0)
            cr_log_info("cycle %d: %s", c, line);
        cr_assert_eq(tern_batch_free(b), 0, "%s", tern_engine_last_error(e));
        free(r);
        tern_segment_close(e, seg);
    }
    cr_log_info("%d cycles, %d WRITEs of 16 MiB completed (the copies under way at the "
                "unregister); bytes landed after the unregister returned in %d", cycles,
                completed, landed);
    return landed;
}

Test(shm_integration, no_byte_lands_after_the_peer_unregistered)
{
    enum { CYCLES = 200 };
    it_peer p;
    shm_peer_start(&p, "shm", NULL);
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(
        "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: shm\n"
        "    chunk_size: 16M\n    slice_size: 16M\nretries: 0\nlog_level: error\n",
        "test_shm_integration", err, sizeof err);
    cr_assert(e, "engine: %s", err);
    int landed = unregister_while_copying(&p, e, CYCLES);
    cr_assert_eq(landed, 0, "bytes landed in A after its unregister returned, in %d of %d "
                 "cycles", landed, CYCLES);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(shm_integration, peer_killed_mid_batch_fails_in_bounded_time)
{
    it_peer p;
    shm_peer_start(&p, "shm", NULL);
    tern_engine *e = shm_engine_new("shm", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    const size_t n = 512, len = 16u << 20;
    uint8_t *src = local_buf(e, len);
    fill(src, len, 1);
    uint64_t waited;
    size_t failed = it_kill_mid_batch(e, seg, &p, src, len, n, 20000, &waited);
    cr_assert_gt(failed, 0, "8 GiB were not written within 20 ms, so some must fail");
    cr_log_info("peer killed: %zu of %zu requests FAILED after %" PRIu64 " ms", failed, n,
                waited);
    peer_reap(&p);
    tern_segment_close(e, seg);
    /* The same engine works with another peer. */
    it_peer q;
    shm_peer_start(&q, "shm", NULL);
    tern_segment_id seg2 = open_expect(e, &q, "shm");
    uint8_t *dst = local_buf(e, 1 << 20);
    write_read_back(e, seg2, src, dst, q.a, 1 << 20, NULL);
    tern_segment_close(e, seg2);
    tern_engine_destroy(e);
    peer_stop(&q);
}

/* A peer in another pid namespace publishes a pid that means nothing here:
 * shm must say so (unreachable) and never touch whatever process has that
 * pid here.  This initiator lists shm alone, so the cause reaches the
 * request's error unchanged. */
Test(shm_integration, peer_in_another_pid_namespace_is_unreachable)
{
    it_peer p;
    shm_peer_start_in_pid_ns(&p);
    tern_engine *e = shm_engine_new("shm", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    uint8_t *buf = local_buf(e, 65536);
    memset(buf, 0x11, 65536);
    char msg[768] = "";
    tern_status st = one(e, seg, TERN_WRITE, buf, p.a, 65536, msg, sizeof msg);
    cr_assert_eq(st, TERN_FAILED, "a WRITE to a peer in another pid namespace ended %d", st);
    cr_assert(strstr(msg, "pid namespace"), "the error names the pid namespace: %s", msg);
    cr_assert(strstr(msg, "TERN_ERR_UNREACHABLE"), "the error is UNREACHABLE: %s", msg);
    peer_check_canaries(&p);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

/* The build tree may sit where uid 65534 cannot read it (a clone in root's
 * mode-700 home), so the plugin the unprivileged child loads is copied, as
 * root, into a fresh world-readable directory under /tmp (not $TMPDIR: that
 * may be private too).  Fills dir and returns 0, or fails the test. */
static void shm_plugin_copy_for_all(char *dir, size_t dirlen)
{
    char tmpl[] = "/tmp/tern-shm-unpriv.XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl), "mkdtemp under /tmp: %s", strerror(errno));
    cr_assert_eq(chmod(tmpl, 0755), 0, "chmod %s: %s", tmpl, strerror(errno));
    snprintf(dir, dirlen, "%s", tmpl);
    const char *src = TERN_BUILD_DIR "/lib/tern/libtern-shm.so";
    char dst[sizeof tmpl + 32];
    snprintf(dst, sizeof dst, "%s/libtern-shm.so", tmpl);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(in, 0, "open %s: %s (build the shm plugin first)", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    cr_assert_geq(out, 0, "create %s: %s", dst, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        cr_assert_eq(write(out, buf, (size_t)n), n, "copy to %s: %s", dst, strerror(errno));
    cr_assert_eq(n, 0, "read %s: %s", src, strerror(errno));
    close(in);
    cr_assert_eq(fchmod(out, 0644), 0, "chmod %s: %s", dst, strerror(errno));
    cr_assert_eq(close(out), 0, "close %s: %s", dst, strerror(errno));
}

static void shm_plugin_copy_remove(const char *dir)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/libtern-shm.so", dir);
    unlink(path);
    rmdir(dir);
}

/* An initiator without the right to read the peer (another uid, no
 * CAP_SYS_PTRACE) gets one error naming the cause and the fix.  The
 * initiator runs in a child that drops to uid/gid 65534; it reports the
 * request's status and message through a pipe.  The child loads its plugin
 * from a copy it can read (shm_plugin_copy_for_all), so the test reaches the
 * check it is about from a build tree anywhere. */
Test(shm_integration, permission_denied_names_cause_and_fix)
{
    if (geteuid() != 0)
        cr_skip_test("needs root: it drops from root to another uid");
    char plugdir[PATH_MAX], yaml[PATH_MAX + 256];
    shm_plugin_copy_for_all(plugdir, sizeof plugdir);
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: p2p\nplugin_path: [\"%s\"]\n"
             "transports:\n  - name: shm\nretries: 1\nlog_level: error\n", plugdir);
    it_peer p;
    shm_peer_start(&p, "shm,tcp", NULL);
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t c = fork();
    cr_assert_geq(c, 0);
    if (c == 0) {
        close(fd[0]);
        char out[1024] = "setup failed";
        int st = -1;
        if (setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0) {
            char err[1024] = "";
            tern_engine *e = tern_engine_create_from_yaml(yaml, "unprivileged", err, sizeof err);
            tern_segment_id seg = e ? tern_segment_open(e, p.name) : -1;
            void *buf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
            if (seg >= 0 && tern_register_memory(e, buf, 4096, NULL) == 0) {
                tern_batch *b = tern_batch_alloc(e, 1);
                tern_request r = {.opcode = TERN_WRITE, .local = buf, .segment = seg,
                                  .remote = p.a, .length = 4096};
                tern_request_state rs = {0};
                if (b && tern_batch_submit(b, &r, 1) == 1 && tern_batch_wait(b, 30000) != TERN_ERR_TIMEOUT &&
                    tern_batch_state(b, 0, &rs) == 0) {
                    st = rs.status;
                    snprintf(out, sizeof out, "%s", tern_batch_error(b, 0));
                }
                tern_batch_free(b);
            } else {
                snprintf(out, sizeof out, "engine/open/register: %s",
                         e ? tern_engine_last_error(e) : err);
            }
            if (e)
                tern_engine_destroy(e);
        }
        dprintf(fd[1], "%d %s", st, out);
        _exit(0);
    }
    close(fd[1]);
    char res[1200] = "";
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd[0], res + got, sizeof res - 1 - got)) > 0)
        got += (size_t)n;
    close(fd[0]);
    waitpid(c, NULL, 0);
    shm_plugin_copy_remove(plugdir);
    int st = atoi(res);
    cr_assert_eq(st, TERN_FAILED, "the unprivileged WRITE: %s", res);
    cr_assert(strstr(res, "permission denied") && strstr(res, "uid 0") &&
              strstr(res, "CAP_SYS_PTRACE") && strstr(res, "fix:"),
              "the error names cause and fix: %s", res);
    cr_assert(strstr(res, "TERN_ERR_UNREACHABLE"), "the error is UNREACHABLE: %s", res);
    peer_check_canaries(&p);
    peer_stop(&p);
}

/* A peer that restarts at the same address (new pid, new table) is reached
 * again once its segment is opened again. */
Test(shm_integration, restarted_peer_reached_after_reopen)
{
    it_peer p;
    shm_peer_start(&p, "shm,tcp", NULL);
    tern_engine *e = shm_engine_new("shm", "test_shm_integration");
    tern_segment_id seg = open_expect(e, &p, "shm");
    uint8_t *src = local_buf(e, 1 << 20), *dst = local_buf(e, 1 << 20);
    fill(src, 1 << 20, 21);
    write_read_back(e, seg, src, dst, p.a, 1 << 20, "before the restart");
    char name[128];
    snprintf(name, sizeof name, "%s", p.name);
    kill(p.pid, SIGKILL);
    peer_reap(&p);
    tern_segment_close(e, seg);
    it_peer q;
    shm_peer_start(&q, "shm,tcp", name);
    cr_assert_str_eq(q.name, name);
    seg = open_expect(e, &q, "shm");
    fill(src, 1 << 20, 22);
    write_read_back(e, seg, src, dst, q.a, 1 << 20, "after the restart");
    peer_check_canaries(&q);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&q);
}

/* ---- memory a peer maps (transports/shm/shm_map.c) ------------------------ */

/* Counts the shm transport's "mapped: copies are memcpy" debug lines. */
static atomic_int mapped_lines;

static int count_mapped(void *user, int level, const char *engine, const char *msg)
{
    (void)user;
    (void)level;
    (void)engine;
    if (strstr(msg, "mapped: copies are memcpy"))
        atomic_fetch_add(&mapped_lines, 1);
    return 0;
}

static tern_engine *mapped_engine_new(const char *extra)
{
    char yaml[512], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: shm\n%s"
             "slice_size: 64K\nretries: 0\nlog_level: debug\n", extra);
    tern_engine_options o = {.size = sizeof o, .config_yaml = yaml,
                             .origin = "test_shm_integration", .log_hook = count_mapped};
    atomic_store(&mapped_lines, 0);
    tern_engine *e = tern_engine_create_with(&o, err, sizeof err);
    cr_assert(e, "engine: %s", err);
    return e;
}

static void peer_start_mem(it_peer *p, const char *mem)
{
    setenv("TERN_TEST_SHM_MEM", mem, 1);
    shm_peer_start(p, "shm", NULL);
    unsetenv("TERN_TEST_SHM_MEM");
}

/* A peer's registrations inside one shared-memory file sealed against
 * shrinking are mapped here and copied with memcpy: byte-exact both ways at
 * every size, the guards around them untouched. */
Test(shm_integration, shared_file_memory_mapped_byte_exact)
{
    it_peer p;
    peer_start_mem(&p, "memfd");
    tern_engine *e = mapped_engine_new("");
    tern_segment_id seg = open_expect(e, &p, "shm");
    size_t cap = (64u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 7, 4096, 65537, (4u << 20) + 1, (64u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 5,
                        IT_PATTERN, "memfd");
    peer_check_canaries(&p);
    cr_assert_gt(atomic_load(&mapped_lines), 0, "the peer's shared file was not mapped");
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

/* tern_alloc_memory on both sides: byte-exact through the mapping; the
 * calls' errors name what is wrong. */
Test(shm_integration, tern_allocated_memory_both_sides)
{
    it_peer p;
    peer_start_mem(&p, "alloc");
    tern_engine *e = mapped_engine_new("");
    tern_segment_id seg = open_expect(e, &p, "shm");
    size_t cap = (64u << 20) + 8192;
    uint8_t *src = NULL, *dst = NULL;
    cr_assert_eq(tern_alloc_memory(e, cap, NULL, "src", (void **)&src), 0, "%s",
                 tern_engine_last_error(e));
    cr_assert_eq(tern_alloc_memory(e, cap, NULL, NULL, (void **)&dst), 0, "%s",
                 tern_engine_last_error(e));
    cr_assert_eq(src[0] | src[cap - 1], 0, "allocated memory is zeroed");
    const uint64_t sizes[] = {1, 4096, 65537, (16u << 20) + 3, (64u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 9,
                        IT_PATTERN, "alloc");
    cr_assert_gt(atomic_load(&mapped_lines), 0, "the peer's allocation was not mapped");
    int x;
    void *out = NULL;
    cr_assert_eq(tern_free_memory(e, &x), TERN_ERR_NOT_FOUND);
    cr_assert(strstr(tern_engine_last_error(e), "not returned by tern_alloc_memory"), "%s",
              tern_engine_last_error(e));
    cr_assert_eq(tern_alloc_memory(e, 0, NULL, NULL, &out), TERN_ERR_INVAL);
    cr_assert_eq(tern_alloc_memory(e, 4096, NULL, "src", &out), TERN_ERR_EXISTS,
                 "a name already registered: %s", tern_engine_last_error(e));
    cr_assert_eq(tern_free_memory(e, src), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_free_memory(e, src), TERN_ERR_NOT_FOUND, "freed twice");
    tern_segment_close(e, seg);
    tern_engine_destroy(e); /* frees dst */
    peer_stop(&p);
}

/* The deregistration wait holds on the mapped path too: no byte of a
 * memcpy under way lands after the peer's tern_unregister_memory returned
 * (as no_byte_lands_after_the_peer_unregistered, 50 cycles). */
Test(shm_integration, no_byte_lands_after_unregister_mapped)
{
    enum { CYCLES = 50 };
    it_peer p;
    peer_start_mem(&p, "memfd");
    tern_engine *e = mapped_engine_new("    chunk_size: 16M\n    slice_size: 16M\n");
    int landed = unregister_while_copying(&p, e, CYCLES);
    cr_assert_gt(atomic_load(&mapped_lines), 0, "the peer's shared file was not mapped");
    cr_assert_eq(landed, 0, "bytes landed in A after its unregister returned, in %d of %d cycles",
                 landed, CYCLES);
    tern_engine_destroy(e);
    peer_stop(&p);
}

/* ---- the relay (transports/shm/shm_relay.c) --------------------------------- */

static atomic_int relay_silent;

static int count_relay(void *user, int level, const char *engine, const char *msg)
{
    (void)user;
    (void)engine;
    if (level == 1 /* warn */ && strstr(msg, "relay did not answer in 300 ms"))
        atomic_fetch_add(&relay_silent, 1);
    return 0;
}

/* A target stopped with SIGSTOP serves no relay: after relay_timeout_ms the
 * copier takes back the slots it posted and copies that chunk with
 * cross-memory attach (which needs nothing of the target), warns once, and
 * copies with it from then on.  Every byte arrives; after SIGCONT the relay
 * never writes the stale slots it was given. */
Test(shm_integration, a_stopped_target_is_reached_without_its_relay)
{
    it_peer p;
    shm_peer_start(&p, "shm", NULL);
    char yaml[512], err[1024] = "";
    snprintf(yaml, sizeof yaml, "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n"
             "  - name: shm\n    relay_timeout_ms: 300\nretries: 0\n");
    tern_engine_options o = {.size = sizeof o, .config_yaml = yaml,
                             .origin = "test_shm_integration", .log_hook = count_relay};
    atomic_store(&relay_silent, 0);
    tern_engine *e = tern_engine_create_with(&o, err, sizeof err);
    cr_assert(e, "engine: %s", err);
    tern_segment_id seg = open_expect(e, &p, "shm");
    size_t n = 4u << 20;
    uint8_t *src = local_buf(e, n), *dst = local_buf(e, n);
    fill(src, n, 21);
    write_read_back(e, seg, src, dst, p.a, n, "before SIGSTOP");
    cr_assert_eq(kill(p.pid, SIGSTOP), 0);
    fill(src, n, 22);
    uint64_t t0 = now_ms();
    write_read_back(e, seg, src, dst, p.a, n, "while stopped");
    uint64_t took = now_ms() - t0;
    /* Newer bytes while it is still stopped: what it was given before must
     * not land over them when it wakes up. */
    fill(src, n, 23);
    char msg[512] = "";
    cr_assert_eq(one(e, seg, TERN_WRITE, src, p.a, n, msg, sizeof msg), TERN_COMPLETED, "%s",
                 msg);
    cr_assert_eq(kill(p.pid, SIGCONT), 0);
    cr_assert_lt(took, 10000, "a stopped target cost %" PRIu64 " ms", took);
    cr_assert_geq(atomic_load(&relay_silent), 1, "no warning named the silent relay");
    usleep(200 * 1000); /* the woken relay finds only slots taken back */
    memset(dst, 0, n);
    cr_assert_eq(one(e, seg, TERN_READ, dst, p.a, n, msg, sizeof msg), TERN_COMPLETED,
                 "%s", msg);
    cr_assert_eq(memcmp(src, dst, n), 0, "a stale relayed copy landed after SIGCONT");
    cr_log_info("stopped target: 4 MiB written and read back in %" PRIu64 " ms", took);
    peer_check_canaries(&p);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}
