/* core/config/values.h: parsers and checks of configuration values
 * (values.c), shared by the core's keys and the plugins' option tables. */
#ifndef TERN_CORE_CONFIG_VALUES_H
#define TERN_CORE_CONFIG_VALUES_H

#include <stddef.h>
#include <stdint.h>

int cfg_is_int_text(const char *s);
int cfg_parse_i64(const char *t, int64_t *out);
int cfg_parse_bool(const char *t, int *out);
void cfg_fmt_size(uint64_t v, char *buf, size_t len);          /* 65536 -> "64K" */
void cfg_fmt_choices(const char *const *names, char *buf, size_t len);
int cfg_valid_hostport(const char *s, size_t n, int need_port);
int cfg_valid_metadata(const char *u);
int cfg_valid_name(const char *s, size_t max);                  /* [A-Za-z0-9._-] */
/* The closest of `names` within edit distance 2, or NULL. */
const char *cfg_closest(const char *key, const char *const *names, size_t n);

/* Parse "64K", "1M", "4096" -> bytes; returns 0 or TERN_ERR_INVAL. */
int tern_parse_size(const char *text, uint64_t *out);

/* A checked option value as an integer, read exactly as the validator read
 * it: decimal ("-3", "010" is ten), a size ("64K", "1MiB", "100B") or a
 * boolean word (1/0).  For the host services that hand values to plugins. */
int tern_config_parse_int(const char *text, int64_t *out);

#endif
