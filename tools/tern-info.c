/* tern-info: what tern would do with a configuration.
 *
 *   tern-info [--config FILE] [--json] [--verbose] [--server-name H:P] [--peer HOST:PORT]...
 *   tern-info --schema-markdown
 *
 * Prints the resolved configuration, every configured transport with its
 * load outcome, message and path, the devices each loaded transport found,
 * and each one's topology matrix; the shared secret and the topology file
 * are checked as the engine checks them.  With --peer, it also starts an
 * engine (on the configured host, a free port), opens each peer's segment
 * and shows the transport negotiated with it (or why none); --server-name
 * gives that engine another name (an address of this host that peers can
 * reach, as tern-bench's option does), so one configuration file can serve
 * every host of a cluster.  --json prints
 * one JSON object with stable keys instead.  --schema-markdown prints the
 * reference table of configuration keys in docs/configuration.md.  Exit
 * status: 0 when an engine could be created from the configuration, 1 when
 * not (a transport, the topology or the secret failed: the reason on
 * stderr, the report still on stdout), 2 for a bad command line or an
 * invalid configuration.
 *
 * Only the public API (tern/tern.h): the report comes from
 * tern_config_describe(), so it shows what the engine itself would do. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ephemeral_name.h"
#include "tern/tern.h"

typedef struct info_opts {
    const char *config;
    const char *server_name; /* --server-name: the --peer engine's name */
    int json;
    int verbose;
    int schema_markdown;
    const char *peers[32];
    int npeers;
} info_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: tern-info [--config FILE] [--json] [--verbose] [--server-name H:P]\n"
               "                 [--peer HOST:PORT]...\n"
               "       tern-info --schema-markdown\n"
               "  --config FILE      the YAML configuration (default: $TERN_CONFIG, else the\n"
               "                     embedded default, same as config/tern.yaml)\n"
               "  --json             one JSON object on stdout, stable keys\n"
               "  --verbose          loader and plugin log lines down to debug on stderr\n"
               "  --peer NAME        open that peer's segment and show the transport used\n"
               "                     with it (repeatable)\n"
               "  --server-name H:P  the name of the engine --peer starts (default: the\n"
               "                     configured host, a free port)\n"
               "  --schema-markdown  the table of configuration keys, as in\n"
               "                     docs/configuration.md\n");
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
        } else if (strcmp(argv[i], "--server-name") == 0 && i + 1 < argc)
            o->server_name = argv[++i];
        else if (strncmp(argv[i], "--server-name=", 14) == 0)
            o->server_name = argv[i] + 14;
        else if (strcmp(argv[i], "--json") == 0)
            o->json = 1;
        else if (strcmp(argv[i], "--schema-markdown") == 0)
            o->schema_markdown = 1;
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

/* ---- JSON access ------------------------------------------------------------- */
static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static const char *get_str(json_object *o, const char *key)
{
    json_object *v = get(o, key);
    return v ? json_object_get_string(v) : NULL;
}

static const char *or_dash(const char *s) { return s && *s ? s : "-"; }
static const char *nz(const char *s) { return s ? s : ""; }

/* ---- --schema-markdown ------------------------------------------------------- */
/* A table cell: '|' escaped, no line breaks. */
static void cell(const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", stdout);
        else
            putchar(*s == '\n' ? ' ' : *s);
    }
}

static int print_schema_markdown(void)
{
    char *text = NULL, err[1024] = "";
    if (tern_config_describe(NULL, TERN_DESCRIBE_SCHEMA, &text, err, sizeof err) < 0) {
        fprintf(stderr, "tern-info: %s\n", err);
        return 1;
    }
    json_object *o = json_tokener_parse(text), *keys = get(o, "keys");
    free(text);
    printf("| key | type | default | environment | meaning |\n| --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; keys && i < json_object_array_length(keys); i++) {
        json_object *k = json_object_array_get_idx(keys, i);
        const char *def = get_str(k, "default"), *env = get_str(k, "env");
        printf("| `%s` | ", nz(get_str(k, "key")));
        cell(get_str(k, "doc_type"));
        fputs(" | ", stdout);
        if (def) {
            putchar('`');
            cell(def);
            putchar('`');
        } else {
            fputs("none", stdout);
        }
        printf(" | %s%s%s | ", env ? "`" : "", env ? env : "", env ? "`" : "");
        cell(get_str(k, "help"));
        fputs(" Accepts ", stdout);
        cell(get_str(k, "accepts"));
        printf(". |\n");
    }
    json_object_put(o);
    return 0;
}

/* ---- peers: which transport each peer pair uses --------------------------- */
typedef struct peer_result {
    const char *name;
    char transport[64];
    char error[1024];
} peer_result;

/* Each peer is opened through the real metadata backend and negotiation.
 * Returns how many failed. */
