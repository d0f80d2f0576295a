/* tests/transports/test_efa_integration.c: two engines in separate processes, through
 * the public API, over the efa transport with real libfabric providers:
 * tcp (tcp;ofi_rxm on lo) and shm.  The target is tests/support/helpers/efa_peer.c
 * (GUARD | A | B | GUARD, canaries in the guards); this process initiates.
 * Also transport negotiation: {efa, tcp} meets {tcp} on tcp, and two
 * {efa, tcp} engines use efa. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>

#include "engine/engine_state.h"
#include "integration_common.h"

#define PEER_PATH TERN_BUILD_DIR "/bin/tern-test-efa-peer"

/* The engine YAML for a preference list ("efa-tcp,tcp"), as the peer does. */
static const char *yaml_for(const char *list)
{
    static char yaml[2048];
    char copy[256];
    size_t used = (size_t)snprintf(yaml, sizeof yaml,
                                   "server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                   "slice_size: 64K\nretries: 2\nio_timeout_ms: 3000\n"
                                   "log_level: warn\ntransports:\n");
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const char *entry = !strcmp(t, "efa-tcp")   ? "  - name: efa\n    provider: tcp\n"
                                                      "    iface: lo\n"
                            : !strcmp(t, "efa-shm") ? "  - name: efa\n    provider: shm\n"
                            : !strcmp(t, "efa-shm-1M")
                                ? "  - name: efa\n    provider: shm\n    slice_size: 1M\n"
                            : !strcmp(t, "efa-shm-rails3")
                                ? "  - name: efa\n    provider: shm\n    rails: 3\n"
                                : "  - name: tcp\n";
        used += (size_t)snprintf(yaml + used, sizeof yaml - used, "%s", entry);
    }
    return yaml;
}

/* An engine for the list; skips the test when efa cannot load here. */
static tern_engine *engine_new(const char *list)
{
    char err[2048] = "";
    tern_engine *e = tern_engine_create_from_yaml(yaml_for(list), "test_efa_integration", err,
                                                  sizeof err);
    if (!e && strstr(err, "efa") && strstr(err, "provider"))
        cr_skip_test("efa (%s) cannot load here: %s", list, err);
    cr_assert(e, "engine (%s): %s", list, err);
    return e;
}

TestSuite(efa_integration, .timeout = 180);

/* ---- data path: the same suite as the TCP transport's ---------------------- */

