/* core/plugin/plugin_kinds.c: the two kinds of plugin the loader knows (transports,
 * include/tern/transport.h; metadata stores, include/tern/metastore.h):
 * their files, symbols, mandatory operations, and the core's default for
 * every optional operation.  A default stands in for an operation the
 * plugin left NULL or that its struct_size does not cover, so the core
 * calls through the table without testing: it answers "not supported", or
 * does nothing where nothing is the meaning (docs/plugins.md, "Optional
 * operations"). */
#include <stddef.h>
#include <stdio.h>

#include "plugin/plugin_load.h"
#include "tern/metastore.h"
#include "tern/transport.h"

/* Both tables start with the members tern_plugin_head reads. */
#define SAME_HEAD(type, member, head_member)                                                    \
    _Static_assert(offsetof(type, member) == offsetof(tern_plugin_head, head_member) &&         \
                       sizeof(((type *)0)->member) == sizeof(((tern_plugin_head *)0)->head_member), \
                   #type "." #member " is not where tern_plugin_head reads it")
SAME_HEAD(tern_transport, magic, magic);
SAME_HEAD(tern_transport, struct_size, struct_size);
SAME_HEAD(tern_transport, abi_major, abi_major);
SAME_HEAD(tern_transport, abi_minor, abi_minor);
SAME_HEAD(tern_transport, name, name);
SAME_HEAD(tern_transport, version, version);
SAME_HEAD(tern_metastore, magic, magic);
SAME_HEAD(tern_metastore, struct_size, struct_size);
SAME_HEAD(tern_metastore, abi_major, abi_major);
SAME_HEAD(tern_metastore, abi_minor, abi_minor);
SAME_HEAD(tern_metastore, scheme, name);
SAME_HEAD(tern_metastore, version, version);

/* ---- transports ------------------------------------------------------------------ */

/* No ep_reset: the core closes the endpoint and opens a new one. */
static int default_ep_reset(void *ep)
{
    (void)ep;
    return TERN_ERR_NOT_SUPPORTED;
}

/* No query: tern-info shows no status text. */
static int default_query(void *ctx, const char *what, char *out, size_t outlen)
{
    (void)ctx;
    (void)what;
    if (out && outlen)
        out[0] = '\0';
    return TERN_ERR_NOT_SUPPORTED;
}

/* No poll (ABI 1.1 and later): slices come back through complete(), and
 * the core runs no poll thread for the plugin (tern_plugin.polls). */
static int default_poll(void *ctx, tern_slice **done, int max, int timeout_ms)
{
    (void)ctx;
    (void)done;
    (void)max;
    (void)timeout_ms;
    return TERN_ERR_NOT_SUPPORTED;
}

/* No ep_describe (a transport without TERN_CAP_HANDSHAKE): no fields. */
static int default_ep_describe(void *ep, tern_desc *out)
{
    (void)ep;
    (void)out;
    return 0;
}

static void transport_defaults(void *copy)
{
    tern_transport *t = copy;
    /* Neither operation declared: a 1.0 plugin (the core did not read the
     * bits then), taken to do both (<tern/transport.h>, capability bits). */
    if (!(t->caps & (TERN_CAP_READ | TERN_CAP_WRITE)))
        t->caps |= TERN_CAP_READ | TERN_CAP_WRITE;
    if (!t->poll)
        t->poll = default_poll;
    if (!t->ep_describe)
        t->ep_describe = default_ep_describe;
    if (!t->ep_reset)
        t->ep_reset = default_ep_reset;
    if (!t->query)
        t->query = default_query;
}

/* poll may be left out only by a plugin built for ABI 1.1 or later;
 * ep_describe only by one that does not handshake. */
static int transport_check(const void *table, char *why, size_t whylen)
{
    const tern_transport *t = table;
    if (!t->poll && t->abi_minor < 1) {
        snprintf(why, whylen, "mandatory operation 'poll' is NULL (a plugin may leave it out "
                 "only when built for ABI 1.1 or later, handing slices back through the host "
                 "service complete())");
        return -1;
    }
    if (!t->ep_describe && (t->caps & TERN_CAP_HANDSHAKE)) {
        snprintf(why, whylen, "operation 'ep_describe' is NULL but the plugin sets "
                 "TERN_CAP_HANDSHAKE, which needs it");
        return -1;
    }
    return 0;
}

#define OP(type, m) {#m, offsetof(type, m)}
static const tern_plugin_op transport_mandatory[] = {
    OP(tern_transport, init),        OP(tern_transport, fini),
    OP(tern_transport, devices),     OP(tern_transport, mr_register),
    OP(tern_transport, mr_deregister), OP(tern_transport, segment_describe),
    OP(tern_transport, ep_open),     OP(tern_transport, ep_connect),
    OP(tern_transport, ep_close),    OP(tern_transport, submit),
};

const tern_plugin_kind tern_transport_kind = {
    .what = "transport",
    .prefix = "libtern-",
    .symbol = TERN_TRANSPORT_SYMBOL,
    .magic = TERN_TRANSPORT_MAGIC,
    .abi_major = TERN_TRANSPORT_ABI_MAJOR,
    .min_size = TERN_TRANSPORT_V1_0_SIZE,
    .size = sizeof(tern_transport),
    .mandatory = transport_mandatory,
    .nmandatory = sizeof transport_mandatory / sizeof transport_mandatory[0],
    .name_hint = "check the entry's name and path",
    .search_hint = "set `path` in the entry, TERN_PLUGIN_PATH or plugin_path",
    .check = transport_check,
    .fill_defaults = transport_defaults,
};

/* ---- metadata stores ---------------------------------------------------------------- */

/* No put_ttl (ABI 1.0): the keep-alive checks the entry and puts it back
 * when the store lost it (docs/protocol.md, Metadata store entries). */
static int default_put_ttl(void *store, const char *key, const char *value, size_t len,
                           int ttl_s, char *err, size_t errlen)
{
    (void)store;
    (void)key;
    (void)value;
    (void)len;
    (void)ttl_s;
    if (err && errlen)
        snprintf(err, errlen, "the plugin has no put_ttl (metadata store ABI 1.0)");
    return TERN_ERR_NOT_SUPPORTED;
}

static void metastore_defaults(void *copy)
{
    tern_metastore *m = copy;
    if (!m->put_ttl)
        m->put_ttl = default_put_ttl;
}

static const tern_plugin_op metastore_mandatory[] = {
    OP(tern_metastore, open), OP(tern_metastore, close), OP(tern_metastore, get),
    OP(tern_metastore, put),  OP(tern_metastore, del),   OP(tern_metastore, list),
};
#undef OP

const tern_plugin_kind tern_metastore_kind = {
    .what = "metadata store",
    .prefix = "libtern-meta-",
    .symbol = TERN_METASTORE_SYMBOL,
    .magic = TERN_METASTORE_MAGIC,
    .abi_major = TERN_METASTORE_ABI_MAJOR,
    .min_size = offsetof(tern_metastore, put_ttl),
    .size = sizeof(tern_metastore),
    .mandatory = metastore_mandatory,
    .nmandatory = sizeof metastore_mandatory / sizeof metastore_mandatory[0],
    .name_hint = "check the scheme of the `metadata` URI",
    .search_hint = "install the store's plugin, or set TERN_PLUGIN_PATH or plugin_path",
    .check = NULL,
    .fill_defaults = metastore_defaults,
};
