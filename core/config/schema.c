/* core/config/schema.c: the core's configuration keys, one table.
 *
 * Each entry is written once here: its type, range, default, environment
 * override, help, and where the value lands in tern_config.  The loader
 * (load.c), the defaults, tern-info's JSON (json.c) and the reference table
 * in docs/configuration.md (`tern-info --schema-markdown`) all read it. */
#include <stddef.h>
#include <string.h>

#include "config/schema.h"
#include "config/values.h"

/* Checks of string values beyond "not empty". */
static int ok_server_name(const char *s) { return cfg_valid_hostport(s, strlen(s), 1); }
static int ok_cluster_id(const char *s) { return cfg_valid_name(s, 64); }
static int ok_device(const char *s) { return cfg_valid_name(s, TERN_NAME_MAX - 1); }

static const char *const select_names[] = {"random", "round_robin", NULL};
static const char *const evict_names[] = {"sieve", "fifo", NULL};
static const char *const level_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const format_names[] = {"text", "json", NULL}; /* TERN_LOG_FORMAT_* */
static const char *const hs_addr_names[] = {"auto", "all", "one", NULL}; /* TERN_HS_ADDRS_* */
static const char *const huge_names[] = {"off", "advise", "collapse", NULL}; /* TERN_HUGE_* */

#define F(field) offsetof(tern_config, field)
#define SLICE_MIN (4 << 10)
#define SLICE_MAX (64 << 20)
#define TIMEOUT_MAX 3600000 /* one hour, in ms */

