#define _GNU_SOURCE
/* `huge_pages` (core/memory/pages.c): what registering host memory does to its
 * pages.  Each test reads the kernel's own account of the region
 * (/proc/self/smaps: VmFlags "hg" for MADV_HUGEPAGE, AnonHugePages for
 * pages that are huge) rather than trusting a return code. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tern/tern.h"
#include "tern/transport.h" /* TERN_LOG_WARN */

#define MiB ((size_t)1 << 20)
#define HUGE (2 * MiB)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

TestSuite(pages, .timeout = 60);

static char warned[1024];
static atomic_int nwarn;

static int keep_warning(void *user, int level, const char *engine, const char *msg)
{
    (void)user;
    (void)engine;
    if (level <= TERN_LOG_WARN && strstr(msg, "huge_pages")) {
        snprintf(warned, sizeof warned, "%s", msg);
        atomic_fetch_add(&nwarn, 1);
    }
    return 0;
}

static tern_engine *engine_with(const char *mode)
{
    char yaml[256], err[1024] = "";
    snprintf(yaml, sizeof yaml, "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n"
             "  - name: memcpy\nhuge_pages: %s\nlog_level: warn\n", mode);
    tern_engine_options o = {.size = sizeof o, .config_yaml = yaml, .origin = "test_pages",
                             .log_hook = keep_warning};
    warned[0] = 0;
    atomic_store(&nwarn, 0);
    tern_engine *e = tern_engine_create_with(&o, err, sizeof err);
    cr_assert(e, "engine with huge_pages: %s: %s", mode, err);
    return e;
}

/* n bytes of 4 KiB anonymous pages starting on a 2 MiB boundary, filled
 * with a pattern (so they are there before the registration). */
static uint8_t *pages_4k(size_t n, void **map, size_t *maplen)
{
    *maplen = n + HUGE;
    *map = mmap(NULL, *maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(*map != MAP_FAILED, "mmap: %s", strerror(errno));
    madvise(*map, *maplen, MADV_NOHUGEPAGE); /* 4 KiB even where THP is "always" */
    uint8_t *p = (uint8_t *)(((uintptr_t)*map + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + 3);
    return p;
}

static int pattern_intact(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(i * 7 + 3))
            return 0;
    return 1;
}

/* From /proc/self/smaps, for the mapping that holds addr: its AnonHugePages
 * in bytes, and whether VmFlags has flag (two letters). */
static void smaps_of(const void *addr, size_t *huge, int *has_flag, const char *flag)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert(f, "/proc/self/smaps: %s", strerror(errno));
    char line[512];
    int in = 0;
    *huge = 0;
    *has_flag = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        unsigned long kb;
        if (in && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)
            *huge = kb << 10;
        if (in && !strncmp(line, "VmFlags:", 8)) {
            char want[8];
            snprintf(want, sizeof want, " %s", flag);
            *has_flag = strstr(line + 8, want) != NULL;
        }
    }
    fclose(f);
}

