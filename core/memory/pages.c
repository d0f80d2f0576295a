/* core/memory/pages.c: huge-page advice for registered host memory.
 *
 * Why: a same-host peer copies with cross-memory attach, and the kernel pins
 * each page of the target's memory for the copy; with 4 KiB pages pinning
 * costs about as much as copying (docs/protocol.md, Page size).  A 2 MiB
 * page is pinned once for 512.  Only the application can choose its pages,
 * so this is opt-in: `huge_pages: advise | collapse`. */
#include "memory/pages.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "tern/tern.h"
#include "base/util.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older C libraries lack the name */
#endif

#define HUGE_2M ((uintptr_t)2 << 20)

int tern_pages_advise(void *addr, size_t len, int mode, size_t *done, char *err,
                      size_t errlen)
{
    uintptr_t a = (uintptr_t)addr, lo = (a + HUGE_2M - 1) & ~(HUGE_2M - 1);
    uintptr_t hi = (a + len) & ~(HUGE_2M - 1);
    *done = 0;
    if (mode == TERN_HUGE_OFF || hi <= lo || lo < a)
        return 0;
    void *p = (void *)lo;
    size_t n = hi - lo;
    if (madvise(p, n, MADV_HUGEPAGE) != 0)
        return tern_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                         "madvise(MADV_HUGEPAGE) on [%p, +%zu): %s (is "
                         "/sys/kernel/mm/transparent_hugepage/enabled 'never'?)",
                         p, n, strerror(errno));
    /* EAGAIN/ENOMEM: no free 2 MiB pages just now; EINVAL: a kernel before
     * 6.1, or memory the kernel cannot collapse (shared, locked, ...). */
    if (mode == TERN_HUGE_COLLAPSE && madvise(p, n, MADV_COLLAPSE) != 0)
        return tern_errf(err, errlen, errno == EINVAL ? TERN_ERR_NOT_SUPPORTED : TERN_ERR_NOMEM,
                         "madvise(MADV_COLLAPSE) on [%p, +%zu): %s (%s; the pages already "
                         "there stay 4 KiB, pages faulted in later are huge)", p, n,
                         strerror(errno),
                         errno == EINVAL ? "Linux 6.1 or later collapses anonymous memory"
                                         : "the kernel found no free 2 MiB pages: "
                                           "/proc/sys/vm/compact_memory may help");
    *done = n;
    return 0;
}
