/* tests/core/config_harness.c: see config_harness.h. */
#include <criterion/criterion.h>

#include "config_harness.h"
#include "config/load.h"

tern_config *load_ok(const char *yaml)
{
    char err[512] = "";
    tern_config *cfg = NULL;
    int rc = tern_config_load_yaml(yaml, "t.yaml", &cfg, err, sizeof err);
    cr_assert_eq(rc, 0, "load failed (%d): %s\n--- yaml ---\n%s", rc, err, yaml);
    cr_assert_not_null(cfg);
    return cfg;
}

/* The built-in defaults, with the given transports (names, in order; none
 * with a path, required or keys): tcp alone for a file without
 * `transports`, shm then tcp for the shipped config/tern.yaml. */
void assert_defaults_with(const tern_config *cfg, const char *const *xp, size_t nxp)
{
    cr_assert_str_eq(cfg->server_name, "127.0.0.1:12001");
    cr_assert_str_eq(cfg->metadata, "p2p");
    cr_assert_str_eq(cfg->cluster_id, "default");
    cr_assert_eq(cfg->ntransports, nxp);
    for (size_t i = 0; i < nxp; i++) {
        cr_assert_str_eq(cfg->transports[i].name, xp[i]);
        cr_assert_null(cfg->transports[i].path);
        cr_assert_eq(cfg->transports[i].required, 0);
        cr_assert_eq(cfg->transports[i].nkv, 0);
    }
    cr_assert_eq(cfg->nplugin_path, 0);
    cr_assert_str_eq(cfg->topology, "auto");
    cr_assert_str_eq(cfg->topology_sysfs_root, "/sys");
    cr_assert_eq(cfg->ndevice_allow, 0);
    cr_assert_eq(cfg->select_policy, TERN_SELECT_RANDOM);
    cr_assert_eq(cfg->slice_size, 65536);
    cr_assert_eq(cfg->retries, 3);
    cr_assert_eq(cfg->log_level, TERN_LOG_INFO);
    cr_assert_eq(cfg->handshake_max_frame, 1 << 20);
    cr_assert_eq(cfg->connect_timeout_ms, 5000);
    cr_assert_eq(cfg->io_timeout_ms, 2000);
    cr_assert_eq(cfg->endpoint_cache, 256);
    cr_assert_eq(cfg->eviction, TERN_EVICT_SIEVE);
    cr_assert_null(cfg->auth_secret_file);
    cr_assert_eq(cfg->env_overrides, 0);
}

void assert_defaults(const tern_config *cfg)
{
    static const char *const tcp[] = {"tcp"};
    assert_defaults_with(cfg, tcp, 1);
}

void assert_shipped_defaults(const tern_config *cfg)
{
    static const char *const shm_tcp[] = {"shm", "tcp"};
    assert_defaults_with(cfg, shm_tcp, 2);
}
