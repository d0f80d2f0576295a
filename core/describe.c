/* core/describe.c: tern_config_describe(), what tern-info prints.
 *
 * It builds what tern_engine_create() would build, in the same functions,
 * and stops before anything is started: the configuration, every
 * transport's load outcome, devices and topology (topology_load.c, as the
 * engine), and the shared secret checked by the engine's own loader.  No
 * daemon, no metadata backend, no port. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "host/cuda.h"
#include "control/auth.h"
#include "config/config.h"
#include "config/load.h"
#include "config/json.h"
#include "base/log.h"
#include "plugin/plugin.h"
#include "tern/tern.h"
#include "host/topology_load.h"
#include "base/util.h"


static json_object *jstr(const char *s) { return s ? json_object_new_string(s) : NULL; }

static json_object *caps_json(uint64_t caps)
{
    static const char *const names[] = {"read", "write", "handshake", "remote_check",
                                        "multi_device", "loopback_only", "gpu_direct",
                                        "gpu_target"};
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (caps & (1ULL << i))
            json_object_array_add(a, json_object_new_string(names[i]));
    return a;
}

/* Whether GPU memory can be registered here: the driver's load outcome. */
static json_object *gpu_json(void)
{
    json_object *j = json_object_new_object();
    tern_cuda *c = tern_cuda_create();
    char why[512] = "";
    int rc = c ? tern_cuda_load(c, why, sizeof why) : TERN_ERR_NOMEM;
    int n = rc == 0 ? tern_cuda_device_count(c) : 0;
    json_object_object_add(j, "available", json_object_new_boolean(rc == 0 && n > 0));
    json_object_object_add(j, "library", jstr(tern_cuda_library()));
    json_object_object_add(j, "gpus", json_object_new_int(n));
    json_object *pci = json_object_new_array();
    for (int i = 0; i < n; i++) {
        char id[64] = "";
        tern_cuda_pci_bus_id(c, i, id, sizeof id);
        json_object_array_add(pci, json_object_new_string(id));
    }
    json_object_object_add(j, "pci", pci);
    json_object_object_add(j, "reason", rc ? jstr(why) : n ? NULL : jstr("the driver sees no GPU"));
    tern_cuda_destroy(c);
    return j;
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

/* The matrix (and its text form) the engine would use; the first failure
 * is kept in err/rc (the engine would refuse to start). */
static void topology_json(const tern_config *cfg, const tern_plugin *p, json_object *j,
                          int *rc, char *err, size_t errlen)
{
    tern_topology *t = NULL;
    char msg[1024] = "";
    int r = tern_topology_load(cfg, p->devices, p->ndevices, &t, msg, sizeof msg);
    if (r < 0) {
        json_object_object_add(j, "topology", NULL);
        json_object_object_add(j, "topology_error", jstr(msg));
        if (*rc == 0)
            *rc = tern_errf(err, errlen, r, "transport '%s': %s", p->name, msg);
        return;
    }
    char *text = tern_topology_to_json(t), *lines = tern_topology_to_text(t);
    json_object *m = text ? json_tokener_parse(text) : NULL;
    json_object_object_add(j, "topology", m);
    json_object_object_add(j, "topology_text", jstr(lines));
    free(text);
    free(lines);
    tern_topology_free(t);
}

static json_object *transport_json(const tern_config *cfg, const tern_plugin *p, int *rc,
                                   char *err, size_t errlen)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "name", jstr(p->name));
    json_object_object_add(j, "required", json_object_new_boolean(p->required));
    json_object_object_add(j, "outcome", jstr(tern_load_outcome_key(p->outcome)));
    json_object_object_add(j, "outcome_text", jstr(tern_load_outcome_name(p->outcome)));
    json_object_object_add(j, "loaded", json_object_new_boolean(p->outcome == TERN_LOAD_OK));
    json_object_object_add(j, "path", p->path[0] ? jstr(p->path) : NULL);
    json_object_object_add(j, "message", jstr(p->message));
    if (p->outcome != TERN_LOAD_OK)
        return j;
    const tern_transport *t = p->ops;
    char abi[32], status[512] = "";
    snprintf(abi, sizeof abi, "%u.%u", t->abi_major, t->abi_minor);
    json_object_object_add(j, "version", jstr(t->version));
    json_object_object_add(j, "abi", jstr(abi));
    json_object_object_add(j, "caps", caps_json(t->caps));
    json_object_object_add(j, "slice_size", json_object_new_uint64(p->slice_size));
    json_object_object_add(j, "options", options_json(t->options));
    json_object_object_add(j, "devices", devices_json(p));
    /* How this transport meets GPU memory (docs/gpu.md, Transports). */
    json_object_object_add(j, "gpu_memory",
                           jstr(t->caps & TERN_CAP_GPU_DIRECT ? "direct" : "staged"));
    json_object_object_add(j, "gpu_memory_peer",
                           jstr(t->caps & TERN_CAP_GPU_DIRECT   ? "direct"
                                : t->caps & TERN_CAP_GPU_TARGET ? "staged by the target"
                                                                : "not reachable (next transport)"));
    if (t->query(p->ctx, "status", status, sizeof status) == 0) /* a default answers no */
        json_object_object_add(j, "status", jstr(status));
    topology_json(cfg, p, j, rc, err, errlen);
    return j;
}

