/* tern: the metadata-store plugin ABI.
 *
 * A shared store (Redis, etcd, ...) holds segment descriptors under keys
 * "tern/<cluster-id>/segments/<segment-name>".  A backend is a shared object
 * "libtern-meta-<scheme>.so" exporting one const data symbol
 * TERN_METASTORE_SYMBOL of type `const tern_metastore`, chosen by the URI
 * scheme of the `metadata` configuration key (redis://, etcd://, ...).  The
 * p2p backend is built into the core and needs no plugin.
 *
 * Same versioning rules as tern_transport (transport.h): magic and abi_major
 * checked before any code runs, struct_size covers appended members, all
 * listed operations are mandatory.  Every call may block up to the engine's
 * I/O timeout and must then fail with TERN_ERR_TIMEOUT or TERN_ERR_CONNECT,
 * never hang.  Calls may come from several threads at once.
 *
 * ABI 1.1 appends put_ttl (optional: when struct_size does not cover it or
 * it is NULL, the core writes with put and checks the entry instead).
 * Entries written with it expire unless refreshed, so a dead engine's
 * segment disappears; the core calls it again every keep-alive period,
 * which also puts the entry back in a store that restarted empty.  See
 * docs/protocol.md, "Metadata store entries".
 */
#ifndef TERN_METASTORE_H
#define TERN_METASTORE_H

#include <stddef.h>
#include <stdint.h>

#include "tern/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TERN_METASTORE_MAGIC 0x4154454D4E524554ULL /* "TERNMETA" */
#define TERN_METASTORE_ABI_MAJOR 1
#define TERN_METASTORE_ABI_MINOR 1
#define TERN_METASTORE_SYMBOL "tern_metastore_v1"
/* In the plugin:
 *   TERN_METASTORE_EXPORT const tern_metastore tern_metastore_v1 = {
 *       TERN_METASTORE_HEAD("etcd", "1.1"), .open = ..., ...};
 * HEAD spells out magic, struct_size, the ABI of these headers, the URI
 * scheme it serves and the plugin's own version. */
#define TERN_METASTORE_EXPORT __attribute__((visibility("default")))
#define TERN_METASTORE_HEAD(scheme_, version_)                                          \
    .magic = TERN_METASTORE_MAGIC, .struct_size = sizeof(tern_metastore),              \
    .abi_major = TERN_METASTORE_ABI_MAJOR, .abi_minor = TERN_METASTORE_ABI_MINOR,      \
    .scheme = (scheme_), .version = (version_)
/* The largest value get() may return: a segment descriptor, bounded as one
 * fetched over the handshake is (the handshake's default max frame is this
 * constant).  A plugin refuses a larger value with TERN_ERR_PROTOCOL
 * instead of buffering it. */
#define TERN_METASTORE_MAX_VALUE (1u << 20)

/* Called once per key by list(); return non-zero to stop early. */
typedef int (*tern_metastore_list_cb)(void *arg, const char *key,
                                      const char *value, size_t len);

typedef struct tern_metastore {
    uint64_t magic;           /* TERN_METASTORE_MAGIC */
    uint32_t struct_size;     /* sizeof(tern_metastore) when built */
    uint16_t abi_major, abi_minor;
    const char *scheme;       /* "redis", "etcd" */
    const char *version;

    /* Connect to the store named by uri; *store is the plugin's handle. */
    int (*open)(const char *uri, int timeout_ms, void **store, char *err, size_t errlen);
    void (*close)(void *store);
    /* *value is malloc()ed by the plugin and freed by the caller with free(). */
    int (*get)(void *store, const char *key, char **value, size_t *len,
               char *err, size_t errlen);          /* TERN_ERR_NOT_FOUND if absent */
    int (*put)(void *store, const char *key, const char *value, size_t len,
               char *err, size_t errlen);
    int (*del)(void *store, const char *key, char *err, size_t errlen);
    int (*list)(void *store, const char *prefix, tern_metastore_list_cb cb,
                void *arg, char *err, size_t errlen);

    /* ---- appended in ABI 1.1 (optional) ---- */
    /* Write key = value so that it disappears ttl_s seconds after the last
     * put_ttl of that key (redis: SET .. EX; etcd: a lease, kept alive and
     * re-granted when the store lost it).  A later plain del removes it. */
    int (*put_ttl)(void *store, const char *key, const char *value, size_t len, int ttl_s,
                   char *err, size_t errlen);
} tern_metastore;

#ifdef __cplusplus
}
#endif
#endif
