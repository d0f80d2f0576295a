/* tests/support/fd_limit.h: a test that opens many sockets in its own
 * process (a thousand idle strangers, 500 clients at once) first raises its
 * soft open-file limit.  Many machines start processes at a soft limit of
 * 1,024 with a much higher hard limit; raising the soft limit up to the hard
 * one needs no privilege.  Where even the hard limit is too low the test is
 * skipped, saying so, rather than failing on the machine's settings. */
#ifndef TERN_TEST_FD_LIMIT_H
#define TERN_TEST_FD_LIMIT_H

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

static inline void test_need_fds(rlim_t need)
{
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0, "getrlimit: %s", strerror(errno));
    if (rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        cr_skip_test("needs %llu open files, and this machine's hard limit is %llu "
                     "(ulimit -Hn)", (unsigned long long)need,
                     (unsigned long long)rl.rlim_max);
    rl.rlim_cur = need;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "setrlimit(RLIMIT_NOFILE, %llu): %s",
                 (unsigned long long)need, strerror(errno));
}

#endif
