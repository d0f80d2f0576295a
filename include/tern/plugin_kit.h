/* tern/plugin_kit.h: what every transport would otherwise write again.
 *
 *  - TERN_KIT_TRANSPORT_HEAD: the first members of the exported table;
 *  - tern_kit_errf: the message into (err, errlen), the code returned;
 *  - clocks: tern_kit_now_ms / _now_us / _now_ns and tern_kit_ms_left read
 *    CLOCK_MONOTONIC; the absolute times for pthread_cond_timedwait come on
 *    the condition variable's clock: tern_kit_deadline_mono (a cond made with
 *    pthread_condattr_setclock CLOCK_MONOTONIC), tern_kit_deadline
 *    (CLOCK_REALTIME, a default cond); tern_kit_cond_init_mono makes the
 *    former kind; tern_kit_span_ms is a relative time;
 *  - options by offset: ONE list of the plugin's YAML keys gives both the
 *    table the core validates and documents (tern_transport.options: type,
 *    range, default, help) and where each value lands in the plugin's own
 *    struct, filled by tern_kit_options_fill with the defaults applied.
 *
 * Header-only (static inline): it adds nothing to the ABI a plugin is
 * loaded against, and a plugin built with it loads in any core of ABI 1.x.
 * docs/plugins.md shows it on plugins/memcpy:
 *
 *   typedef struct mc_opts { char device[64]; int64_t queue_depth; } mc_opts;
 *   #define MC_OPTIONS(X)                                                   \
 *       X(mc_opts, device, "device", TERN_OPT_STRING, 0, 0, NULL, "mem0",  \
 *         "name of the one device this transport shows")                    \
 *       X(mc_opts, queue_depth, "queue_depth", TERN_OPT_INT, 1, 1 << 20,    \
 *         NULL, "4096", "slices one submit() call takes at most")
 *   static const tern_option mc_options[] = {MC_OPTIONS(TERN_KIT_OPTION)
 *                                            TERN_KIT_OPTIONS_END};
 *   static const tern_kit_field mc_fields[] = {MC_OPTIONS(TERN_KIT_FIELD)
 *                                              TERN_KIT_FIELDS_END};
 *   ... in init: tern_kit_options_fill(host, mc_options, mc_fields, &ctx->opt);
 */
#ifndef TERN_PLUGIN_KIT_H
#define TERN_PLUGIN_KIT_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tern/transport.h"

/* ---- messages ------------------------------------------------------------- */

static inline int tern_kit_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline int tern_kit_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- clocks --------------------------------------------------------------- */

static inline uint64_t tern_kit_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tern_kit_now_us(void)
{
    return tern_kit_now_ns() / 1000u;
}

static inline uint64_t tern_kit_now_ms(void)
{
    return tern_kit_now_ns() / 1000000u;
}

/* ms as a relative timespec (a futex or nanosleep timeout): whole seconds
 * and the rest in nanoseconds. */
static inline struct timespec tern_kit_span_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    return ts;
}

/* ms from now on `clock`, as an absolute time for pthread_cond_timedwait:
 * the clock must be the one the condition variable was made with. */
