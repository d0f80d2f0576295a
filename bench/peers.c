/* bench/peers.c: what a peer costs (bench/peers.sh drives it).
 *
 *   tern-bench-peers --mode targets --count K --yaml FILE [--size S]
 *       K target engines in this process, each with one registered buffer
 *       of S bytes (default 64K); prints "PEER name addr" per engine, then
 *       "READY", and runs until stdin closes.
 *   tern-bench-peers --mode initiator --peers FILE --yaml FILE [--size S]
 *       One engine; opens every peer of FILE (lines "PEER name addr"),
 *       writes S bytes of a pattern unique to each peer in one batch, reads
 *       them all back and compares every byte.  Prints one line
 *       "RESULT peers=N reach_s=T threads0=.. threads1=.. fds0=.. fds1=..
 *        rss0_kb=.. rss1_kb=.. verified=N failed=N"
 *       where 0 is before the first peer and 1 after all were reached and
 *       have been idle for a moment; reach_s covers opening the segments and
 *       the write batch.
 *   tern-bench-peers --mode initiators --count K --target NAME --addr A
 *                    --yaml FILE [--size S] [--first I]
 *       K initiator engines in this process, engine i writes S bytes to
 *       A + (first + i) * S of the one target, reads them back and compares;
 *       prints "RESULT initiators=K verified=N failed=N reach_s=T" and runs
 *       until stdin closes (so the target can be measured with all of them
 *       connected). */
#define _GNU_SOURCE
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    return n - (d && !strcmp(path, "/proc/self/fd"));
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed * 40503u) >> 13);
}

static void wait_stdin_eof(void)
{
    char buf[256];
    while (fgets(buf, sizeof buf, stdin))
        ;
}

static tern_engine *engine(const char *yaml, char *err, size_t errlen)
{
    return tern_engine_create_from_yaml(yaml, "peers.yaml", err, errlen);
}

static int run_targets(const char *yaml, int count, size_t size)
{
    tern_engine **e = calloc((size_t)count, sizeof *e);
    uint8_t **buf = calloc((size_t)count, sizeof *buf);
    char err[1024];
    for (int i = 0; i < count; i++) {
        e[i] = engine(yaml, err, sizeof err);
        buf[i] = malloc(size);
        if (buf[i])
            memset(buf[i], 0x5A, size); /* touched now: not counted per peer */
        if (!e[i] || tern_register_memory(e[i], buf[i], size, NULL) != 0) {
            fprintf(stderr, "peers: target %d: %s\n", i, e[i] ? tern_engine_last_error(e[i]) : err);
            return 1;
        }
        printf("PEER %s %" PRIu64 "\n", tern_engine_server_name(e[i]),
               (uint64_t)(uintptr_t)buf[i]);
    }
    printf("READY\n");
    fflush(stdout);
    wait_stdin_eof();
    for (int i = 0; i < count; i++) {
        tern_engine_destroy(e[i]);
        free(buf[i]);
    }
    free(e);
    free(buf);
    return 0;
}

/* One batch of n requests; returns how many completed. */
static int batch_run(tern_engine *e, tern_request *r, int n)
{
    tern_batch *b = tern_batch_alloc(e, (size_t)n);
    if (!b)
        return 0;
    int ok = 0;
    if (tern_batch_submit(b, r, (size_t)n) == n || 1) {
        tern_batch_wait(b, 120000);
        for (int i = 0; i < n; i++) {
            tern_request_state st;
            if (tern_batch_state(b, (size_t)i, &st) == 0 && st.status == TERN_COMPLETED)
                ok++;
            else if (ok + 1 == i + 1 || i < 3)
                fprintf(stderr, "peers: request %d: %s\n", i, tern_batch_error(b, (size_t)i));
        }
    }
    tern_batch_free(b);
    return ok;
}

