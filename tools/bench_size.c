/* tools/bench_size.c: tern-bench's size syntax, below both of its users
 * (tern-bench.c's options and bench_sweep.c's range) so neither calls up
 * into the other. */
#include "bench_size.h"

#include <errno.h>
#include <stdlib.h>

int bench_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    uint64_t m = 1;
    if (*end == 'k' || *end == 'K')
        m = 1ull << 10;
    else if (*end == 'm' || *end == 'M')
        m = 1ull << 20;
    else if (*end == 'g' || *end == 'G')
        m = 1ull << 30;
    if (m > 1)
        end++;
    if (*end == 'i' || *end == 'B' || *end == 'b')
        end += (*end == 'i') ? 1 : 0;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > UINT64_MAX / m)
        return -1;
    *out = v * m;
    return 0;
}
