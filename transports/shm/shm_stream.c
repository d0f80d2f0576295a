/* transports/shm/shm_stream.c: the copy of a chunk into its final place
 * (the target's memory for a WRITE, the initiator's for a READ) where it is
 * a memcpy: a relayed piece out of its slot, or a chunk between two
 * mappings of a shared file.  Below shm_relay.c, shm_table.c and
 * shm_copy.c, which call it. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "shm_internal.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* Why streaming stores: a plain store first reads the destination line
 * from memory (a large destination is in no cache), so the destination
 * would be read and written; a streaming store only writes, and what it
 * reads (the relay's slot) stays in the cache.  Under STREAM_MIN bytes a
 * plain memcpy: a small destination may well be cached, and read soon.
 * The fence orders the stores before the release that hands the slot on,
 * or the completion.  Tern-allocated memory, 1 MiB blocks: 20-28 GB/s
 * with memcpy, 31-41 with this (bench/shm_bench.sh, column alloc). */
#define STREAM_MIN 65536
void shm_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (n < STREAM_MIN) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
    _mm_sfence();
#else
    memcpy(dst, src, n);
#endif
}
