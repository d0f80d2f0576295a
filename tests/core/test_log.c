#define _GNU_SOURCE
/* Log lines: the text format's ISO-8601 time, level, engine name and thread;
 * log_format json parsed back with json-c; the application's hook
 * (tern_engine_create_with) receiving every line with nothing on stderr;
 * and the debug story of a peer when a transfer opens its segment.  Real
 * engines over the memcpy transport, on loopback with ephemeral ports;
 * stderr is redirected to a file and read back. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "tern/tern.h"
#include "tern/transport.h"

/* ---- stderr into a file --------------------------------------------------------- */

typedef struct capture {
    int saved;
    char path[64];
} capture;

static void capture_start(capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/tern-test-log-XXXXXX");
    int fd = mkstemp(c->path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    c->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* What went to stderr since capture_start (malloc()ed). */
static char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    cr_assert_not_null(f);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(c->path);
    return buf;
}

/* ---- the hook: every line kept ---------------------------------------------------- */

typedef struct seen {
    pthread_mutex_t lock;
    int tee;          /* the hook's answer: also on stderr */
    size_t n;
    int level[512];
    char engine[512][64];
    char msg[512][512];
} seen;

static int keep(void *user, int level, const char *engine, const char *msg)
{
    seen *s = user;
    pthread_mutex_lock(&s->lock);
    if (s->n < 512) {
        s->level[s->n] = level;
        snprintf(s->engine[s->n], sizeof s->engine[0], "%s", engine);
        snprintf(s->msg[s->n], sizeof s->msg[0], "%s", msg);
        s->n++;
    }
    pthread_mutex_unlock(&s->lock);
    return s->tee;
}

/* Index of the first line containing all of a, b (b may be NULL), or -1. */
static int find(seen *s, const char *a, const char *b)
{
    pthread_mutex_lock(&s->lock);
    int at = -1;
    for (size_t i = 0; i < s->n && at < 0; i++)
        if (strstr(s->msg[i], a) && (!b || strstr(s->msg[i], b)))
            at = (int)i;
    pthread_mutex_unlock(&s->lock);
    return at;
}

static void dump(seen *s)
{
    for (size_t i = 0; i < s->n; i++)
        cr_log_info("line %zu: %d [%s] %s", i, s->level[i], s->engine[i], s->msg[i]);
}

static tern_engine *mk_hooked_with(const char *transports, const char *level, seen *s)
{
    char yaml[256], err[1024] = "";
    snprintf(yaml, sizeof yaml, "server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                "transports:\n%slog_level: %s\n", transports, level);
    tern_engine_options o = {.size = sizeof o, .config_yaml = yaml, .origin = "test_log",
                             .log_hook = keep, .log_user = s};
    tern_engine *e = tern_engine_create_with(&o, err, sizeof err);
    cr_assert_not_null(e, "engine: %s", err);
    return e;
}

static tern_engine *mk_hooked(const char *level, seen *s)
{
    return mk_hooked_with("  - name: memcpy\n", level, s);
}

static tern_engine *mk_plain(const char *extra)
{
    char yaml[256], err[1024] = "";
    snprintf(yaml, sizeof yaml, "server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                "transports:\n  - name: memcpy\n%s", extra);
    tern_engine *e = tern_engine_create_from_yaml(yaml, "test_log", err, sizeof err);
    cr_assert_not_null(e, "engine: %s", err);
    return e;
}

/* ---- the hook ----------------------------------------------------------------------- */

Test(log, hook_receives_every_line_with_level_and_engine_and_nothing_on_stderr)
{
    seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    capture c;
    capture_start(&c);
    tern_engine *e = mk_hooked("info", &s);
    char name[300];
    snprintf(name, sizeof name, "%s", tern_engine_server_name(e));
    tern_engine_destroy(e);
    char *err = capture_end(&c);
    dump(&s);
    cr_assert_str_empty(err, "with a hook nothing goes to stderr: %s", err);
    free(err);
    /* the loader's line comes before the daemon resolved port 0 */
    int loaded = find(&s, "transport 'memcpy'", NULL);
    cr_assert_geq(loaded, 0, "the plugin loader's line reached the hook");
    cr_assert_eq(s.level[loaded], TERN_LOG_INFO);
    cr_assert_str_eq(s.engine[loaded], "127.0.0.1:0");
    int up = find(&s, "engine ", " up:");
    cr_assert_geq(up, 0, "the engine's own line reached the hook");
    cr_assert_eq(s.level[up], TERN_LOG_INFO);
    cr_assert_str_eq(s.engine[up], name, "the resolved name: %s", s.engine[up]);
    cr_assert_eq(find(&s, "\n", NULL), -1, "messages carry no newline");
}

Test(log, hook_filtered_by_level_and_can_ask_for_stderr_too)
{
    seen s = {.lock = PTHREAD_MUTEX_INITIALIZER, .tee = 1};
    capture c;
    capture_start(&c);
    tern_engine *e = mk_hooked("warn", &s);
    tern_engine_destroy(e);
    char *err = capture_end(&c);
    cr_assert_eq(find(&s, "engine ", " up:"), -1, "info is below log_level warn");
    cr_assert_str_empty(err, "nothing at warn: %s", err);
    free(err);

    seen t = {.lock = PTHREAD_MUTEX_INITIALIZER, .tee = 1};
    capture_start(&c);
    e = mk_hooked("info", &t);
    tern_engine_destroy(e);
    err = capture_end(&c);
    cr_assert_geq(find(&t, "engine ", " up:"), 0);
    cr_assert(strstr(err, " info tern[") && strstr(err, " up:"),
              "a hook returning nonzero has the line written too: %s", err);
    free(err);
}

Test(log, create_with_checks_its_options)
{
    char err[256] = "";
    cr_assert_null(tern_engine_create_with(NULL, err, sizeof err));
    cr_assert(strstr(err, "options is NULL"), "%s", err);
    tern_engine_options o = {.size = 4};
    cr_assert_null(tern_engine_create_with(&o, err, sizeof err));
    cr_assert(strstr(err, "sizeof(tern_engine_options)"), "%s", err);
    /* an older caller's smaller struct: the fields past its size are not read */
    seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    tern_engine_options old = {.size = offsetof(tern_engine_options, log_hook),
                               .config_yaml = "server_name: 127.0.0.1:0\nlog_level: error\n"
                                              "transports:\n  - name: memcpy\n",
                               .log_hook = keep, .log_user = &s};
    tern_engine *e = tern_engine_create_with(&old, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    tern_engine_destroy(e);
}

/* ---- formats on stderr -------------------------------------------------------------- */

Test(log, text_format_has_iso_time_level_engine_and_thread)
{
    capture c;
    capture_start(&c);
    tern_engine *e = mk_plain("log_level: info\n");
    char name[300];
    snprintf(name, sizeof name, "%s", tern_engine_server_name(e));
    tern_engine_destroy(e);
    char *err = capture_end(&c);
    regex_t re;
    cr_assert_eq(regcomp(&re,
                         "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                         "info tern\\[([^]]*)\\] tid=[0-9]+: engine .* up: ",
                         REG_EXTENDED | REG_NEWLINE), 0);
    regmatch_t m[2];
    cr_assert_eq(regexec(&re, err, 2, m, 0), 0, "no ISO-time line for 'engine up' in:\n%s", err);
    cr_assert_eq((size_t)(m[1].rm_eo - m[1].rm_so), strlen(name));
    cr_assert(strncmp(err + m[1].rm_so, name, strlen(name)) == 0, "engine name %s in:\n%s",
              name, err);
    regfree(&re);
    free(err);
}

/* Every line of text parses as one JSON object with the five keys. */
static size_t check_json_lines(char *text, const char *want_msg)
{
    size_t n = 0, found = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save), n++) {
        json_object *o = json_tokener_parse(line);
        cr_assert_not_null(o, "not JSON: %s", line);
        cr_assert(json_object_is_type(o, json_type_object), "%s", line);
        json_object *v;
        cr_assert(json_object_object_get_ex(o, "time", &v), "%s", line);
        cr_assert_eq(strlen(json_object_get_string(v)), 24, "%s", line);
        cr_assert(json_object_object_get_ex(o, "level", &v), "%s", line);
        cr_assert(json_object_object_get_ex(o, "engine", &v), "%s", line);
        cr_assert(json_object_object_get_ex(o, "thread", &v) &&
                  json_object_is_type(v, json_type_int), "%s", line);
        cr_assert(json_object_object_get_ex(o, "msg", &v), "%s", line);
        if (want_msg && strcmp(json_object_get_string(v), want_msg) == 0)
            found++;
        json_object_put(o);
    }
    cr_assert_gt(n, 0, "no lines");
    return want_msg ? found : n;
}

Test(log, json_format_parses_one_object_a_line)
{
    capture c;
    capture_start(&c);
    tern_engine *e = mk_plain("log_level: debug\nlog_format: json\n");
    tern_engine_destroy(e);
    char *err = capture_end(&c);
    cr_assert(strstr(err, "\"level\":\"info\""), "%s", err);
    size_t n = check_json_lines(err, NULL);
    cr_log_info("%zu JSON lines", n);
    free(err);
}

Test(log, json_escapes_what_a_message_may_hold)
{
    tern_logger lg;
    tern_logger_init(&lg, TERN_LOG_DEBUG, TERN_LOG_FORMAT_JSON, NULL, NULL,
                     "peer \"q\"\\x\n");
    /* quotes, backslash, control characters, UTF-8 kept, a stray byte */
    const char *msg = "a \"quoted\" \\ path\nline2\ttab\x01 caf\xc3\xa9 bad\xff end";
    capture c;
    capture_start(&c);
    tern_log(&lg, TERN_LOG_WARN, "%s", msg);
    tern_log(&lg, TERN_LOG_DEBUG, "second");
    char *err = capture_end(&c);
    tern_logger_fini(&lg);
    cr_assert_eq(check_json_lines(err, "a \"quoted\" \\ path\nline2\ttab\x01 caf\xc3\xa9 "
                                       "bad\xef\xbf\xbd end"), 1,
                 "the message round-trips (the stray byte as U+FFFD)");
    free(err);
}

/* ---- the debug story of a peer ------------------------------------------------------ */

Test(log, debug_tells_the_story_of_a_peer)
{
    seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    /* a prefers shm, which b does not publish: the choice says so */
    tern_engine *a = mk_hooked_with("  - name: shm\n  - name: memcpy\n", "debug", &s);
    tern_engine *b = mk_plain("log_level: warn\n");
    static char src[8192], dst[8192];
    memset(src, 0x5a, sizeof src);
    cr_assert_eq(tern_register_memory(a, src, sizeof src, NULL), 0);
    cr_assert_eq(tern_register_memory(b, dst, sizeof dst, NULL), 0);
    char peer[300]; /* b's name, read after b is gone */
    snprintf(peer, sizeof peer, "%s", tern_engine_server_name(b));
    tern_segment_id id = tern_segment_open(a, peer);
    cr_assert_geq(id, 0, "%s", tern_engine_last_error(a));
    cr_assert_eq(tern_transfer_sync(a, TERN_WRITE, src, id, (uint64_t)(uintptr_t)dst,
                                    sizeof src, 10000), 0, "%s", tern_engine_last_error(a));
    cr_assert_eq(memcmp(src, dst, sizeof src), 0);
    tern_buffer_info info[4];
    cr_assert_eq(tern_segment_buffers(a, id, info, 4), 1, "%s", tern_engine_last_error(a));
    cr_assert_eq(tern_segment_close(a, id), 0);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    dump(&s);
    int fetched = find(&s, peer, "descriptor fetched from p2p: generation ");
    cr_assert_geq(fetched, 0, "descriptor fetched, with its generation");
    cr_assert_eq(s.level[fetched], TERN_LOG_DEBUG);
    int chosen = find(&s, peer, "transport memcpy chosen");
    cr_assert_gt(chosen, fetched, "transport chosen, after the fetch");
    cr_assert(strstr(s.msg[chosen], "shm passed over: the peer does not list it"),
              "and why: %s", s.msg[chosen]);
    int up = find(&s, "endpoint up: memcpy", peer);
    cr_assert_gt(up, chosen, "the endpoint came up, after the choice");
    int same = find(&s, peer, "unchanged");
    cr_assert_gt(same, up, "the refetch of tern_segment_buffers found the same generation");
    int closed = find(&s, peer, "closed, its endpoints dropped");
    cr_assert_gt(closed, same, "the segment closed");
}

Test(log, debug_story_is_silent_at_info)
{
    seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    tern_engine *a = mk_hooked("info", &s);
    tern_engine *b = mk_plain("log_level: warn\n");
    tern_segment_id id = tern_segment_open(a, tern_engine_server_name(b));
    cr_assert_geq(id, 0, "%s", tern_engine_last_error(a));
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    cr_assert_eq(find(&s, "descriptor fetched", NULL), -1);
    for (size_t i = 0; i < s.n; i++)
        cr_assert_leq(s.level[i], TERN_LOG_INFO, "%s", s.msg[i]);
}
