/* core/config/load.c: building a tern_config.
 *
 * Precedence, lowest first (docs/configuration.md, "Which file, and
 * precedence"): the defaults of the key table (schema.c), then the file (or
 * the embedded default text), then the environment variables the table
 * names.  Defaults are applied through the same code as the file, so a
 * default can never be a value the file could not hold. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, strndup (CMake also sets it) */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/load.h"
#include "config/option.h"
#include "config/schema.h"
#include "config/transports.h"
#include "config/yaml_tree.h"
#include "base/fileio.h"
#include "base/util.h"

static const char tern_default_yaml[] =
    "# tern: the default engine configuration.\n"
    "#\n"
    "# This is the configuration tern uses when it is given no file and\n"
    "# $TERN_CONFIG is unset (the same text is compiled into libtern).  It needs\n"
    "# nothing else to run: peers on the same host over shm (one memory copy),\n"
    "# others over TCP, peers found through their handshake daemons (p2p\n"
    "# metadata).  Every key is described in docs/configuration.md.\n"
    "\n"
    "# host:port of this engine's handshake daemon; its segment name for peers.\n"
    "# Port 0 picks a free port (read it back with tern_engine_server_name()).\n"
    "server_name: 127.0.0.1:12001\n"
    "\n"
    "# Where segment descriptors live: p2p (ask the peer's daemon directly),\n"
    "# redis://host:port[/db], etcd://host:port[,host:port...] or http://host:port/path.\n"
    "metadata: p2p\n"
    "\n"
    "# Transports in order of preference: the first one that a peer also speaks\n"
    "# (and that loaded here) carries the bytes.  shm reaches only engines on\n"
    "# this host that it may read (same boot, same pid namespace, ptrace\n"
    "# permission); any other peer is moved to tcp.\n"
    "transports:\n"
    "  - name: shm\n"
    "  - name: tcp\n"
    "\n"
    "# Bytes per slice (K/M/G suffixes), and attempts after a failed slice.\n"
    "slice_size: 64K\n"
    "retries: 3\n"
    "\n"
    "# error, warn, info or debug ($TERN_LOG_LEVEL overrides it).\n"
    "log_level: info\n";

const char *tern_config_default_yaml(void) { return tern_default_yaml; }

/* ---- storing a value ------------------------------------------------------------ */
static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

#define FIELD(cfg, k, type) ((type *)(void *)((char *)(cfg) + (k)->off))

/* A list's items, copied (null: empty). */
static int set_list(tern_config *cfg, const cfg_key *k, const ynode *v)
{
    size_t n = v->kind == YN_SEQ ? v->n : 0;
    char **out = calloc(n + 1, sizeof *out);
    if (!out)
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!(out[i] = strdup(v->kids[i]->text))) {
            strv_free(out, i);
            return TERN_ERR_NOMEM;
        }
    }
    size_t *count = (size_t *)(void *)((char *)cfg + k->count_off);
    strv_free(*FIELD(cfg, k, char **), *count);
    *FIELD(cfg, k, char **) = out;
    *count = n;
    return 0;
}

static int set_string(tern_config *cfg, const cfg_key *k, const char *text)
{
    char *copy = NULL;
    if (text && !(copy = strdup(text)))
        return TERN_ERR_NOMEM;
    free(*FIELD(cfg, k, char *));
    *FIELD(cfg, k, char *) = copy;
    return 0;
}

int cfg_key_set(cfgctx *c, tern_config *cfg, const cfg_key *k, const ynode *kn, const ynode *v)
{
    const char *path = kn->text;
    cfg_value val = {0};
    int rc;
    if (k->flags & CFGK_CUSTOM)
        return cfg_transports_parse(c, cfg, kn, v);
    if ((k->flags & CFGK_NULLABLE) && v->kind == YN_SCALAR && v->isnull)
        return set_string(cfg, k, NULL); /* explicitly unset */
    if (k->opt.type == TERN_OPT_STRING_LIST) {
        rc = cfg_list_check(c, k, kn, v, path);
        return rc ? rc : set_list(cfg, k, v);
    }
    if ((rc = cfg_option_check(c, &k->opt, k, kn, v, path, &val)))
        return rc;
    switch (k->opt.type) {
    case TERN_OPT_STRING: return set_string(cfg, k, v->text);
    case TERN_OPT_SIZE: *FIELD(cfg, k, uint64_t) = val.u; return 0;
    case TERN_OPT_INT:
        if (k->flags & CFGK_U64)
            *FIELD(cfg, k, uint64_t) = (uint64_t)val.i;
        else
            *FIELD(cfg, k, int) = (int)val.i;
        return 0;
    default: *FIELD(cfg, k, int) = (int)val.i; return 0; /* CHOICE, BOOL */
    }
}