/* The shared secret, read and checked by the engine's loader. */
static json_object *auth_json(const tern_config *cfg, int *rc, char *err, size_t errlen)
{
    if (!cfg->auth_secret_file)
        return json_object_new_string("off");
    tern_auth *a = NULL;
    char msg[1024];
    int r = tern_auth_load(cfg->auth_secret_file, &a, msg, sizeof msg);
    tern_auth_free(a);
    if (r == 0)
        return json_object_new_string("ok");
    if (*rc == 0)
        *rc = tern_errf(err, errlen, r, "%s", msg);
    return jstr(msg);
}

static int describe_config(const char *path, unsigned flags, char **json_out, char *err,
                           size_t errlen)
{
    tern_config *cfg = NULL;
    int rc = tern_config_load_file(path, &cfg, err, errlen);
    if (rc)
        return rc;
    if (flags & TERN_DESCRIBE_CONFIG_ONLY) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "config", tern_config_json(cfg));
        tern_config_free(cfg);
        *json_out = tern_json_to_text(o);
        return *json_out ? 0 : tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    }
    /* loader and plugin lines on stderr (stdout holds the report), in the
     * engine's format; no engine, so no name */
    tern_logger log;
    tern_logger_init(&log, (flags & TERN_DESCRIBE_VERBOSE) ? TERN_LOG_DEBUG : TERN_LOG_WARN,
                     cfg->log_format, NULL, NULL, NULL);
    tern_plugin_set set;
    char lerr[2048] = "";
    rc = tern_plugins_load(cfg, tern_log_cb, &log, &set, lerr, sizeof lerr);
    if (rc)
        tern_strlcpy(err, lerr, errlen);
    json_object *o = json_object_new_object(), *ts = json_object_new_array();
    json_object_object_add(o, "config", tern_config_json(cfg));
    json_object_object_add(o, "plugin_dir", jstr(tern_plugin_default_dir()));
    json_object_object_add(o, "auth", auth_json(cfg, &rc, err, errlen));
    for (size_t i = 0; i < set.n; i++)
        json_object_array_add(ts, transport_json(cfg, &set.plugins[i], &rc, err, errlen));
    json_object_object_add(o, "transports", ts);
    json_object_object_add(o, "gpu", gpu_json());
    json_object_object_add(o, "ok", json_object_new_boolean(rc == 0));
    json_object_object_add(o, "error", rc == 0 ? NULL : jstr(err));
    tern_plugins_unload(&set);
    tern_logger_fini(&log);
    tern_config_free(cfg);
    *json_out = tern_json_to_text(o);
    if (!*json_out && rc == 0)
        rc = tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    return rc;
}

TERN_EXPORT int tern_config_describe(const char *path, unsigned flags, char **json_out,
                                     char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!json_out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "tern_config_describe: json_out is NULL");
    *json_out = NULL;
    if (flags & TERN_DESCRIBE_SCHEMA) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "keys", tern_config_schema_json());
        *json_out = tern_json_to_text(o);
        return *json_out ? 0 : tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    }
    return describe_config(path, flags, json_out, err, errlen);
}
