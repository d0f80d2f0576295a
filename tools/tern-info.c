/* tern-info: what tern would do with a configuration.
 *
 *   tern-info [--config FILE] [--json] [--verbose] [--peer HOST:PORT]...
 *
 * Prints the resolved configuration, every configured transport with its
 * load outcome, message and path, the devices each loaded transport found,
 * and each one's topology matrix.  With --peer, it also starts an engine (on
 * the configured host, a free port), opens each peer's segment and shows the
 * transport negotiated with it (or why none).  --json prints one JSON object with stable
 * keys instead.  Exit status: 0 when every required transport loaded and at
 * least one loaded, 1 when loading failed (the reason on stderr, the report
 * still on stdout), 2 for a bad command line or an invalid configuration. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "plugin.h"
#include "tern/tern.h"
#include "topology.h"
#include "util.h"

typedef struct info_opts {
    const char *config;
    int json;
    int verbose;
    const char *peers[32];
    int npeers;
} info_opts;

static int max_log_level = TERN_LOG_WARN;

/* Log lines go to stderr so that --json output stays one parseable object. */
static void info_log(void *arg, int level, const char *fmt, ...)
{
    (void)arg;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    if (level > max_log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tern-info: %s: ", level >= 0 && level <= 3 ? names[level] : "log");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tern-info [--config FILE] [--json] [--verbose] [--peer HOST:PORT]...\n"
               "  --config FILE  the YAML configuration (default: $TERN_CONFIG, else the\n"
               "                 embedded default, same as config/tern.yaml)\n"
               "  --json         one JSON object on stdout, stable keys\n"
               "  --verbose      loader and plugin log lines down to debug on stderr\n"
               "  --peer NAME    open that peer's segment and show the transport used\n"
               "                 with it (repeatable)\n");
}

static int parse_args(int argc, char **argv, info_opts *o)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            o->config = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            o->config = argv[i] + 9;
        else if (strcmp(argv[i], "--peer") == 0 && i + 1 < argc) {
            if (o->npeers == (int)(sizeof o->peers / sizeof *o->peers)) {
                fprintf(stderr, "tern-info: at most %zu --peer\n", sizeof o->peers / sizeof *o->peers);
                return -1;
            }
            o->peers[o->npeers++] = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0)
            o->json = 1;
        else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0)
            o->verbose = 1;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "tern-info: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return -1;
        }
    }
    return 0;
}

/* ---- topology ------------------------------------------------------------- */

/* The matrix for one loaded transport: discovered from sysfs ("auto") or read
 * from the JSON file the configuration names.  Returns malloc()ed JSON text
 * or NULL with the reason in err. */
static char *transport_topology(const tern_config *cfg, const tern_plugin *p, char *err,
                                size_t errlen)
{
    tern_topology *t = NULL;
    int rc;
    if (!cfg->topology || strcmp(cfg->topology, "auto") == 0) {
        rc = tern_topology_discover(cfg->topology_sysfs_root ? cfg->topology_sysfs_root : "/sys",
                                    p->devices, p->ndevices,
                                    (const char *const *)cfg->device_allow, cfg->ndevice_allow,
                                    cfg->select_policy, &t, err, errlen);
    } else {
        char *json = NULL;
        size_t len = 0;
        rc = tern_read_file(cfg->topology, &json, &len, err, errlen);
        if (rc == 0)
            rc = tern_topology_from_json(json, p->devices, p->ndevices, cfg->select_policy, &t,
                                         err, errlen);
        free(json);
    }
    if (rc < 0)
        return NULL;
    char *out = tern_topology_to_json(t);
    tern_topology_free(t);
    if (!out)
        tern_errf(err, errlen, TERN_ERR_NOMEM, "topology: out of memory");
    return out;
}

/* ---- JSON ------------------------------------------------------------------- */

static json_object *jstr(const char *s) { return s ? json_object_new_string(s) : NULL; }

static json_object *caps_json(uint64_t caps)
{
    static const char *const names[] = {"read", "write", "handshake", "remote_check",
                                        "multi_device", "loopback_only"};
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (caps & (1ULL << i))
            json_object_array_add(a, json_object_new_string(names[i]));
    return a;
}

static const char *opt_type_name(tern_opt_type t)
{
    static const char *const n[] = {"end", "string", "int", "bool", "choice", "size",
                                    "string_list"};
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "unknown";
}

