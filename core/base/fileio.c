/* core/base/fileio.c: non-blocking, regular-file-only, size-capped reads of the
 * files a configuration names (see fileio.h). */
#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tern/errors.h"
#include "base/util.h"

/* What a non-regular file is, in words. */
static const char *file_kind(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a plain file";
}

/* Open without blocking and check the type; returns the descriptor. */
static int open_regular(const char *path, struct stat *st, char *err, size_t errlen)
{
    if (!path || !*path)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "(no file name): cannot open");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tern_errf(err, errlen, e == ENOENT || e == ENOTDIR ? TERN_ERR_NOT_FOUND
                                                                  : TERN_ERR_CONFIG,
                         "%s: cannot open: %s", path, strerror(e));
    }
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return tern_errf(err, errlen, TERN_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st->st_mode)) {
        close(fd);
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "%s: cannot read: %s", path,
                         strerror(EISDIR));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "%s: cannot read: %s, not a regular file",
                         path, file_kind(st->st_mode));
    }
    return fd;
}

int tern_file_check_regular(const char *path, char *err, size_t errlen)
{
    struct stat st;
    int fd = open_regular(path, &st, err, errlen);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

/* Read up to max + 1 bytes: one more than allowed tells "too large".
 * st_size cannot decide it: files under /proc report 0, sysfs ones 4096. */
static int read_up_to(int fd, char *buf, size_t max, size_t *n)
{
    *n = 0;
    while (*n <= max) {
        ssize_t r = read(fd, buf + *n, max + 1 - *n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        *n += (size_t)r;
    }
    return 0;
}

int tern_file_read_capped(const char *path, size_t max, char **data, size_t *len, char *err,
                          size_t errlen)
{
    struct stat st;
    int fd = open_regular(path, &st, err, errlen);
    if (fd < 0)
        return fd;
    char *buf = malloc(max + 2);
    if (!buf) {
        close(fd);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory reading", path);
    }
    size_t n = 0;
    int rc = read_up_to(fd, buf, max, &n);
    close(fd);
    if (rc < 0 || n > max) {
        free(buf);
        if (rc < 0)
            return tern_errf(err, errlen, TERN_ERR_IO, "%s: cannot read: %s", path,
                             strerror(-rc));
        /* st_size is only for the message: sysfs files all claim 4096 */
        if ((unsigned long long)st.st_size > max)
            return tern_errf(err, errlen, TERN_ERR_CONFIG,
                             "%s: cannot read: %lld bytes, more than the limit of %zu", path,
                             (long long)st.st_size, max);
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "%s: cannot read: more than the limit of %zu bytes", path, max);
    }
    buf[n] = '\0';
    *data = buf;
    if (len)
        *len = n;
    return 0;
}