static int run_initiator(const char *yaml, const char *peers, size_t size)
{
    char *txt = read_file(peers);
    if (!txt) {
        fprintf(stderr, "peers: cannot read %s\n", peers);
        return 1;
    }
    int cap = 0, n = 0;
    for (char *p = txt; (p = strstr(p, "PEER ")); p++)
        cap++;
    char (*name)[128] = calloc((size_t)cap + 1, sizeof *name);
    uint64_t *addr = calloc((size_t)cap + 1, sizeof *addr);
    for (char *p = txt; (p = strstr(p, "PEER ")) && n < cap; p++)
        if (sscanf(p, "PEER %127s %" SCNu64, name[n], &addr[n]) == 2)
            n++;
    free(txt);
    char err[1024];
    tern_engine *e = engine(yaml, err, sizeof err);
    if (!e) {
        fprintf(stderr, "peers: initiator: %s\n", err);
        return 1;
    }
    uint8_t *src = malloc((size_t)n * size), *dst = calloc((size_t)n, size);
    for (int i = 0; i < n; i++)
        fill(src + (size_t)i * size, size, (uint32_t)i + 1);
    memset(dst, 0xAA, (size_t)n * size); /* touched now: not counted per peer */
    if (tern_register_memory(e, src, (size_t)n * size, NULL) ||
        tern_register_memory(e, dst, (size_t)n * size, NULL)) {
        fprintf(stderr, "peers: register: %s\n", tern_engine_last_error(e));
        return 1;
    }
    usleep(200000);
    int th0 = count_dir("/proc/self/task"), fd0 = count_dir("/proc/self/fd");
    long rss0 = rss_kb();
    double t0 = now_s();
    tern_request *r = calloc((size_t)n, sizeof *r);
    for (int i = 0; i < n; i++) {
        tern_segment_id s = tern_segment_open(e, name[i]);
        if (s < 0) {
            fprintf(stderr, "peers: open %s: %s\n", name[i], tern_engine_last_error(e));
            return 1;
        }
        r[i] = (tern_request){.opcode = TERN_WRITE, .local = src + (size_t)i * size,
                              .segment = s, .remote = addr[i], .length = size};
    }
    int wrote = batch_run(e, r, n);
    double reach = now_s() - t0;
    for (int i = 0; i < n; i++) {
        r[i].opcode = TERN_READ;
        r[i].local = dst + (size_t)i * size;
    }
    int read = batch_run(e, r, n), verified = 0;
    for (int i = 0; i < n; i++)
        verified += !memcmp(src + (size_t)i * size, dst + (size_t)i * size, size);
    usleep(500000); /* idle: what stays per peer */
    int th1 = count_dir("/proc/self/task"), fd1 = count_dir("/proc/self/fd");
    long rss1 = rss_kb();
    printf("RESULT peers=%d reach_s=%.3f threads0=%d threads1=%d fds0=%d fds1=%d rss0_kb=%ld "
           "rss1_kb=%ld verified=%d failed=%d\n", n, reach, th0, th1, fd0, fd1, rss0, rss1,
           verified, n - verified);
    if (wrote != n || read != n)
        fprintf(stderr, "peers: %d of %d writes and %d reads completed\n", wrote, n, read);
    fflush(stdout);
    tern_engine_destroy(e);
    free(r);
    free(src);
    free(dst);
    free(name);
    free(addr);
    return verified == n ? 0 : 3;
}

static int run_initiators(const char *yaml, int count, const char *target, uint64_t addr,
                          size_t size, int first)
{
    tern_engine **e = calloc((size_t)count, sizeof *e);
    uint8_t *src = malloc((size_t)count * size), *dst = calloc((size_t)count, size);
    char err[1024];
    int verified = 0, failed = 0;
    double t0 = now_s();
    for (int i = 0; i < count; i++) {
        e[i] = engine(yaml, err, sizeof err);
        uint8_t *s = src + (size_t)i * size, *d = dst + (size_t)i * size;
        fill(s, size, (uint32_t)(first + i) + 7);
        if (!e[i] || tern_register_memory(e[i], s, size, NULL) ||
            tern_register_memory(e[i], d, size, NULL)) {
            fprintf(stderr, "peers: initiator %d: %s\n", i, e[i] ? tern_engine_last_error(e[i]) : err);
            return 1;
        }
        tern_segment_id sg = tern_segment_open(e[i], target);
        if (sg < 0) {
            fprintf(stderr, "peers: initiator %d: open %s: %s\n", i, target,
                    tern_engine_last_error(e[i]));
            failed++;
            continue;
        }
        uint64_t ra = addr + (uint64_t)(first + i) * size;
        tern_request w = {.opcode = TERN_WRITE, .local = s, .segment = sg, .remote = ra,
                          .length = size};
        tern_request rd = {.opcode = TERN_READ, .local = d, .segment = sg, .remote = ra,
                           .length = size};
        if (batch_run(e[i], &w, 1) == 1 && batch_run(e[i], &rd, 1) == 1 && !memcmp(s, d, size))
            verified++;
        else
            failed++;
    }
    printf("RESULT initiators=%d verified=%d failed=%d reach_s=%.3f\n", count, verified, failed,
           now_s() - t0);
    fflush(stdout);
    wait_stdin_eof();
    for (int i = 0; i < count; i++)
        if (e[i])
            tern_engine_destroy(e[i]);
    free(e);
    free(src);
    free(dst);
    return failed ? 3 : 0;
}

int main(int argc, char **argv)
{
    const char *mode = NULL, *yaml_path = NULL, *peers = NULL, *target = NULL;
    int count = 0, first = 0;
    size_t size = 64 << 10;
    uint64_t addr = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--mode")) mode = v;
        else if (!strcmp(k, "--yaml")) yaml_path = v;
        else if (!strcmp(k, "--peers")) peers = v;
        else if (!strcmp(k, "--target")) target = v;
        else if (!strcmp(k, "--count")) count = atoi(v);
        else if (!strcmp(k, "--first")) first = atoi(v);
        else if (!strcmp(k, "--size")) size = (size_t)strtoull(v, NULL, 0);
        else if (!strcmp(k, "--addr")) addr = strtoull(v, NULL, 0);
        else {
            fprintf(stderr, "tern-bench-peers: unknown option %s\n", k);
            return 2;
        }
    }
    char *yaml = yaml_path ? read_file(yaml_path) : NULL;
    if (!mode || !yaml || size == 0) {
        fprintf(stderr, "usage: tern-bench-peers --mode targets|initiator|initiators --yaml FILE "
                        "... (see bench/peers.c)\n");
        return 2;
    }
    int rc = 2;
    if (!strcmp(mode, "targets") && count > 0)
        rc = run_targets(yaml, count, size);
    else if (!strcmp(mode, "initiator") && peers)
        rc = run_initiator(yaml, peers, size);
    else if (!strcmp(mode, "initiators") && count > 0 && target && addr)
        rc = run_initiators(yaml, count, target, addr, size, first);
    else
        fprintf(stderr, "tern-bench-peers: missing options for mode %s\n", mode);
    free(yaml);
    return rc;
}