/* ---- the root mapping --------------------------------------------------------- */
static int root_key(cfgctx *c, tern_config *cfg, const ynode *k, const ynode *v)
{
    const char *names[64];
    size_t n = 0;
    const cfg_key *key = cfg_key_find(k->text);
    if (key)
        return cfg_key_set(c, cfg, key, k, v);
    for (size_t i = 0; i < cfg_nkeys && n < 64; i++)
        names[n++] = cfg_keys[i].opt.key;
    return cfg_unknown_key(c, k, k->text, "a top-level key", names, n,
                           "see docs/configuration.md");
}

int cfg_apply_tree(cfgctx *c, tern_config *cfg, const ynode *root)
{
    char b[64];
    if (!root || (root->kind == YN_SCALAR && root->isnull))
        return 0; /* an empty file: every default */
    if (root->kind != YN_MAP)
        return cfg_err(c, AT(root), "", "expected a mapping of settings, got %s",
                       cfg_show(root, b, sizeof b));
    for (size_t i = 0; i < root->n; i += 2) {
        int rc = root_key(c, cfg, root->kids[i], root->kids[i + 1]);
        if (rc)
            return rc;
    }
    return 0;
}

/* Parse YAML text and apply it to cfg. */
static int apply_yaml(cfgctx *c, tern_config *cfg)
{
    ynode *root = NULL;
    int rc = cfg_yaml_to_tree(c, &root);
    if (!rc)
        rc = cfg_apply_tree(c, cfg, root);
    cfg_ynode_free(root);
    return rc;
}

/* ---- defaults ------------------------------------------------------------------- */
/* Every default of the table, as one YAML document run through the loader. */
static int apply_defaults(tern_config *cfg, char *err, size_t errlen)
{
    size_t len = 1;
    for (size_t i = 0; i < cfg_nkeys; i++)
        if (cfg_keys[i].opt.default_value)
            len += strlen(cfg_keys[i].opt.key) + strlen(cfg_keys[i].opt.default_value) + 3;
    char *text = malloc(len), *p = text;
    if (!text)
        return TERN_ERR_NOMEM;
    for (size_t i = 0; i < cfg_nkeys; i++)
        if (cfg_keys[i].opt.default_value)
            p += sprintf(p, "%s: %s\n", cfg_keys[i].opt.key, cfg_keys[i].opt.default_value);
    cfgctx c = {.origin = "<defaults>", .err = err, .errlen = errlen, .input = text,
                .inlen = (size_t)(p - text)};
    int rc = apply_yaml(&c, cfg);
    free(text);
    return rc;
}

/* ---- environment ---------------------------------------------------------------- */
/* A list variable (':'-separated, empty parts skipped) goes in front. */
static int env_prepend(cfgctx *c, tern_config *cfg, const cfg_key *k, const char *val)
{
    if (strlen(val) > 65536)
        return cfg_err(c, 0, 0, "", "expected at most 64K characters, got %zu", strlen(val));
    size_t *count = (size_t *)(void *)((char *)cfg + k->count_off);
    char ***list = FIELD(cfg, k, char **);
    size_t n = 1, got = 0;
    for (const char *q = val; *q; q++)
        n += *q == ':';
    char **dirs = calloc(n + *count + 1, sizeof *dirs);
    if (!dirs)
        return TERN_ERR_NOMEM;
    for (const char *q = val; *q;) {
        size_t len = strcspn(q, ":");
        if (len && !(dirs[got++] = strndup(q, len))) {
            strv_free(dirs, got - 1);
            return TERN_ERR_NOMEM;
        }
        q += len + (q[len] == ':');
    }
    if (!got) {
        free(dirs);
        return 0;
    }
    memcpy(dirs + got, *list, *count * sizeof *dirs);
    free(*list);
    *list = dirs;
    *count += got;
    *(size_t *)(void *)((char *)cfg + k->env_count_off) = got;
    cfg->env_overrides |= k->env_bit;
    return 0;
}

