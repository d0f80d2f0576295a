/* core/base/util.h: small helpers every core file uses. */
#ifndef TERN_CORE_UTIL_H
#define TERN_CORE_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* A function of the public API (tern/tern.h); everything else is hidden. */
#ifndef TERN_EXPORT
#define TERN_EXPORT __attribute__((visibility("default")))
#endif

/* Write a formatted message into err (if err && errlen); returns code. */
int tern_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

uint64_t tern_now_ns(void);     /* CLOCK_MONOTONIC */
uint64_t tern_now_ms(void);

/* Read a whole file (NUL-terminated, malloc()ed). */
int tern_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen);

/* strdup that treats NULL as NULL. */
char *tern_strdup(const char *s);

/* Bounded copy that always NUL-terminates; returns strlen(src). */
size_t tern_strlcpy(char *dst, const char *src, size_t size);

/* Room for one more item in an array of `size`-byte items holding n of
 * *cap: v itself while n < *cap, else v grown to twice *cap (`first` items
 * the first time) with *cap updated; NULL when out of memory, v untouched. */
void *tern_array_room(void *v, size_t n, size_t *cap, size_t size, size_t first);

/* In n items of `size` bytes sorted by the uint64_t at `key_off` in each:
 * the index of the first whose key is > key (n when none), so the item
 * at index - 1 is the last one starting at or below key. */
size_t tern_upper_bound_u64(const void *items, size_t n, size_t size, size_t key_off,
                            uint64_t key);

/* Ends a worker thread: sets *stop under mu (where the worker reads it),
 * wakes cv's waiters so a sleeping worker sees it, and joins *t when
 * *started (read under mu) says it was created. */
void tern_thread_stop(pthread_t *t, pthread_mutex_t *mu, pthread_cond_t *cv, int *stop,
                      const int *started);

/* Full-length socket I/O with a deadline (ms from now; <0 = none).
 * Return 0, TERN_ERR_TIMEOUT, TERN_ERR_CLOSED or TERN_ERR_IO. */
int tern_io_write_all(int fd, const void *buf, size_t len, int timeout_ms);
int tern_io_read_all(int fd, void *buf, size_t len, int timeout_ms);

#endif
