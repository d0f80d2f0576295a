/* tools/bench_size.h: tern-bench's size syntax (tools/bench_size.c), read
 * by its own options (--block-size, --buffer-size, --working-set) and by
 * the sweep's range (--sweep FROM..TO). */
#ifndef TERN_TOOLS_BENCH_SIZE_H
#define TERN_TOOLS_BENCH_SIZE_H

#include <stdint.h>

/* Parses tern-bench's size syntax (4096, 64K, 1M, 1GiB). */
int bench_parse_size(const char *s, uint64_t *out);

#endif
