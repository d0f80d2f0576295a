/* tests/core/config_harness.h: what the two files of test_config
 * (test_config.c, test_config_options.c) share: fixture paths, loading a
 * configuration that must load, and the built-in defaults. */
#ifndef TERN_TEST_CONFIG_HARNESS_H
#define TERN_TEST_CONFIG_HARNESS_H

#include <stddef.h>

#include "config/config.h"

#define FIXTURE(name) TERN_TEST_DIR "/support/fixtures/config/" name
#define SHIPPED(name) TERN_SOURCE_DIR "/config/" name

/* Loads `yaml` (origin "t.yaml"); the test fails with the message if it
 * does not load. */
tern_config *load_ok(const char *yaml);

/* The built-in defaults with the given transports (names, in order). */
void assert_defaults_with(const tern_config *cfg, const char *const *xp, size_t nxp);
/* ... with tcp alone (a file without `transports`). */
void assert_defaults(const tern_config *cfg);
/* ... with shm then tcp (the shipped config/tern.yaml). */
void assert_shipped_defaults(const tern_config *cfg);

#endif