static void skip_without_collapse(void)
{
    void *m = mmap(NULL, 2 * HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(m != MAP_FAILED);
    void *p = (void *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    memset(p, 1, HUGE);
    int ok = madvise(p, HUGE, MADV_HUGEPAGE) == 0 && madvise(p, HUGE, MADV_COLLAPSE) == 0;
    int e = errno;
    munmap(m, 2 * HUGE);
    if (!ok)
        cr_skip_test("this kernel does not collapse anonymous memory (MADV_COLLAPSE: %s; "
                     "Linux 6.1+ with transparent huge pages)", strerror(e));
}

/* collapse: the 4 KiB pages already there become huge during the call, every
 * byte kept; the region's partial 2 MiB at each end is not advised. */
Test(pages, collapse_makes_registered_pages_huge_and_keeps_bytes)
{
    skip_without_collapse();
    void *map;
    size_t maplen, huge;
    int hg;
    uint8_t *p = pages_4k(8 * MiB, &map, &maplen);
    smaps_of(p, &huge, &hg, "hg");
    cr_assert_eq(huge, 0, "the pages start as 4 KiB (%zu bytes huge)", huge);
    tern_engine *e = engine_with("collapse");
    /* 4 KiB short at both ends: the first and last 2 MiB are not whole */
    cr_assert_eq(tern_register_memory(e, p + 4096, 8 * MiB - 8192, NULL), 0, "%s",
                 tern_engine_last_error(e));
    cr_assert_eq(atomic_load(&nwarn), 0, "warned: %s", warned);
    smaps_of(p + HUGE, &huge, &hg, "hg");
    cr_assert(hg, "the aligned part is advised (VmFlags hg)");
    cr_assert_eq(huge, 4 * MiB, "the 2 whole 2 MiB pages inside are huge: %zu bytes", huge);
    smaps_of(p, &huge, &hg, "hg");
    cr_assert(!hg && huge == 0, "the partial first 2 MiB is left alone (hg %d, %zu huge)", hg,
              huge);
    smaps_of(p + 6 * MiB, &huge, &hg, "hg");
    cr_assert(!hg && huge == 0, "the partial last 2 MiB is left alone (hg %d, %zu huge)", hg,
              huge);
    cr_assert(pattern_intact(p, 8 * MiB), "collapsing kept every byte");
    tern_engine_destroy(e);
    munmap(map, maplen);
}

/* advise marks the memory for huge pages and leaves the pages there as they
 * are; off (the default) touches nothing. */
Test(pages, advise_marks_and_off_leaves_alone)
{
    void *map;
    size_t maplen, huge;
    int hg, nohg;
    uint8_t *p = pages_4k(4 * MiB, &map, &maplen);
    tern_engine *e = engine_with("off");
    cr_assert_eq(tern_register_memory(e, p, 4 * MiB, NULL), 0, "%s", tern_engine_last_error(e));
    smaps_of(p, &huge, &hg, "hg");
    smaps_of(p, &huge, &nohg, "nh");
    cr_assert(!hg && nohg, "off: the application's own advice (nh) stands");
    tern_engine_destroy(e);

    e = engine_with("advise");
    cr_assert_eq(tern_register_memory(e, p, 4 * MiB, NULL), 0, "%s", tern_engine_last_error(e));
    smaps_of(p, &huge, &hg, "hg");
    cr_assert(hg, "advise: VmFlags hg");
    cr_assert_eq(atomic_load(&nwarn), 0, "warned: %s", warned);
    cr_assert(pattern_intact(p, 4 * MiB));
    tern_engine_destroy(e);
    munmap(map, maplen);
}

/* Memory from tern_alloc_memory (a shared file the peer maps) and a region
 * with no whole 2 MiB inside are left alone, without a warning. */
Test(pages, allocated_and_small_regions_left_alone)
{
    tern_engine *e = engine_with("collapse");
    void *a = NULL;
    cr_assert_eq(tern_alloc_memory(e, 4 * MiB, NULL, NULL, &a), 0, "%s",
                 tern_engine_last_error(e));
    size_t huge;
    int hg;
    smaps_of(a, &huge, &hg, "hg");
    cr_assert(!hg, "tern_alloc_memory's file is not advised");
    void *map;
    size_t maplen;
    uint8_t *p = pages_4k(HUGE, &map, &maplen);
    cr_assert_eq(tern_register_memory(e, p + 4096, HUGE - 4096, NULL), 0, "%s",
                 tern_engine_last_error(e));
    smaps_of(p + 4096, &huge, &hg, "hg");
    cr_assert(!hg && huge == 0, "less than one whole 2 MiB page: nothing advised");
    cr_assert_eq(atomic_load(&nwarn), 0, "warned: %s", warned);
    tern_engine_destroy(e);
    munmap(map, maplen);
}

/* A collapse the kernel refuses (a writable shared mapping of a file on
 * disk) is a warning naming the call, the range and what to check; the
 * registration stands and transfers run on it. */
Test(pages, refused_collapse_warns_and_registration_stands)
{
    char path[] = "/var/tmp/tern-pages-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
    unlink(path);
    cr_assert_eq(ftruncate(fd, 6 * MiB), 0);
    uint8_t *m = mmap(NULL, 6 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert(m != MAP_FAILED);
    uint8_t *p = (uint8_t *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    memset(p, 5, HUGE);
    if (madvise(p, HUGE, MADV_COLLAPSE) == 0)
        cr_skip_test("this kernel collapses writable file pages on /var/tmp: the refusal "
                     "cannot be provoked here");
    tern_engine *e = engine_with("collapse");
    cr_assert_eq(tern_register_memory(e, m, 6 * MiB, NULL), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(atomic_load(&nwarn), 1, "one warning, got %d", atomic_load(&nwarn));
    cr_assert(strstr(warned, "MADV_COLLAPSE") && strstr(warned, "stay 4 KiB"), "%s", warned);
    char at[32];
    snprintf(at, sizeof at, "%p", (void *)m);
    cr_assert(strstr(warned, at), "the warning names the region %s: %s", at, warned);

    uint8_t src[4096];
    memset(src, 9, sizeof src);
    cr_assert_eq(tern_register_memory(e, src, sizeof src, NULL), 0);
    tern_segment_id seg = tern_segment_open(e, tern_engine_server_name(e));
    cr_assert(seg >= 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_transfer_sync(e, TERN_WRITE, src, seg, (uintptr_t)p, sizeof src, 5000), 0,
                 "%s", tern_engine_last_error(e));
    cr_assert_eq(p[0], 9);
    cr_assert_eq(p[4095], 9);
    tern_engine_destroy(e);
    munmap(m, 6 * MiB);
    close(fd);
}
