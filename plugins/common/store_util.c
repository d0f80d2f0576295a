/* plugins/common/store_util.c: see store_util.h. */
#include "store_util.h"

#include <stdarg.h>
#include <stdio.h>

int store_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
