/* core/mooncake_desc.c: reading a Mooncake Transfer Engine's segment
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
 *     buffer, and a "transports" entry whose address blob sends the tcp
 *     transport to tcp_data_port in Mooncake's data format, version
 *     tcp_proto_version (1 when absent).
 * RDMA descriptors already carry devices, keys and a priority_matrix in
 * the shape tern reads; only the first two rules apply to them. */
#include "mooncake_desc.h"

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

/* "host:port" or "[v6]:port" -> host (what the tcp transport connects to). */
static void host_of(const char *name, char *out, size_t outlen)
{
    const char *end = strrchr(name, ':');
    const char *start = name;
    if (name[0] == '[') {
        start = name + 1;
        end = strchr(name, ']');
    }
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, start, n);
    out[n] = '\0';
}

/* The tcp transport's address blob for a Mooncake peer. */
static json_object *tcp_addr(json_object *root)
{
    json_object *a = json_object_new_object();
    json_object *name = get(root, "name"), *port = get(root, "tcp_data_port");
    json_object *ver = get(root, "tcp_proto_version");
    char host[256] = "";
    if (name && json_object_is_type(name, json_type_string))
        host_of(json_object_get_string(name), host, sizeof host);
    json_object_object_add(a, "host", json_object_new_string(host));
    if (port && json_object_is_type(port, json_type_int) && json_object_get_int64(port) > 0 &&
        json_object_get_int64(port) <= 65535)
        json_object_object_add(a, "port", json_object_new_uint64((uint64_t)json_object_get_int64(port)));
    int64_t v = ver && json_object_is_type(ver, json_type_int) ? json_object_get_int64(ver) : 1;
    json_object_object_add(a, "wire", json_object_new_string("mooncake"));
    json_object_object_add(a, "version", json_object_new_uint64(v >= 2 ? 2 : 1));
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
    json_object_object_add(t, "addr", tcp_addr(root));
    json_object_array_add(arr, t);
    json_object_object_add(root, "transports", arr);
}

