/* plugins/common/store_util.h: what every metadata plugin shares, whatever
 * it talks to (store_util.c). */
#ifndef TERN_STORE_UTIL_H
#define TERN_STORE_UTIL_H

#include <stddef.h>

/* snprintf into err (when non-NULL), returns code. */
int store_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
