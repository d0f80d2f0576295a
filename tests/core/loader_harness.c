/* tests/core/loader_harness.c: see loader_harness.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader_harness.h"

/* ---- a configuration built by hand (the loader alone, no YAML) ---------- */

void cfg_init(tcfg *c)
{
    memset(c, 0, sizeof *c);
    c->cfg.origin = "test.yaml";
    c->cfg.server_name = "127.0.0.1:12001";
    c->cfg.metadata = "p2p";
    c->cfg.transports = c->t;
    c->cfg.plugin_path = c->pp;
    c->cfg.topology_sysfs_root = "/sys";
    c->cfg.slice_size = 65536;
    c->cfg.log_level = TERN_LOG_DEBUG;
    c->cfg.io_timeout_ms = 5000;
}

tern_transport_cfg *cfg_add(tcfg *c, const char *name, const char *path, int required)
{
    tern_transport_cfg *t = &c->t[c->cfg.ntransports];
    t->name = (char *)name;
    t->path = (char *)path;
    t->required = required;
    t->kv = c->kv[c->cfg.ntransports];
    t->line = 3 + (int)c->cfg.ntransports;
    t->col = 5;
    c->cfg.ntransports++;
    return t;
}

void cfg_kv(tern_transport_cfg *t, const char *key, const char *value)
{
    tern_cfg_kv *kv = &t->kv[t->nkv++];
    kv->key = (char *)key;
    kv->value = (char *)value;
    kv->line = t->line + (int)t->nkv;
    kv->col = 7;
}

void cfg_dir(tcfg *c, const char *dir) { c->pp[c->cfg.nplugin_path++] = (char *)dir; }

/* ---- captured log ----------------------------------------------------------- */

char logbuf[16384];
int nwarn;

void test_log(void *arg, int level, const char *fmt, ...)
{
    (void)arg;
    size_t used = strlen(logbuf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(logbuf + used, sizeof logbuf - used, fmt, ap);
    va_end(ap);
    used = strlen(logbuf);
    if (used + 1 < sizeof logbuf)
        strcat(logbuf, "\n");
    nwarn += level == TERN_LOG_WARN;
}

void setup(void)
{
    logbuf[0] = '\0';
    nwarn = 0;
    unsetenv("TERN_PLUGIN_PATH");
}
