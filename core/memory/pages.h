/* core/memory/pages.h: the page-size advice registration gives host memory when the
 * configuration asks for it (`huge_pages`, docs/configuration.md). */
#ifndef TERN_CORE_PAGES_H
#define TERN_CORE_PAGES_H

#include <stddef.h>

enum { TERN_HUGE_OFF = 0, TERN_HUGE_ADVISE = 1, TERN_HUGE_COLLAPSE = 2 }; /* huge_pages */

/* Advise the 2 MiB-aligned part of [addr, addr+len) (nothing outside the
 * range is touched): ADVISE marks it for transparent huge pages, COLLAPSE
 * also turns the 4 KiB pages already there into huge pages now.  0 with
 * *done the bytes advised (0 when no aligned 2 MiB lies inside); else a
 * negative tern_err and err says which call failed and what to check. */
int tern_pages_advise(void *addr, size_t len, int mode, size_t *done, char *err,
                      size_t errlen);

#endif
