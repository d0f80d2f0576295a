/* core/base/fileio.h: reading the files a configuration names, safely.
 *
 * The configuration file, a transport's `path`, `auth_secret_file` and a
 * `topology` JSON file are chosen by whoever writes the YAML.  Each is
 * opened with O_NONBLOCK (opening a FIFO for reading would otherwise wait
 * for a writer forever), checked with fstat() to be a regular file (a FIFO,
 * a device such as /dev/zero or a directory is refused), and read with a
 * size cap, so no such input can hang the process or exhaust its memory.
 * See docs/configuration.md, "Files the configuration names". */
#ifndef TERN_CORE_FILEIO_H
#define TERN_CORE_FILEIO_H

#include <stddef.h>

/* Read the whole of `path` (at most `max` bytes) into a malloc()ed,
 * NUL-terminated buffer.  Errors, each one line naming the path:
 *   TERN_ERR_NOT_FOUND "PATH: cannot open: No such file or directory"
 *   TERN_ERR_CONFIG    "PATH: cannot read: Is a directory",
 *                      "PATH: cannot read: a FIFO, not a regular file",
 *                      "PATH: cannot read: N bytes, more than the limit of M"
 *   TERN_ERR_IO / TERN_ERR_NOMEM otherwise. */
int tern_file_read_capped(const char *path, size_t max, char **data, size_t *len, char *err,
                          size_t errlen);

/* The same checks without reading (a plugin before dlopen()): 0 when
 * `path` can be opened without blocking and is a regular file. */
int tern_file_check_regular(const char *path, char *err, size_t errlen);

#endif