const cfg_key cfg_keys[] = {
    {.opt = {"server_name", TERN_OPT_STRING, 0, 0, NULL, "127.0.0.1:12001",
             "Address of this engine's handshake daemon, and its segment name for peers.  "
             "`host` is a name, an IPv4 address or `[IPv6]`; port 0 picks a free port (read "
             "it back with `tern_engine_server_name()`)."},
     .what = "host:port (port 0..65535; [addr] for IPv6)", .valid = ok_server_name,
     .off = F(server_name), .doc_type = "`host:port`"},
    {.opt = {"metadata", TERN_OPT_STRING, 0, 0, NULL, "p2p",
             "Where segment descriptors live.  `p2p`: fetched from the peer's handshake "
             "daemon (nothing to run).  `redis://host:port[/db]`, "
             "`etcd://host:port[,host:port...]`, `http://host[:port][/path]` (GET/PUT/DELETE "
             "`?key=`, see docs/protocol.md; no TLS): a shared store."},
     .what = "p2p, redis://host:port[/db], etcd://host:port[,host:port...] or "
             "http://host[:port][/path]",
     .valid = cfg_valid_metadata, .off = F(metadata), .doc_type = "URI"},
    {.opt = {"cluster_id", TERN_OPT_STRING, 0, 0, NULL, "default",
             "Keeps several clusters apart in one shared store (keys "
             "`tern/<cluster_id>/segments/<name>`)."},
     .what = "a name of 1..64 characters from A-Z a-z 0-9 . _ -", .valid = ok_cluster_id,
     .off = F(cluster_id), .doc_type = "name"},
    {.opt = {"transports", TERN_OPT_STRING_LIST, 1, CFG_MAX_TRANSPORTS, NULL, "[{name: tcp}]",
             "Transports in order of preference; see below."},
     .what = "a list of at least one transport", .flags = CFGK_CUSTOM,
     .doc_type = "list of entries"},
    {.opt = {"plugin_path", TERN_OPT_STRING_LIST, 0, 0, NULL, "[]",
             "Extra directories searched for `libtern-<name>.so`.  `$TERN_PLUGIN_PATH` is put "
             "in front."},
     .what = "a list of directories", .item_what = "a directory", .off = F(plugin_path),
     .count_off = F(nplugin_path), .env = "TERN_PLUGIN_PATH",
     .env_bit = TERN_CFG_ENV_PLUGIN_PATH, .env_count_off = F(nplugin_path_env),
     .doc_type = "list of directories"},
    {.opt = {"topology", TERN_OPT_STRING, 0, 0, NULL, "auto",
             "`auto` reads the PCIe/NUMA topology from sysfs; otherwise the path of a JSON "
             "topology matrix (a regular file of at most 4 MiB)."},
     .what = "auto or the path of a JSON file", .off = F(topology), .doc_type = "`auto` or path"},
    {.opt = {"topology_sysfs_root", TERN_OPT_STRING, 0, 0, NULL, "/sys",
             "Root of sysfs for `topology: auto` (tests point it at fake trees)."},
     .what = "a directory", .off = F(topology_sysfs_root), .doc_type = "directory"},
    {.opt = {"devices", TERN_OPT_STRING_LIST, 0, 0, NULL, "[]",
             "Allow-list of NICs the engine may use, for every transport and for both "
             "`topology: auto` and a topology file (`mlx5_0`, `eth0`, ...); empty: all."},
     .what = "a list of device names", .item_what = "a device name (A-Z a-z 0-9 . _ -, at most 63)",
     .valid = ok_device, .off = F(device_allow), .count_off = F(ndevice_allow),
     .doc_type = "list of device names"},
    {.opt = {"select_policy", TERN_OPT_CHOICE, 0, 0, select_names, "random",
             "How a slice picks among equally preferred NICs."},
     .off = F(select_policy)},
    {.opt = {"slice_size", TERN_OPT_SIZE, SLICE_MIN, SLICE_MAX, NULL, "64K",
             "Bytes per slice.  A transport may set its own `slice_size` (e.g. `efa`'s), "
             "within the same range."},
     .off = F(slice_size)},
    {.opt = {"gpu_staging_buffers", TERN_OPT_INT, 1, 4096, NULL, "16",
             "Pinned host buffers per GPU (each the largest slice plus 16 KiB) through which "
             "GPU memory is staged for transports that cannot address it directly; a slice "
             "waits for a free one, the pool never grows past this."},
     .off = F(gpu_staging_buffers)},
    {.opt = {"huge_pages", TERN_OPT_CHOICE, 0, 0, huge_names, "off",
             "What registering host memory does to its pages, for the 2 MiB-aligned part "
             "of each region.  `off`: nothing.  `advise`: `madvise(MADV_HUGEPAGE)`, so pages "
             "faulted in later are transparent huge pages.  `collapse`: that, and "
             "`MADV_COLLAPSE` (Linux 6.1+), which turns the 4 KiB pages already there into "
             "huge pages during the call (a copy of the region).  A same-host peer's "
             "cross-memory attach pins this memory page by page, so huge pages make `shm` "
             "about twice as fast (docs/protocol.md, Page size).  A refusal is a warning; "
             "the registration stands with 4 KiB pages.  GPU memory and memory from "
             "`tern_alloc_memory` are left alone."},
     .off = F(huge_pages)},
    {.opt = {"retries", TERN_OPT_INT, 0, 16, NULL, "3",
             "Further attempts of a failed slice (on another path)."},
     .off = F(retries)},
    {.opt = {"log_level", TERN_OPT_CHOICE, 0, 0, level_names, "info",
             "Names in any case, or `0`..`3`."},
     .flags = CFGK_ALIASES, .off = F(log_level), .env = "TERN_LOG_LEVEL",
     .env_bit = TERN_CFG_ENV_LOG_LEVEL},
    {.opt = {"log_format", TERN_OPT_CHOICE, 0, 0, format_names, "text",
             "`text`: `2026-12-03T18:00:00.123Z warn tern[host:port] tid=1234: message` (UTC "
             "time with milliseconds, level, engine name, thread id).  `json`: one object a "
             "line, `{\"time\", \"level\", \"engine\", \"thread\", \"msg\"}`, for log "
             "collectors.  A log hook (docs/api.md, Logging) receives the lines instead."},
     .off = F(log_format), .env = "TERN_LOG_FORMAT", .env_bit = TERN_CFG_ENV_LOG_FORMAT},
    {.opt = {"handshake_max_frame", TERN_OPT_SIZE, 4 << 10, 64 << 20, NULL, "1M",
             "Largest handshake/metadata frame accepted."},
     .off = F(handshake_max_frame)},
    {.opt = {"connect_timeout_ms", TERN_OPT_INT, 1, TIMEOUT_MAX, NULL, "5000",
             "Deadline for connecting to a peer, in ms."},
     .off = F(connect_timeout_ms)},
    {.opt = {"io_timeout_ms", TERN_OPT_INT, 1, TIMEOUT_MAX, NULL, "2000",
             "Deadline for one network exchange (handshake, metadata, a transport's waits), "
             "in ms.  A peer that stops answering fails a request within 2 x io_timeout_ms "
             "(docs/configuration.md, Stalled peers)."},
     .off = F(io_timeout_ms)},
    {.opt = {"endpoint_cache", TERN_OPT_INT, 1, 65536, NULL, "256",
             "Capacity of the endpoint cache (endpoints kept open)."},
     .flags = CFGK_U64, .off = F(endpoint_cache)},
    {.opt = {"eviction", TERN_OPT_CHOICE, 0, 0, evict_names, "sieve",
             "Which endpoint the cache closes when full."},
     .off = F(eviction)},
    {.opt = {"auth_secret_file", TERN_OPT_STRING, 0, 0, NULL, NULL,
             "A regular file holding a shared secret (16..4096 bytes; trailing spaces and "
             "newlines are stripped; e.g. `head -c 32 /dev/urandom | base64 > secret`).  When "
             "set, every handshake-daemon request and every TCP data connection proves "
             "knowledge of it both ways (HMAC-SHA256 over fresh random nonces, constant-time "
             "compare); a peer without it is refused on both sides and can neither read nor "
             "write.  Every descriptor published (any store) is signed with it, bound to "
             "the segment name and generation, and only descriptors so signed are used; the "
             "data-plane and same-host proofs name both segments, and a descriptor pointing "
             "at Mooncake's data format is refused (docs/protocol.md, Signed descriptors).  "
             "All engines of a cluster need the same file.  Unset (or `null`): no "
             "authentication, and the wire is exactly the unauthenticated protocol."},
     .what = "the path of a file", .flags = CFGK_NULLABLE, .off = F(auth_secret_file),
     .doc_type = "path"},
    {.opt = {"handshake_addresses", TERN_OPT_CHOICE, 0, 0, hs_addr_names, "auto",
             "Where the handshake daemon answers when `server_name` is one NIC's address: "
             "`one`, that address only; `all`, also the same port on every other address "
             "of that family the host's up, non-loopback interfaces hold, listed in the "
             "descriptor so peers reach the daemon while any NIC is up; `auto`, `all` when "
             "the port is 0 (an ephemeral port no other engine asked for), else `one` (several "
             "engines of a host may use one fixed port, each on its own address)."},
     .off = F(handshake_addresses)},
    {.opt = {"handshake_confirm", TERN_OPT_BOOL, 0, 0, NULL, "true",
             "`true`: a Connection frame brings up a passive endpoint only after the segment "
             "it names confirms it sent it (docs/protocol.md, Connection confirmation).  "
             "`false` (for clusters with Mooncake Transfer Engine peers, which cannot "
             "confirm): a frame whose named segment cannot confirm is accepted, with a WARN "
             "once per peer; every other check stays, a segment that answers \"not sent by "
             "me\" is still refused, and an endpoint this engine brought up itself is never "
             "replaced.  "
             "Anyone who can reach the handshake port can then open an endpoint to this "
             "engine's registered memory under a name of its choosing: use it only where "
             "every host that reaches the handshake port is trusted (docs/configuration.md, "
             "Mixing tern and Mooncake engines)."},
     .off = F(handshake_confirm)},
    {.opt = {"stats", TERN_OPT_BOOL, 0, 0, NULL, "true",
             "Count statistics: bytes, requests, failures, retries, latency per engine, "
             "transport and peer (`tern_engine_stats()`, `Engine.stats()`, "
             "docs/metrics.md).  Counting takes no lock; `false` leaves every counter at 0 "
             "(and `metrics_listen` serves zeros)."},
     .off = F(stats)},
    {.opt = {"metrics_listen", TERN_OPT_STRING, 0, 0, NULL, NULL,
             "Serve the statistics in the Prometheus text format at "
             "`http://host:port/metrics` (one thread, docs/metrics.md); port 0 picks a free "
             "port (logged at info).  Unset (or `null`): no endpoint.  Anyone who reaches the "
             "port reads the counters and the peers' names: bind it to loopback or a "
             "monitoring network."},
     .what = "host:port (port 0..65535; [addr] for IPv6)", .valid = ok_server_name,
     .flags = CFGK_NULLABLE, .off = F(metrics_listen), .doc_type = "`host:port`"},
};
const size_t cfg_nkeys = sizeof cfg_keys / sizeof cfg_keys[0];

const cfg_key *cfg_key_find(const char *name)
{
    for (size_t i = 0; i < cfg_nkeys; i++)
        if (!strcmp(cfg_keys[i].opt.key, name))
            return &cfg_keys[i];
    return NULL;
}