static inline struct timespec tern_kit_deadline_on(clockid_t clock, int64_t ms)
{
    struct timespec ts, span = tern_kit_span_ms(ms);
    clock_gettime(clock, &ts);
    ts.tv_sec += span.tv_sec;
    ts.tv_nsec += span.tv_nsec;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ms from now on CLOCK_REALTIME, the clock of a default pthread_cond_t
 * (pthread_cond_init(&c, NULL)). */
static inline struct timespec tern_kit_deadline(int64_t ms)
{
    return tern_kit_deadline_on(CLOCK_REALTIME, ms);
}

/* ms from now on CLOCK_MONOTONIC, for a pthread_cond_t made with
 * pthread_condattr_setclock(&attr, CLOCK_MONOTONIC): a wall-clock step
 * neither shortens nor stretches the wait. */
static inline struct timespec tern_kit_deadline_mono(int64_t ms)
{
    return tern_kit_deadline_on(CLOCK_MONOTONIC, ms);
}

/* A condition variable on CLOCK_MONOTONIC, the one tern_kit_deadline_mono
 * is for; returns pthread_cond_init's code. */
static inline int tern_kit_cond_init_mono(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

/* ms left until `until_ms` (a tern_kit_now_ms time, CLOCK_MONOTONIC);
 * 0 once it has passed. */
static inline uint64_t tern_kit_ms_left(uint64_t until_ms)
{
    uint64_t now = tern_kit_now_ms();
    return until_ms > now ? until_ms - now : 0;
}

/* ---- options by offset ---------------------------------------------------- */

/* Where the value of option `key` goes: `size` bytes at `offset` in the
 * plugin's struct.  INT, SIZE and BOOL fill an integer of 4 or 8 bytes
 * (BOOL: 0 or 1); STRING and CHOICE a char array (NUL-terminated, cut to
 * fit).  STRING_LIST is read with config_get_list, not here. */
typedef struct tern_kit_field {
    const char *key;
    size_t offset;
    size_t size;
} tern_kit_field;

/* The members every exported transport table starts with, for the ABI of
 * the headers the plugin is built against (the core checks them first):
 *
 *   TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
 *       TERN_KIT_TRANSPORT_HEAD("memcpy", MC_VERSION),
 *       .caps = TERN_CAP_READ | TERN_CAP_WRITE,
 *       ...
 */
#define TERN_KIT_TRANSPORT_HEAD(name_, version_)                                         \
    .magic = TERN_TRANSPORT_MAGIC, .struct_size = sizeof(tern_transport),               \
    .abi_major = TERN_TRANSPORT_ABI_MAJOR, .abi_minor = TERN_TRANSPORT_ABI_MINOR,       \
    .name = (name_), .version = (version_)

/* The two expansions of one list of X(struct, member, key, type, min, max,
 * choices, default, help) rows. */
#define TERN_KIT_OPTION(st, member, key, type, min, max, choices, def, help) \
    {key, type, min, max, choices, def, help},
#define TERN_KIT_FIELD(st, member, key, type, min, max, choices, def, help) \
    {key, offsetof(st, member), sizeof(((st *)0)->member)},
/* A key the plugin reads by itself (a STRING_LIST, or one it interprets):
 * a row of the table, no field.  A list of both kinds takes two macros,
 * LIST(X, R): the table is LIST(TERN_KIT_OPTION, TERN_KIT_ROW), the fields
 * LIST(TERN_KIT_FIELD, TERN_KIT_NO_FIELD). */
#define TERN_KIT_ROW(key, type, min, max, choices, def, help) \
    {key, type, min, max, choices, def, help},
#define TERN_KIT_NO_FIELD(key, type, min, max, choices, def, help)
#define TERN_KIT_OPTIONS_END {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL}
#define TERN_KIT_FIELDS_END {NULL, 0, 0}

/* A default written in an option row: "4096", "-1", "256K" (K, M, G: powers
 * of 1024), "true", "false".  0 when it is none of these. */
static inline int64_t tern_kit_default_int(const char *t)
{
    if (!t)
        return 0;
    if (strcmp(t, "true") == 0)
        return 1;
    char *end = NULL;
    long long v = strtoll(t, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    return (int64_t)v * ((int64_t)1 << shift);
}

/* Fills out from this transport's YAML entry: every field of `fields`
 * whose key is a row of `opts`.  The core validated the entry against
 * `opts` (type, range, choices) before init and applies a row's default
 * when the key is unset, so every value here is in range; a host that
 * gives no value (a test harness) gets the row's default from here. */
static inline void tern_kit_options_fill(const tern_host_services *h, const tern_option *opts,
                                         const tern_kit_field *fields, void *out)
{
    for (const tern_kit_field *f = fields; f->key; f++) {
        const tern_option *o = opts;
        while (o->key && strcmp(o->key, f->key) != 0)
            o++;
        if (!o->key)
            continue;
        char *at = (char *)out + f->offset;
        const char *txt = h->config_get ? h->config_get(h->host, f->key) : NULL;
        if (o->type == TERN_OPT_STRING || o->type == TERN_OPT_CHOICE) {
            snprintf(at, f->size, "%s", txt ? txt : o->default_value ? o->default_value : "");
        } else if (o->type != TERN_OPT_STRING_LIST) {
            int64_t v = !txt                ? tern_kit_default_int(o->default_value)
                        : h->config_get_int ? h->config_get_int(h->host, f->key, 0)
                                            : tern_kit_default_int(txt);
            if (f->size == sizeof(int32_t)) {
                int32_t v32 = (int32_t)v;
                memcpy(at, &v32, sizeof v32);
            } else if (f->size == sizeof(int64_t)) {
                memcpy(at, &v, sizeof v);
            }
        }
    }
}

#endif
