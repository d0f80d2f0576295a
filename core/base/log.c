/* core/base/log.c: see log.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#define LOG_MSG_MAX 2048
#define LOG_LINE_MAX (LOG_MSG_MAX * 6 + 512) /* every byte escaped as \u00XX */

static const char *level_name(int level)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    return names[level < 0 ? 0 : level > TERN_LOG_DEBUG ? TERN_LOG_DEBUG : level];
}

void tern_logger_init(tern_logger *lg, int level, int format, tern_log_hook hook, void *user,
                      const char *name)
{
    lg->level = level;
    lg->format = format;
    lg->hook = hook;
    lg->user = user;
    pthread_mutex_init(&lg->lock, NULL);
    tern_strlcpy(lg->name, name ? name : "", sizeof lg->name);
}

void tern_logger_fini(tern_logger *lg) { pthread_mutex_destroy(&lg->lock); }

void tern_logger_set_name(tern_logger *lg, const char *name)
{
    pthread_mutex_lock(&lg->lock);
    tern_strlcpy(lg->name, name ? name : "", sizeof lg->name);
    pthread_mutex_unlock(&lg->lock);
}

int tern_log_enabled(const tern_logger *lg, int level)
{
    return level <= (lg ? lg->level : TERN_LOG_INFO);
}

/* ---- formatting ------------------------------------------------------------- */

typedef struct outbuf {
    char *p;
    size_t len, used; /* used < len always: room for the terminator */
} outbuf;

static void out_bytes(outbuf *o, const char *s, size_t n)
{
    if (o->used + n >= o->len)
        n = o->len - 1 - o->used;
    memcpy(o->p + o->used, s, n);
    o->used += n;
    o->p[o->used] = '\0';
}

static void out_str(outbuf *o, const char *s) { out_bytes(o, s, strlen(s)); }

/* Length of the well-formed UTF-8 sequence at s (1..4), 0 when it is not one. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
             : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
        return 0; /* overlong, or a surrogate */
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
        return 0; /* overlong, or past U+10FFFF */
    return n;
}

/* A JSON string: quotes, backslashes and control characters escaped, bytes
 * that are not UTF-8 (a peer's name could hold any) as U+FFFD, so every
 * line parses whatever the message holds. */
static void out_json_str(outbuf *o, const char *s)
{
    out_str(o, "\"");
    for (const unsigned char *u = (const unsigned char *)s; *u;) {
        char esc[8];
        size_t n = utf8_len(u);
        if (n == 0) {
            out_str(o, "\\ufffd");
            u++;
            continue;
        }
        if (*u == '"' || *u == '\\') {
            esc[0] = '\\', esc[1] = (char)*u, esc[2] = '\0';
            out_str(o, esc);
        } else if (*u == '\n') {
            out_str(o, "\\n");
        } else if (*u == '\t') {
            out_str(o, "\\t");
        } else if (*u < 0x20 || *u == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", *u);
            out_str(o, esc);
        } else {
            out_bytes(o, (const char *)u, n);
        }
        u += n;
    }
    out_str(o, "\"");
}

/* "2026-12-03T18:00:00.123Z": UTC, so lines of hosts in different zones
 * sort together. */
static void iso_time(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* The line as written to stderr, without its newline: its length,
 * truncated to fit len. */
static size_t format_line(char *buf, size_t len, int format, int level, const char *engine,
                          long tid, const char *msg)
{
    char when[48], num[32];
    outbuf o = {buf, len, 0};
    if (!len)
        return 0;
    buf[0] = '\0';
    iso_time(when, sizeof when);
    snprintf(num, sizeof num, "%ld", tid);
    if (format == TERN_LOG_FORMAT_JSON) {
        out_str(&o, "{\"time\":\"");
        out_str(&o, when);
        out_str(&o, "\",\"level\":\"");
        out_str(&o, level_name(level));
        out_str(&o, "\",\"engine\":");
        out_json_str(&o, engine);
        out_str(&o, ",\"thread\":");
        out_str(&o, num);
        out_str(&o, ",\"msg\":");
        out_json_str(&o, msg);
        out_str(&o, "}");
    } else {
        /* no engine (tern-info, a loader without one): plain "tern" */
        int n = snprintf(buf, len, "%s %s tern%s%s%s tid=%s: %s", when, level_name(level),
                         *engine ? "[" : "", engine, *engine ? "]" : "", num, msg);
        o.used = n < 0 ? 0 : (size_t)n >= len ? len - 1 : (size_t)n;
    }
    return o.used;
}

/* ---- writing ------------------------------------------------------------------ */

static void log_write(const tern_logger *lg, int level, const char *msg)
{
    char name[sizeof lg->name] = "";
    if (lg) {
        /* the lock guards only the name (callers see the logger as const:
         * logging does not change it) and is not held in the hook, so the
         * hook never waits for another thread's line */
        pthread_mutex_t *lock = (pthread_mutex_t *)&lg->lock;
        pthread_mutex_lock(lock);
        memcpy(name, lg->name, sizeof name);
        pthread_mutex_unlock(lock);
        if (lg->hook && !lg->hook(lg->user, level, name, msg))
            return;
    }
    char line[LOG_LINE_MAX];
    size_t n = format_line(line, sizeof line - 1, lg ? lg->format : TERN_LOG_FORMAT_TEXT, level,
                           name, (long)syscall(SYS_gettid), msg);
    line[n++] = '\n';
    fwrite(line, 1, n, stderr); /* one call: stderr's lock keeps the line whole */
}

void tern_log(const tern_logger *lg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tern_logv(lg, level, fmt, ap);
    va_end(ap);
}

void tern_logv(const tern_logger *lg, int level, const char *fmt, va_list ap)
{
    if (!tern_log_enabled(lg, level))
        return;
    char msg[LOG_MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    log_write(lg, level < 0 ? 0 : level > TERN_LOG_DEBUG ? TERN_LOG_DEBUG : level, msg);
}

void tern_log_cb(void *lg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tern_logv(lg, level, fmt, ap);
    va_end(ap);
}