static void data_path(const char *list)
{
    it_peer p;
    tern_engine *e = engine_new(list);
    peer_start(&p, PEER_PATH, list);
    tern_segment_id seg = open_expect(e, &p, "efa");
    size_t cap = (16u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 4096, 65536, 65537, (16u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 5,
                        IT_PATTERN, list);
    /* across the boundary between the two registered buffers */
    it_span_both_buffers(e, seg, &p, src, dst, 300000, 150000, 77, IT_PATTERN);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(efa_integration, data_path_provider_tcp) { data_path("efa-tcp"); }

/* Operations the efa transport posted on each of its devices, from its
 * status line ("; <name>: ... posted N, ..."), in device order. */
static int posted_per_device(tern_engine *e, unsigned long long *out, int max)
{
    tern_xport *x = &e->xports[0];
    char q[4096] = "";
    int n = 0;
    cr_assert_eq(x->ops->query(x->pl->ctx, "", q, sizeof q), 0);
    for (const char *at = q; n < max && (at = strstr(at, ", posted ")) != NULL; at++)
        out[n++] = strtoull(at + 9, NULL, 10);
    return n;
}

/* rails: 3 on both sides: three endpoints (devices "shm", "shm.r1",
 * "shm.r2"), each with its own progress thread; the core spreads slices
 * over the device pairs, so every rail posts, and every byte lands. */
Test(efa_integration, rails_spread_byte_exact_provider_shm)
{
    it_peer p;
    tern_engine *e = engine_new("efa-shm-rails3");
    tern_xport *x = &e->xports[0];
    tern_device_info dev[TERN_MAX_DEVICES];
    int nd = x->ops->devices(x->pl->ctx, dev, TERN_MAX_DEVICES);
    cr_assert_eq(nd, 3, "rails: 3 must give three devices, got %d", nd);
    cr_assert_str_eq(dev[0].name, "shm");
    cr_assert_str_eq(dev[1].name, "shm.r1");
    cr_assert_str_eq(dev[2].name, "shm.r2");
    peer_start(&p, PEER_PATH, "efa-shm-rails3");
    tern_segment_id seg = open_expect(e, &p, "efa");
    size_t cap = (16u << 20) + 8192;
    uint8_t *src = local_buf(e, cap), *dst = local_buf(e, cap);
    const uint64_t sizes[] = {1, 65536, 65537, (16u << 20) + 3};
    it_write_read_sizes(e, seg, &p, src, dst, sizes, sizeof sizes / sizeof *sizes, 5,
                        IT_PATTERN, "efa-shm-rails3");
    unsigned long long posted[TERN_MAX_DEVICES];
    int n = posted_per_device(e, posted, TERN_MAX_DEVICES);
    cr_assert_eq(n, 3, "status names %d devices", n);
    for (int i = 0; i < n; i++)
        cr_assert_gt(posted[i], 0, "rail %d (%s) posted nothing: slices were not spread", i,
                     dev[i].name);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}
Test(efa_integration, data_path_provider_shm) { data_path("efa-shm"); }

/* WRITEs the efa transport sent through shm's bounce buffers ("bounce_writes"
 * summed over its devices' status). */
static unsigned long long bounce_writes(tern_engine *e)
{
    tern_xport *x = &e->xports[0];
    char q[4096] = "";
    unsigned long long n = 0;
    cr_assert_eq(x->ops->query(x->pl->ctx, "", q, sizeof q), 0);
    for (const char *at = q; (at = strstr(at, "bounce_writes ")) != NULL; at++)
        n += strtoull(at + 14, NULL, 10);
    return n;
}

/* A target that dies at its first process_vm_readv, the call with which
 * shm copies a WRITE by cross-memory attach (docs/protocol.md, efa rails).
 * WRITEs of 1 MiB slices (shm_bounce_min 256K) go through the bounce
 * buffers and it lives; a 64 KiB WRITE goes by attach and kills it, which
 * shows the filter works. */
Test(efa_integration, large_writes_never_attach_small_ones_do_provider_shm)
{
    it_peer p;
    tern_engine *e = engine_new("efa-shm-1M");
    peer_start(&p, PEER_PATH, "efa-shm-1M,no-attach-reads");
    tern_segment_id seg = open_expect(e, &p, "efa");
    const uint64_t len = (4u << 20) + 3;
    uint8_t *src = local_buf(e, len), *dst = local_buf(e, len);
    it_fill(IT_PATTERN, src, len, 9);
    /* 4 whole slices of 1 MiB and a 3-byte one: the tail is an inject */
    write_read_back(e, seg, src, dst, p.a, len, "4 MiB + 3 through the bounce buffers");
    cr_assert_geq(bounce_writes(e), 4, "the 1 MiB slices did not take the bounce endpoint");
    peer_check_canaries(&p);
    fprintf(p.in, "EXIT\n");
    fflush(p.in);
    int sig = peer_reap_signal(&p);
    cr_assert_eq(sig, 0, "the target died of signal %d: a large WRITE was copied by "
                 "cross-memory attach", sig);
    tern_segment_close(e, seg);

    it_peer q;
    peer_start(&q, PEER_PATH, "efa-shm-1M,no-attach-reads");
    seg = open_expect(e, &q, "efa");
    /* The WRITE fails (the target is gone) or, were it not attached, completes. */
    tern_batch *b = tern_batch_alloc(e, 1);
    tern_request r = {.opcode = TERN_WRITE, .local = src, .segment = seg, .remote = q.a,
                      .length = 64u << 10};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    int rc = tern_batch_wait(b, 30000);
    sig = peer_reap_signal(&q);
    cr_assert_eq(sig, SIGSYS, "a 64 KiB WRITE (below shm_bounce_min) should go by "
                 "cross-memory attach and meet the filter; the target ended with signal %d "
                 "(wait: %d, %s)", sig, rc, tern_batch_error(b, 0));
    cr_assert_eq(tern_batch_free(b), 0);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
}

static void refused(const char *list)
{
    it_peer p;
    tern_engine *e = engine_new(list);
    peer_start(&p, PEER_PATH, list);
    tern_segment_id seg = open_expect(e, &p, "efa");
    uint8_t *buf = local_buf(e, 1 << 20);
    it_refuse_outside_buffers(e, seg, &p, buf, list);
    char msg[512];
    cr_assert_eq(one(e, seg, TERN_WRITE, buf, p.a, 4096, msg, sizeof msg), TERN_COMPLETED,
                 "a good request after the refusals: %s", msg);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(efa_integration, unregistered_refused_provider_tcp) { refused("efa-tcp"); }
Test(efa_integration, unregistered_refused_provider_shm) { refused("efa-shm"); }

static void *kill_later(void *arg)
{
    usleep(20000);
    kill(*(pid_t *)arg, SIGKILL);
    return NULL;
}

/* Regions in /dev/shm that libfabric shm made for process pid under this
 * transport's names (tern-efa.<pid namespace>.<pid>.<nonce>...). */
static int shm_regions_of(pid_t pid)
{
    struct stat st;
    char prefix[96];
    int n = 0;
    cr_assert_eq(stat("/proc/self/ns/pid", &st), 0);
    snprintf(prefix, sizeof prefix, "tern-efa.%llu.%d.", (unsigned long long)st.st_ino,
             (int)pid);
    DIR *d = opendir("/dev/shm");
    cr_assert_not_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += !strncmp(de->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* How long a post has been stuck inside libfabric's provider (the efa
 * transport's own account, "stuck_post_ms" of its status), 0 if none. */
static uint64_t stuck_post_ms(tern_engine *e)
{
    tern_xport *x = &e->xports[0];
    char out[1024] = "";
    x->ops->query(x->pl->ctx, "", out, sizeof out);
    const char *at = strstr(out, "stuck_post_ms ");
    return at ? strtoull(at + 14, NULL, 10) : 0;
}

/* libfabric's shm provider (1.17) spins for ever in a post to a peer that
 * died holding its region's lock: no engine can take that thread back
 * (docs/protocol.md, libfabric shm regions).  When the transport reports
 * such a post, the rest of the test cannot tell anything of tern: it is
 * skipped, saying so, instead of waiting out its timeouts. */
static void skip_if_provider_spins(tern_engine *e, const char *list, const char *when)
{
    uint64_t ms = stuck_post_ms(e);
    if (ms > 2000)
        cr_skip_test("%s: KNOWN LIMITATION of libfabric's shm provider %s: a post to the "
                     "killed peer has spun inside the provider for %" PRIu64 " ms (the peer "
                     "died holding its region's lock; docs/protocol.md)", list, when, ms);
}

typedef struct submitter {
    tern_batch *b;
    tern_request *r;
    size_t n;
    int rc;
} submitter;

static void *submit_main(void *arg)
{
    submitter *s = arg;
    s->rc = tern_batch_submit(s->b, s->r, s->n);
    return NULL;
}

static void killed(const char *list)
{
    it_peer p;
    tern_engine *e = engine_new(list);
    peer_start(&p, PEER_PATH, list);
    tern_segment_id seg = open_expect(e, &p, "efa");
    /* 32 GiB: shm moves about 20 GB/s on a quiet machine, so the batch runs
     * for seconds even when the killer thread is scheduled late on a loaded
     * host (4 GiB was not always enough). */
    const size_t n = 2048, len = 16u << 20;
    uint8_t *src = local_buf(e, len);
    fill(src, len, 3);
    tern_batch *b = tern_batch_alloc(e, n);
    tern_request *r = same_writes(seg, src, p.a, len, n);
    /* tern_batch_submit may itself post slices while it hands them over,
     * so the kill comes from a thread 20 ms after the start, and the submit
     * runs on a thread of its own: one inside the provider when the peer
     * dies can spin there for ever (skip_if_provider_spins). */
    pthread_t killer, st;
    submitter sb = {b, r, n, -1};
    uint64_t ts = now_ms();
    cr_assert_eq(pthread_create(&st, NULL, submit_main, &sb), 0);
    cr_assert_eq(pthread_create(&killer, NULL, kill_later, &p.pid), 0);
    pthread_join(killer, NULL);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    if (pthread_timedjoin_np(st, NULL, &until) != 0) {
        skip_if_provider_spins(e, list, "(tern_batch_submit was posting when the peer died)");
        cr_assert_fail("%s: tern_batch_submit did not return 30 s after the kill", list);
    }
    cr_assert_eq(sb.rc, (int)n);
    uint64_t submit_ms = now_ms() - ts, waited;
    if (tern_batch_wait(b, 20000) == TERN_ERR_TIMEOUT)
        skip_if_provider_spins(e, list, "(requests still pending 20 s after the kill)");
    size_t failed = wait_after_kill(b, n, 60000, &waited);
    cr_assert_gt(failed, 0, "%s: 32 GiB cannot be written before the kill: some must fail "
                 "(submit took %" PRIu64 " ms, wait %" PRIu64 " ms)", list, submit_ms, waited);
    cr_log_info("%s: target killed: %zu of %zu FAILED after %" PRIu64 " ms (first: %s)", list,
                failed, n, waited, tern_batch_error(b, n - 1));
    cr_assert_eq(tern_batch_free(b), 0);
    free(r);
    /* Checked before the reap: until then the target is a zombie whose pid
     * still exists, so no engine (other tests run beside this one) removes
     * its region yet. */
    int shm = !strcmp(list, "efa-shm");
    const int regions = 4; /* its default 2 rails, each with a bounce endpoint */
    if (shm)
        cr_assert_eq(shm_regions_of(p.pid), regions, "the killed target's %d shm regions "
                     "should still be in /dev/shm (SIGKILL runs no cleanup)", regions);
    peer_reap(&p);
    tern_segment_close(e, seg);
    skip_if_provider_spins(e, list, "(before a new target)");
    /* The same engine works with a new target, and the new target's engine
     * removed the region the killed one left. */
    it_peer q;
    peer_start(&q, PEER_PATH, list);
    tern_segment_id seg2 = open_expect(e, &q, "efa");
    if (shm)
        cr_assert_eq(shm_regions_of(p.pid), 0, "the killed target's shm regions are still in "
                     "/dev/shm after a new engine started");
    uint8_t *dst = local_buf(e, 1 << 20);
    write_read_back(e, seg2, src, dst, q.a, 1 << 20, NULL);
    tern_segment_close(e, seg2);
    tern_engine_destroy(e);
    peer_stop(&q);
}

Test(efa_integration, target_killed_mid_batch_provider_tcp) { killed("efa-tcp"); }
Test(efa_integration, target_killed_mid_batch_provider_shm) { killed("efa-shm"); }

/* ---- negotiation ------------------------------------------------------------- */

static void negotiate(const char *mine, const char *theirs, const char *expect)
{
    it_peer p;
    char msg[512];
    tern_engine *e = engine_new(mine);
    peer_start(&p, PEER_PATH, theirs);
    tern_segment_id seg = open_expect(e, &p, expect);
    uint8_t *src = local_buf(e, 1 << 20), *dst = local_buf(e, 1 << 20);
    fill(src, 1 << 20, 42);
    cr_assert_eq(one(e, seg, TERN_WRITE, src, p.a + 5, 1 << 20, msg, sizeof msg),
                 TERN_COMPLETED, "%s -> %s: %s", mine, theirs, msg);
    cr_assert_eq(one(e, seg, TERN_READ, dst, p.a + 5, 1 << 20, msg, sizeof msg), TERN_COMPLETED,
                 "%s", msg);
    cr_assert_eq(memcmp(src, dst, 1 << 20), 0);
    peer_check_canaries(&p);
    tern_segment_close(e, seg);
    tern_engine_destroy(e);
    peer_stop(&p);
}

Test(efa_integration, efa_and_tcp_meets_tcp_only_on_tcp) { negotiate("efa-tcp,tcp", "tcp", "tcp"); }
Test(efa_integration, two_efa_engines_use_efa) { negotiate("efa-tcp,tcp", "efa-tcp,tcp", "efa"); }
Test(efa_integration, tcp_first_preference_wins) { negotiate("tcp,efa-tcp", "efa-tcp,tcp", "tcp"); }