/* Each variable the table names; empty variables count as unset. */
static int apply_env(tern_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg_nkeys; i++) {
        const cfg_key *k = &cfg_keys[i];
        const char *val = k->env ? getenv(k->env) : NULL;
        if (!val || !*val)
            continue;
        cfgctx c = {.origin = "", .env = k->env, .err = err, .errlen = errlen};
        int rc;
        if (k->opt.type == TERN_OPT_STRING_LIST) {
            rc = env_prepend(&c, cfg, k, val);
        } else {
            ynode kn = {.kind = YN_SCALAR, .text = (char *)k->opt.key};
            ynode v = {.kind = YN_SCALAR, .text = (char *)val};
            if (!(rc = cfg_key_set(&c, cfg, k, &kn, &v)))
                cfg->env_overrides |= k->env_bit;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- loading ------------------------------------------------------------------- */
int tern_config_load_yaml(const char *yaml, const char *origin, tern_config **out, char *err,
                          size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "tern_config_load_yaml: out is NULL");
    *out = NULL;
    if (!origin)
        origin = "<yaml>";
    if (!yaml)
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "%s: no YAML text given", origin);
    cfgctx c = {.origin = origin, .err = err, .errlen = errlen, .input = yaml};
    c.inlen = strlen(yaml);
    if (c.inlen > CFG_MAX_INPUT)
        return cfg_err(&c, 1, 1, "", "expected at most 1 MiB of YAML, got %zu bytes", c.inlen);
    tern_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->origin = strdup(origin))) {
        free(cfg);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory", origin);
    }
    int rc = apply_defaults(cfg, err, errlen);
    if (!rc)
        rc = apply_yaml(&c, cfg);
    if (!rc)
        rc = apply_env(cfg, err, errlen);
    if (rc == TERN_ERR_NOMEM)
        tern_errf(err, errlen, rc, "%s: out of memory while loading the configuration", origin);
    if (rc) {
        tern_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
}

/* The file through tern_file_read_capped (a FIFO, a device or a huge file
 * cannot hang or exhaust us); text only. */
static int read_config_text(const char *path, char **text, char *err, size_t errlen)
{
    size_t n = 0;
    int rc = tern_file_read_capped(path, CFG_MAX_INPUT, text, &n, err, errlen);
    if (rc == TERN_ERR_NOT_FOUND)
        rc = TERN_ERR_CONFIG;
    if (rc == TERN_ERR_CONFIG && err && strstr(err, "more than the limit"))
        tern_errf(err, errlen, rc, "%s:1:1: (root): expected at most 1 MiB of YAML, got more",
                  path);
    if (rc)
        return rc;
    const char *nul = memchr(*text, '\0', n);
    if (nul) {
        size_t at = (size_t)(nul - *text);
        free(*text);
        *text = NULL;
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "%s:1:1: (root): expected YAML text, got a NUL byte at offset %zu", path,
                         at);
    }
    return 0;
}

int tern_config_load_file(const char *path, tern_config **out, char *err, size_t errlen)
{
    const char *via = "";
    if (!path || !*path) {
        const char *env = getenv("TERN_CONFIG");
        if (!env || !*env)
            return tern_config_load_yaml(tern_default_yaml, "<embedded>", out, err, errlen);
        path = env;
        via = "TERN_CONFIG=";
    }
    if (out)
        *out = NULL;
    char *text = NULL;
    int rc = read_config_text(path, &text, err, errlen);
    if (rc) {
        if (*via && err && errlen) { /* say where the name came from */
            char tmp[512];
            tern_strlcpy(tmp, err, sizeof tmp);
            snprintf(err, errlen, "%s%s", via, tmp);
        }
        return rc;
    }
    rc = tern_config_load_yaml(text, path, out, err, errlen);
    free(text);
    if (!rc && *via)
        (*out)->env_overrides |= TERN_CFG_ENV_CONFIG;
    return rc;
}

void tern_config_free(tern_config *cfg)
{
    if (!cfg)
        return;
    cfg_transports_free(cfg);
    for (size_t i = 0; i < cfg_nkeys; i++) {
        const cfg_key *k = &cfg_keys[i];
        if (k->opt.type == TERN_OPT_STRING_LIST && !(k->flags & CFGK_CUSTOM))
            strv_free(*FIELD(cfg, k, char **), *(size_t *)(void *)((char *)cfg + k->count_off));
        else if (k->opt.type == TERN_OPT_STRING)
            free(*FIELD(cfg, k, char *));
    }
    free(cfg->origin);
    free(cfg);
}

/* ---- server name ---------------------------------------------------------------- */
/* An override of server_name from a program (tern_engine_create_as),
 * checked by the same table entry as the YAML key. */
int tern_config_set_server_name(tern_config *cfg, const char *name, char *err, size_t errlen)
{
    const cfg_key *k = cfg_key_find("server_name");
    if (!name || !k->valid(name))
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "server name override '%.200s': expected %s", name ? name : "(null)",
                         k->what);
    return set_string(cfg, k, name) ? tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory")
                                     : 0;
}