static json_object *options_json(const tern_option *o)
{
    json_object *a = json_object_new_array();
    for (; o && o->type != TERN_OPT_END && o->key; o++) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "key", jstr(o->key));
        json_object_object_add(j, "type", jstr(opt_type_name(o->type)));
        json_object_object_add(j, "default", jstr(o->default_value));
        json_object_object_add(j, "help", jstr(o->help));
        json_object_array_add(a, j);
    }
    return a;
}

static json_object *devices_json(const tern_plugin *p)
{
    json_object *a = json_object_new_array();
    for (int i = 0; i < p->ndevices; i++) {
        const tern_device_info *d = &p->devices[i];
        json_object *j = json_object_new_object();
        json_object_object_add(j, "name", jstr(d->name));
        json_object_object_add(j, "numa_node", json_object_new_int(d->numa_node));
        json_object_object_add(j, "sysfs_path", jstr(d->sysfs_path));
        json_object_object_add(j, "lid", json_object_new_int64(d->lid));
        json_object_object_add(j, "gid", jstr(d->gid));
        json_object_array_add(a, j);
    }
    return a;
}

/* Embed JSON text produced elsewhere; a string if it does not parse. */
static json_object *embed(const char *text)
{
    json_object *j = text ? json_tokener_parse(text) : NULL;
    return j ? j : jstr(text);
}

static json_object *transport_json(const tern_config *cfg, const tern_plugin *p)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "name", jstr(p->name));
    json_object_object_add(j, "required", json_object_new_boolean(p->required));
    json_object_object_add(j, "outcome", jstr(tern_load_outcome_key(p->outcome)));
    json_object_object_add(j, "loaded", json_object_new_boolean(p->outcome == TERN_LOAD_OK));
    json_object_object_add(j, "path", p->path[0] ? jstr(p->path) : NULL);
    json_object_object_add(j, "message", jstr(p->message));
    if (p->outcome != TERN_LOAD_OK)
        return j;
    const tern_transport *t = p->ops;
    char abi[32], status[512] = "", err[1024] = "";
    snprintf(abi, sizeof abi, "%u.%u", t->abi_major, t->abi_minor);
    json_object_object_add(j, "version", jstr(t->version));
    json_object_object_add(j, "abi", jstr(abi));
    json_object_object_add(j, "caps", caps_json(t->caps));
    json_object_object_add(j, "slice_size", json_object_new_uint64(p->slice_size));
    json_object_object_add(j, "options", options_json(t->options));
    json_object_object_add(j, "devices", devices_json(p));
    if (tern_plugin_has_query(p) && t->query(p->ctx, "status", status, sizeof status) == 0)
        json_object_object_add(j, "status", jstr(status));
    char *topo = transport_topology(cfg, p, err, sizeof err);
    json_object_object_add(j, "topology", topo ? embed(topo) : NULL);
    if (!topo)
        json_object_object_add(j, "topology_error", jstr(err));
    free(topo);
    return j;
}

/* ---- peers: which transport each peer pair uses --------------------------- */

typedef struct peer_result {
    const char *name;
    char transport[TERN_NAME_MAX];
    char error[1024];
} peer_result;

/* One engine on the configured host and a free port, so it can run beside
 * an engine that holds the configured one; each peer is opened through the
 * real metadata backend and negotiation.  Returns how many failed. */
static int probe_peers(const info_opts *o, const tern_config *cfg, peer_result *res)
{
    char name[300], err[1024] = "";
    int failed = 0;
    tern_config_ephemeral_name(cfg, name, sizeof name);
    tern_engine *e = tern_engine_create_as(o->config, name, err, sizeof err);
    for (int i = 0; i < o->npeers; i++) {
        res[i].name = o->peers[i];
        res[i].transport[0] = res[i].error[0] = '\0';
        tern_segment_id id = e ? tern_segment_open(e, o->peers[i]) : -1;
        if (!e)
            snprintf(res[i].error, sizeof res[i].error, "engine: %s", err);
        else if (id < 0)
            tern_strlcpy(res[i].error, tern_engine_last_error(e), sizeof res[i].error);
        else if (tern_segment_transport(e, id, res[i].transport, sizeof res[i].transport) < 0)
            tern_strlcpy(res[i].error, tern_engine_last_error(e), sizeof res[i].error);
        if (id >= 0)
            tern_segment_close(e, id);
        failed += res[i].error[0] != '\0';
    }
    tern_engine_destroy(e);
    return failed;
}

static json_object *peers_json(const peer_result *res, int n)
{
    json_object *a = json_object_new_array();
    for (int i = 0; i < n; i++) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "name", jstr(res[i].name));
        json_object_object_add(p, "transport", res[i].error[0] ? NULL : jstr(res[i].transport));
        json_object_object_add(p, "error", res[i].error[0] ? jstr(res[i].error) : NULL);
        json_object_array_add(a, p);
    }
    return a;
}