static int probe_peers(const info_opts *o, const char *server_name, peer_result *res)
{
    char name[300], err[1024] = "";
    int failed = 0;
    if (o->server_name)
        snprintf(name, sizeof name, "%s", o->server_name);
    else
        tool_ephemeral_name(server_name, name, sizeof name);
    tern_engine *e = tern_engine_create_as(o->config, name, err, sizeof err);
    for (int i = 0; i < o->npeers; i++) {
        res[i].name = o->peers[i];
        res[i].transport[0] = res[i].error[0] = '\0';
        tern_segment_id id = e ? tern_segment_open(e, o->peers[i]) : -1;
        if (!e)
            snprintf(res[i].error, sizeof res[i].error, "engine: %s", err);
        else if (id < 0)
            snprintf(res[i].error, sizeof res[i].error, "%s", tern_engine_last_error(e));
        else if (tern_segment_transport(e, id, res[i].transport, sizeof res[i].transport) < 0)
            snprintf(res[i].error, sizeof res[i].error, "%s", tern_engine_last_error(e));
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
        json_object_object_add(p, "name", json_object_new_string(res[i].name));
        json_object_object_add(p, "transport",
                               res[i].error[0] ? NULL : json_object_new_string(res[i].transport));
        json_object_object_add(p, "error",
                               res[i].error[0] ? json_object_new_string(res[i].error) : NULL);
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

/* ---- text ------------------------------------------------------------------- */
static void print_text_transport(json_object *t)
{
    json_object *req = get(t, "required");
    const char *path = get_str(t, "path");
    printf("\n  %s%s: %s\n", nz(get_str(t, "name")),
           req && json_object_get_boolean(req) ? " (required)" : "",
           nz(get_str(t, "outcome_text")));
    if (path)
        printf("    path:    %s\n", path);
    printf("    message: %s\n", or_dash(get_str(t, "message")));
    json_object *loaded = get(t, "loaded");
    if (!loaded || !json_object_get_boolean(loaded))
        return;
    printf("    version: %s, ABI %s, slice_size %s\n", or_dash(get_str(t, "version")),
           or_dash(get_str(t, "abi")), or_dash(get_str(t, "slice_size")));
    printf("    gpu memory: local %s, peer's %s\n", or_dash(get_str(t, "gpu_memory")),
           or_dash(get_str(t, "gpu_memory_peer")));
    printf("    devices:\n");
    json_object *devs = get(t, "devices"), *opts = get(t, "options");
    for (size_t i = 0; devs && i < json_object_array_length(devs); i++) {
        json_object *d = json_object_array_get_idx(devs, i);
        const char *sysfs = get_str(d, "sysfs_path");
        printf("      %-20s numa %-3s %s\n", nz(get_str(d, "name")), nz(get_str(d, "numa_node")),
               sysfs && *sysfs ? sysfs : "(not a PCI device)");
    }
    for (size_t i = 0; opts && i < json_object_array_length(opts); i++) {
        json_object *p = json_object_array_get_idx(opts, i);
        printf("    option %-16s %-11s default %-8s %s\n", nz(get_str(p, "key")),
               nz(get_str(p, "type")), or_dash(get_str(p, "default")), nz(get_str(p, "help")));
    }
    const char *err = get_str(t, "topology_error");
    printf("    topology:%s%s", err ? " " : "\n", err ? err : "");
    if (!err)
        printf("%s", or_dash(get_str(t, "topology_text")));
    putchar('\n');
}

static void print_text(json_object *report)
{
    json_object *cfg = get(report, "config"), *ts = get(report, "transports");
    printf("configuration (%s):\n%s\n", or_dash(get_str(cfg, "origin")),
           json_object_to_json_string_ext(cfg, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                   JSON_C_TO_STRING_NOSLASHESCAPE));
    printf("\nauth_secret_file: %s\n", or_dash(get_str(report, "auth")));
    printf("\nplugin directory: %s\ntransports:", or_dash(get_str(report, "plugin_dir")));
    for (size_t i = 0; ts && i < json_object_array_length(ts); i++)
        print_text_transport(json_object_array_get_idx(ts, i));
    json_object *gpu = get(report, "gpu"), *avail = get(gpu, "available");
    if (avail && json_object_get_boolean(avail))
        printf("\ngpu memory: available, %s GPU(s) through %s (staged: pinned host buffers, "
               "gpu_staging_buffers per GPU; direct: the transport addresses it)\n",
               or_dash(get_str(gpu, "gpus")), or_dash(get_str(gpu, "library")));
    else
        printf("\ngpu memory: unavailable: %s\n", or_dash(get_str(gpu, "reason")));
    putchar('\n');
}

int main(int argc, char **argv)
{
    info_opts o = {0};
    if (parse_args(argc, argv, &o) < 0)
        return 2;
    if (o.schema_markdown)
        return print_schema_markdown();
    char *text = NULL, err[4096] = "";
    int rc = tern_config_describe(o.config, o.verbose ? TERN_DESCRIBE_VERBOSE : 0, &text, err,
                                  sizeof err);
    json_object *report = text ? json_tokener_parse(text) : NULL;
    free(text);
    if (!report) { /* the configuration itself is invalid */
        fprintf(stderr, "tern-info: %s\n", err[0] ? err : "out of memory");
        return 2;
    }
    peer_result peers[32];
    int npeers = rc == 0 ? o.npeers : 0;
    int peers_failed = npeers ? probe_peers(&o, get_str(get(report, "config"), "server_name"),
                                            peers)
                              : 0;
    if (o.json) {
        if (npeers)
            json_object_object_add(report, "peers", peers_json(peers, npeers));
        puts(json_object_to_json_string_ext(report, JSON_C_TO_STRING_PRETTY |
                                                        JSON_C_TO_STRING_SPACED |
                                                        JSON_C_TO_STRING_NOSLASHESCAPE));
    } else {
        print_text(report);
        if (npeers)
            print_text_peers(peers, npeers);
    }
    fflush(stdout);
    if (rc < 0)
        fprintf(stderr, "tern-info: %s\n", err);
    json_object_put(report);
    return (rc < 0 || peers_failed) ? 1 : 0;
}
