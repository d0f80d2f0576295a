/* fuzz/config_yaml.c: tern_config_load_yaml on arbitrary text; an accepted
 * configuration is printed as JSON (tern-info's path) and every transport
 * entry is checked against a small option table like a plugin's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/load.h"
#include "config/option.h"
#include "config/json.h"

static const char *const choices[] = {"256", "1024", "4096", NULL};
static const tern_option opts[] = {
    {"port", TERN_OPT_INT, 0, 65535, NULL, "0", "p"},
    {"bind", TERN_OPT_STRING, 0, 0, NULL, NULL, "b"},
    {"nodelay", TERN_OPT_BOOL, 0, 0, NULL, "true", "n"},
    {"mtu", TERN_OPT_CHOICE, 0, 0, choices, "4096", "m"},
    {"slice_size", TERN_OPT_SIZE, 4096, 1ll << 30, NULL, "1M", "s"},
    {"devices", TERN_OPT_STRING_LIST, 0, 0, NULL, NULL, "d"},
    {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    char *yaml = malloc(size + 1);
    memcpy(yaml, data, size);
    yaml[size] = 0;
    tern_config *cfg = NULL;
    if (tern_config_load_yaml(yaml, "fuzz.yaml", &cfg, err, sizeof err) == 0) {
        char *j = tern_config_to_json(cfg);
        free(j);
        for (size_t i = 0; i < cfg->ntransports; i++) {
            (void)tern_config_check_options(cfg, i, opts, err, sizeof err);
            (void)tern_config_transport_key(cfg, i, "port");
        }
        tern_config_free(cfg);
    } else if (!memchr(err, 0, sizeof err)) {
        abort(); /* the message must be terminated */
    }
    free(yaml);
    return 0;
}