static void print_text_peers(const peer_result *res, int n)
{
    printf("peers:\n");
    for (int i = 0; i < n; i++)
        if (res[i].error[0])
            printf("  %s: no transport: %s\n", res[i].name, res[i].error);
        else
            printf("  %s: %s\n", res[i].name, res[i].transport);
}

static void print_json(const tern_config *cfg, const tern_plugin_set *set, int rc,
                       const char *err, const peer_result *peers, int npeers)
{
    json_object *o = json_object_new_object();
    char *cj = tern_config_to_json(cfg);
    json_object_object_add(o, "config", embed(cj));
    free(cj);
    json_object_object_add(o, "plugin_dir", jstr(tern_plugin_default_dir()));
    json_object *ts = json_object_new_array();
    for (size_t i = 0; i < set->n; i++)
        json_object_array_add(ts, transport_json(cfg, &set->plugins[i]));
    json_object_object_add(o, "transports", ts);
    if (npeers)
        json_object_object_add(o, "peers", peers_json(peers, npeers));
    json_object_object_add(o, "ok", json_object_new_boolean(rc == 0));
    json_object_object_add(o, "error", rc == 0 ? NULL : jstr(err));
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

/* ---- text ------------------------------------------------------------------- */

static void print_text_transport(const tern_config *cfg, const tern_plugin *p)
{
    printf("\n  %s%s: %s\n", p->name, p->required ? " (required)" : "",
           tern_load_outcome_name(p->outcome));
    if (p->path[0])
        printf("    path:    %s\n", p->path);
    printf("    message: %s\n", p->message);
    if (p->outcome != TERN_LOAD_OK)
        return;
    const tern_transport *t = p->ops;
    printf("    version: %s, ABI %u.%u, slice_size %llu\n", t->version ? t->version : "?",
           t->abi_major, t->abi_minor, (unsigned long long)p->slice_size);
    printf("    devices:\n");
    for (int i = 0; i < p->ndevices; i++)
        printf("      %-20s numa %-3d %s\n", p->devices[i].name, p->devices[i].numa_node,
               p->devices[i].sysfs_path[0] ? p->devices[i].sysfs_path : "(not a PCI device)");
    for (const tern_option *o = t->options; o && o->type != TERN_OPT_END && o->key; o++)
        printf("    option %-16s %-11s default %-8s %s\n", o->key, opt_type_name(o->type),
               o->default_value ? o->default_value : "-", o->help ? o->help : "");
    char err[1024] = "";
    char *topo = transport_topology(cfg, p, err, sizeof err);
    printf("    topology: %s\n", topo ? topo : err);
    free(topo);
}

static void print_text(const tern_config *cfg, const tern_plugin_set *set)
{
    char *cj = tern_config_to_json(cfg);
    printf("configuration (%s):\n%s\n", cfg->origin ? cfg->origin : "?", cj ? cj : "?");
    free(cj);
    printf("\nplugin directory: %s\ntransports:", tern_plugin_default_dir());
    for (size_t i = 0; i < set->n; i++)
        print_text_transport(cfg, &set->plugins[i]);
    putchar('\n');
}

int main(int argc, char **argv)
{
    info_opts o = {0};
    if (parse_args(argc, argv, &o) < 0)
        return 2;
    tern_config *cfg = NULL;
    char err[4096] = "";
    if (tern_config_load_file(o.config, &cfg, err, sizeof err) < 0) {
        fprintf(stderr, "tern-info: %s\n", err);
        return 2;
    }
    max_log_level = o.verbose ? TERN_LOG_DEBUG : TERN_LOG_WARN;
    tern_plugin_set set;
    int rc = tern_plugins_load(cfg, info_log, NULL, &set, err, sizeof err);
    peer_result peers[32];
    int peers_failed = (rc == 0 && o.npeers) ? probe_peers(&o, cfg, peers) : 0;
    int npeers = rc == 0 ? o.npeers : 0;
    if (o.json)
        print_json(cfg, &set, rc, err, peers, npeers);
    else
        print_text(cfg, &set);
    if (!o.json && npeers)
        print_text_peers(peers, npeers);
    fflush(stdout);
    if (rc < 0)
        fprintf(stderr, "tern-info: %s\n", err);
    tern_plugins_unload(&set);
    tern_config_free(cfg);
    return (rc < 0 || peers_failed) ? 1 : 0;
}
