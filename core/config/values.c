/* core/config/values.c: parsers and checks of configuration values, shared
 * by the core's keys and the plugins' option tables. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasecmp (CMake also sets it) */
#endif
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/values.h"
#include "tern/errors.h"
#include "base/util.h"

int cfg_is_int_text(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}


/* ---- value parsers (shared by the schema and check_options) ---------------- */
int tern_parse_size(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t v = 0, mul = 1;
    if (!p || !isdigit((unsigned char)*p))
        return TERN_ERR_INVAL;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return TERN_ERR_INVAL;
        v = v * 10 + d;
    }
    switch (*p) {
    case 'k': case 'K': mul = 1ull << 10; break;
    case 'm': case 'M': mul = 1ull << 20; break;
    case 'g': case 'G': mul = 1ull << 30; break;
    case 't': case 'T': mul = 1ull << 40; break;
    default: break;
    }
    if (mul > 1) {
        p++;
        if (p[0] == 'i' && p[1] == 'B')
            p += 2;
        else if (p[0] == 'B')
            p++;
    } else if (p[0] == 'B') {
        p++;
    }
    if (*p || v > UINT64_MAX / mul)
        return TERN_ERR_INVAL;
    *out = v * mul;
    return 0;
}

/* Strict decimal integer: optional sign, digits, nothing else. */
int cfg_parse_i64(const char *t, int64_t *out)
{
    if (!cfg_is_int_text(t))
        return TERN_ERR_INVAL;
    errno = 0;
    char *end;
    long long v = strtoll(t, &end, 10);
    if (errno || *end)
        return TERN_ERR_INVAL;
    *out = v;
    return 0;
}

int cfg_parse_bool(const char *t, int *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(t, yes[i]))
            return *out = 1, 0;
        if (!strcasecmp(t, no[i]))
            return *out = 0, 0;
    }
    return TERN_ERR_INVAL;
}

int tern_config_parse_int(const char *text, int64_t *out)
{
    uint64_t u;
    int b;
    if (!text)
        return TERN_ERR_INVAL;
    if (cfg_parse_i64(text, out) == 0)
        return 0;
    if (tern_parse_size(text, &u) == 0 && u <= (uint64_t)INT64_MAX) {
        *out = (int64_t)u;
        return 0;
    }
    if (cfg_parse_bool(text, &b) == 0) {
        *out = b;
        return 0;
    }
    return TERN_ERR_INVAL;
}

/* "64K"-style rendering of a byte count for messages and JSON. */
void cfg_fmt_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v && v % 1024 == 0)
        v /= 1024, u++;
    if (u >= 0)
        snprintf(buf, len, "%" PRIu64 "%c", v, units[u]);
    else
        snprintf(buf, len, "%" PRIu64, v);
}

static int span_chars(const char *s, size_t n, const char *extra)
{
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr(extra, s[i]))
            return 0;
    return 1;
}

/* host:port with host a name, an IPv4 address or [IPv6]; port 0..65535.
 * need_port 0 makes ":port" optional. */
int cfg_valid_hostport(const char *s, size_t n, int need_port)
{
    size_t h;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close || close == s + 1 || !span_chars(s + 1, (size_t)(close - s - 1), ":.%"))
            return 0;
        h = (size_t)(close - s) + 1;
    } else {
        for (h = 0; h < n && s[h] != ':'; h++)
            ;
        if (h == 0 || h > 253 || !span_chars(s, h, ".-_"))
            return 0;
    }
    if (h == n)
        return !need_port;
    if (s[h] != ':' || n - h - 1 < 1 || n - h - 1 > 5 || !span_chars(s + h + 1, n - h - 1, ""))
        return 0;
    for (size_t i = h + 1; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return atoi(s + h + 1) <= 65535;
}

int cfg_valid_metadata(const char *u)
{
    const char *r;
    if (!strcmp(u, "p2p"))
        return 1;
    if (!strncmp(u, "redis://", 8)) {
        r = u + 8;
        const char *slash = strchr(r, '/');
        if (!slash)
            return cfg_valid_hostport(r, strlen(r), 1);
        size_t dl = strlen(slash + 1);
        return cfg_valid_hostport(r, (size_t)(slash - r), 1) && dl >= 1 && dl <= 5 &&
               span_chars(slash + 1, dl, "") && cfg_is_int_text(slash + 1);
    }
    if (!strncmp(u, "etcd://", 7)) {
        for (r = u + 7;;) {
            const char *comma = strchr(r, ',');
            size_t n = comma ? (size_t)(comma - r) : strlen(r);
            if (!cfg_valid_hostport(r, n, 1))
                return 0;
            if (!comma)
                return 1;
            r = comma + 1;
        }
    }
    if (!strncmp(u, "http://", 7)) { /* plain HTTP only: docs/protocol.md */
        r = u + 7;
        size_t n = strcspn(r, "/");
        for (const char *q = r + n; *q; q++)
            if (!isgraph((unsigned char)*q))
                return 0;
        return cfg_valid_hostport(r, n, 0);
    }
    return 0;
}
/* Names that end up in keys, file names and messages: [A-Za-z0-9._-]. */
int cfg_valid_name(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n >= 1 && n <= max && span_chars(s, n, "._-");
}

/* Levenshtein distance, for "did you mean" (keys are short). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest of `names` within distance 2, or NULL. */
const char *cfg_closest(const char *key, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t bd = 3;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, names[i]);
        if (d < bd)
            bd = d, best = names[i];
    }
    return best;
}


/* "one of a, b, c" from a NULL-terminated list. */
void cfg_fmt_choices(const char *const *names, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "one of ");
    for (size_t i = 0; names[i] && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", names[i]);
}
