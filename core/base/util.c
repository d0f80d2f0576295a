/* core/base/util.c: see util.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/util.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tern/errors.h"
#include "tern/plugin_kit.h"

int tern_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

void *tern_array_room(void *v, size_t n, size_t *cap, size_t size, size_t first)
{
    if (n < *cap)
        return v;
    size_t want = *cap ? *cap * 2 : first;
    void *nv = realloc(v, want * size);
    if (nv)
        *cap = want;
    return nv;
}

size_t tern_upper_bound_u64(const void *items, size_t n, size_t size, size_t key_off,
                            uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t at;
        memcpy(&at, (const char *)items + mid * size + key_off, sizeof at);
        if (at <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void tern_thread_stop(pthread_t *t, pthread_mutex_t *mu, pthread_cond_t *cv, int *stop,
                      const int *started)
{
    pthread_mutex_lock(mu);
    *stop = 1;
    pthread_cond_broadcast(cv);
    int joins = *started;
    pthread_mutex_unlock(mu);
    if (joins)
        pthread_join(*t, NULL);
}

/* The kit's clock, so that the core and the plugins read one. */
uint64_t tern_now_ns(void) { return tern_kit_now_ns(); }

uint64_t tern_now_ms(void) { return tern_now_ns() / 1000000ull; }

int tern_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tern_errf(err, errlen, TERN_ERR_NOT_FOUND, "%s: cannot open: %s", path,
                         strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int ioerr = ferror(f);
    fclose(f);
    if (!buf)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory reading", path);
    if (ioerr) {
        free(buf);
        return tern_errf(err, errlen, TERN_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (len)
        *len = n;
    return 0;
}

char *tern_strdup(const char *s) { return s ? strdup(s) : NULL; }

size_t tern_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

/* Wait for fd to be ready for `events` until deadline_ns (0 = forever). */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        int ms = -1;
        if (deadline_ns) {
            uint64_t now = tern_now_ns();
            if (now >= deadline_ns)
                return TERN_ERR_TIMEOUT;
            ms = (int)((deadline_ns - now + 999999) / 1000000);
        }
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, ms);
        if (r > 0)
            return 0;
        if (r == 0)
            return TERN_ERR_TIMEOUT;
        if (errno != EINTR)
            return TERN_ERR_IO;
    }
}

int tern_io_write_all(int fd, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    uint64_t deadline = timeout_ms >= 0 ? tern_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r)
                return r;
            continue;
        }
        return (w < 0 && (errno == EPIPE || errno == ECONNRESET)) ? TERN_ERR_CLOSED
                                                                  : TERN_ERR_IO;
    }
    return 0;
}

int tern_io_read_all(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    uint64_t deadline = timeout_ms >= 0 ? tern_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    while (len) {
        ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            len -= (size_t)r;
            continue;
        }
        if (r == 0)
            return TERN_ERR_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = wait_fd(fd, POLLIN, deadline);
            if (w)
                return w;
            continue;
        }
        return errno == ECONNRESET ? TERN_ERR_CLOSED : TERN_ERR_IO;
    }
    return 0;
}
