/* tests/core/loader_harness.h: what the two files of test_loader
 * (test_loader.c, test_loader_memcpy.c) share: a configuration built by
 * hand (the loader alone, no YAML) and the captured log. */
#ifndef TERN_TEST_LOADER_HARNESS_H
#define TERN_TEST_LOADER_HARNESS_H

#include "config/config.h"

typedef struct tcfg {
    tern_config cfg;
    tern_transport_cfg t[8];
    tern_cfg_kv kv[8][8];
    char *pp[4];
} tcfg;

/* An empty configuration: p2p metadata, debug log, no transports. */
void cfg_init(tcfg *c);
/* Appends a transport entry (path NULL: found by name). */
tern_transport_cfg *cfg_add(tcfg *c, const char *name, const char *path, int required);
/* Appends key: value to a transport entry. */
void cfg_kv(tern_transport_cfg *t, const char *key, const char *value);
/* Appends a plugin_path directory. */
void cfg_dir(tcfg *c, const char *dir);

/* The loader's log, one line per message, and the number of warnings;
 * setup() (the suite's init) clears both and TERN_PLUGIN_PATH. */
extern char logbuf[16384];
extern int nwarn;
void test_log(void *arg, int level, const char *fmt, ...);
void setup(void);

#endif
