/* core/desc/mooncake_desc.c: reading a Mooncake Transfer Engine's segment
 * descriptor (docs/protocol.md, "Mooncake compatibility").
 *
 * A descriptor without "transports" is in Mooncake's shape.  Before the
 * ordinary decoder (desc.c) reads it, this file rewrites the parsed JSON
 * in place into what tern's decoder expects, so there is one decoder and
 * one set of checks:
 *   - "timestamp" as a string (Mooncake writes its local time as text, new
 *     at every fetch): replaced by a 64-bit hash of the rest of the
 *     descriptor, so tern's generation check (segments.c) sees a change
 *     exactly when the content changed.
 *   - a buffer "name" longer than a location (Mooncake's TCP transport
 *     puts the segment name there): replaced by "*", the location that
 *     stands for "unknown".
 *   - "protocol": "tcp" without devices or priority_matrix: one pseudo device,
 *     "mooncake-tcp", reachable from every location ("*"), a zero key per
 *     buffer, and a "transports" entry for the transport named "tcp"
 *     whose address blob says "wire": "mooncake" and carries the
 *     descriptor's own top-level fields; that transport reads
 *     tcp_data_port and tcp_proto_version from them itself.
 * RDMA descriptors already carry devices, keys and a priority_matrix in
 * the shape tern reads; only the first two rules apply to them. */
#include "desc/mooncake_desc.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MC_TCP_DEVICE "mooncake-tcp"

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static void fix_buffers(json_object *root, int add_keys, size_t location_max)
{
    json_object *bufs = get(root, "buffers");
    if (!bufs || !json_object_is_type(bufs, json_type_array))
        return;
    size_t n = json_object_array_length(bufs);
    for (size_t i = 0; i < n; i++) {
        json_object *b = json_object_array_get_idx(bufs, i);
        if (!json_object_is_type(b, json_type_object))
            continue; /* the decoder names it */
        json_object *name = get(b, "name");
        if (name && json_object_is_type(name, json_type_string) &&
            strlen(json_object_get_string(name)) >= location_max)
            json_object_object_add(b, "name", json_object_new_string("*"));
        if (add_keys && !get(b, "lkey") && !get(b, "rkey")) {
            json_object *l = json_object_new_array(), *r = json_object_new_array();
            json_object_array_add(l, json_object_new_uint64(0));
            json_object_array_add(r, json_object_new_uint64(0));
            json_object_object_add(b, "lkey", l);
            json_object_object_add(b, "rkey", r);
        }
    }
}

static json_object *tcp_devices(void)
{
    json_object *devs = json_object_new_array(), *d = json_object_new_object();
    json_object_object_add(d, "name", json_object_new_string(MC_TCP_DEVICE));
    json_object_array_add(devs, d);
    return devs;
}

static json_object *tcp_matrix(void)
{
    json_object *m = json_object_new_object(), *lists = json_object_new_array();
    json_object *pref = json_object_new_array();
    json_object_array_add(pref, json_object_new_string(MC_TCP_DEVICE));
    json_object_array_add(lists, pref);
    json_object_array_add(lists, json_object_new_array());
    json_object_object_add(m, "*", lists);
    return m;
}

/* The address blob of the transport named like the descriptor's protocol:
 * "wire" (the one key the core reserves in a blob, docs/plugins.md) names
 * Mooncake's data format, and the descriptor's own scalar top-level fields
 * (name, tcp_data_port, tcp_proto_version, ...) follow as they are, for
 * that transport to read: the core does not interpret them for it. */
static json_object *foreign_addr(json_object *root)
{
    json_object *a = json_object_new_object();
    json_object_object_add(a, "wire", json_object_new_string("mooncake"));
    json_object_object_foreach(root, key, val)
    {
        if (strcmp(key, "wire") != 0 &&
            (json_object_is_type(val, json_type_string) || json_object_is_type(val, json_type_int)))
            json_object_object_add(a, key, json_object_get(val));
    }
    return a;
}

/* FNV-1a of the descriptor's text (timestamp removed): tern's generation
 * of a peer descriptor, which changes exactly when the content does. */
static uint64_t content_hash(json_object *root)
{
    const char *txt = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)txt; p && *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h ? h : 1;
}

int tern_mooncake_desc_is(const json_object *root)
{
    return root && json_object_is_type(root, json_type_object) &&
           !json_object_object_get_ex(root, "transports", NULL);
}

void tern_mooncake_desc_normalize(json_object *root, size_t location_max)
{
    if (!tern_mooncake_desc_is(root))
        return;
    json_object *ts = get(root, "timestamp");
    if (ts && !json_object_is_type(ts, json_type_int)) {
        json_object_object_del(root, "timestamp");
        json_object_object_add(root, "timestamp", json_object_new_uint64(content_hash(root)));
    }
    json_object *proto = get(root, "protocol");
    int tcp = proto && json_object_is_type(proto, json_type_string) &&
              strcmp(json_object_get_string(proto), "tcp") == 0 && !get(root, "priority_matrix") &&
              !get(root, "devices");
    fix_buffers(root, tcp, location_max);
    if (!tcp)
        return;
    json_object *t = json_object_new_object(), *arr = json_object_new_array();
    json_object_object_add(t, "name", json_object_new_string("tcp"));
    json_object_object_add(t, "devices", tcp_devices());
    json_object_object_add(t, "priority_matrix", tcp_matrix());
    json_object_object_add(t, "addr", foreign_addr(root));
    json_object_array_add(arr, t);
    json_object_object_add(root, "transports", arr);
}

