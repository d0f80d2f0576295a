/* core/desc/segment_desc.c: the segment descriptor (segment_desc.h, "Segment
 * descriptor JSON"): encoding, strict decoding with the failing key named,
 * and the lookups the data path makes in a peer's descriptor. */
#include "desc/segment_desc.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/client.h"
#include "desc/desc_json.h"
#include "desc/mooncake_desc.h"
#include "host/topology.h"
#include "base/util.h"

#define AS_JSON(d) ((json_object *)(d))
#define TERN_DESC_MAX_PUBLISH 32 /* keys dropped per pass (drop_publish_keys) */

/* ---- encoding helpers ---- */

static json_object *u64_array(const uint64_t *v, int n)
{
    json_object *a = json_object_new_array_ext(n > 0 ? n : 1);
    for (int i = 0; i < n; i++)
        json_object_array_add(a, json_object_new_uint64(v[i]));
    return a;
}

static json_object *devices_json(const tern_device_desc *d, size_t n)
{
    json_object *a = json_object_new_array_ext(n ? (int)n : 1);
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(d[i].name));
        json_object_object_add(o, "lid", json_object_new_uint64(d[i].lid));
        json_object_object_add(o, "gid", json_object_new_string(d[i].gid));
        json_object_array_add(a, o);
    }
    return a;
}

static const char publish_prefix[] = "publish.";

static int is_publish_key(const char *key)
{
    return strncmp(key, publish_prefix, sizeof publish_prefix - 1) == 0;
}

/* Top-level keys that are the descriptor's own structure: a transport
 * cannot publish over them. */
static int core_owned_key(const char *key)
{
    static const char *const own[] = {"name",       "protocol",        "devices",
                                      "buffers",    "priority_matrix", "timestamp",
                                      "transports", "handshake_addrs"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(key, own[i]) == 0)
            return 1;
    return 0;
}

/* Whether a published value may take the place of the top-level key:
 * tcp_data_port is also read by the core's decoder (a port number), so a
 * transport publishing something else there would make the descriptor
 * unreadable to every peer. */
static int publishable(const char *key, json_object *val)
{
    if (core_owned_key(key))
        return 0;
    if (strcmp(key, "tcp_data_port") == 0)
        return json_object_is_type(val, json_type_int) && json_object_get_int64(val) >= 0 &&
               json_object_get_int64(val) <= UINT16_MAX;
    return 1;
}

/* A transport's address blob as encoded, without its "publish.<key>"
 * members: each of those becomes the descriptor's top-level <key> instead
 * (docs/plugins.md, "What a transport publishes"), the first transport in
 * preference order winning; `lifted` remembers which keys were taken. */
static json_object *addr_json(json_object *root, const tern_desc *blob, json_object *lifted)
{
    json_object *out = json_object_new_object();
    if (!blob)
        return out;
    json_object_object_foreach(AS_JSON(blob), key, val)
    {
        if (!is_publish_key(key)) {
            json_object *copy = NULL;
            if (json_object_deep_copy(val, &copy, NULL) == 0)
                json_object_object_add(out, key, copy);
            continue;
        }
        const char *top = key + sizeof publish_prefix - 1;
        if (!*top || !publishable(top, val) || json_object_object_get_ex(lifted, top, NULL))
            continue;
        json_object *copy = NULL;
        if (json_object_deep_copy(val, &copy, NULL) == 0) {
            json_object_object_add(root, top, copy);
            json_object_object_add(lifted, top, NULL);
        }
    }
    return out;
}

/* The topology as a JSON object ({} when none). */
static json_object *matrix_json(const struct tern_topology *t)
{
    json_object *m = NULL;
    if (t) {
        char *s = tern_topology_to_json(t);
        if (s)
            m = json_tokener_parse(s);
        free(s);
    }
    return m ? m : json_object_new_object();
}

static json_object *buffer_json(const tern_buffer_desc *b, const char *first)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(b->location));
    if (b->app_name[0])
        json_object_object_add(o, "app_name", json_object_new_string(b->app_name));
    json_object_object_add(o, "addr", json_object_new_uint64(b->addr));
    json_object_object_add(o, "length", json_object_new_uint64(b->length));
    const tern_buffer_keys *k0 = first ? tern_buffer_find_keys(b, first) : NULL;
    if (!k0 && b->nkeys)
        k0 = &b->keys[0];
    json_object_object_add(o, "lkey", u64_array(k0 ? k0->lkey : NULL, k0 ? k0->ndev : 0));
    json_object_object_add(o, "rkey", u64_array(k0 ? k0->rkey : NULL, k0 ? k0->ndev : 0));
    json_object *keys = json_object_new_object();
    for (size_t i = 0; i < b->nkeys; i++) {
        json_object *kk = json_object_new_object();
        json_object_object_add(kk, "lkey", u64_array(b->keys[i].lkey, b->keys[i].ndev));
        json_object_object_add(kk, "rkey", u64_array(b->keys[i].rkey, b->keys[i].ndev));
        json_object_object_add(keys, b->keys[i].transport, kk);
    }
    json_object_object_add(o, "keys", keys);
    return o;
}

char *tern_segment_desc_encode(const tern_segment_desc *d)
{
    if (!d)
        return NULL;
    json_object *root = json_object_new_object();
    const tern_seg_transport *t0 = d->ntransports ? &d->transports[0] : NULL;
    json_object_object_add(root, "name", json_object_new_string(d->name));
    json_object_object_add(root, "protocol",
                           json_object_new_string(d->protocol[0] ? d->protocol
                                                  : t0       ? t0->name
                                                             : ""));
    json_object_object_add(root, "devices",
                           devices_json(t0 ? t0->devices : NULL, t0 ? t0->ndevices : 0));
    json_object *bufs = json_object_new_array_ext(d->nbuffers ? (int)d->nbuffers : 1);
    for (size_t i = 0; i < d->nbuffers; i++)
        json_object_array_add(bufs, buffer_json(&d->buffers[i], t0 ? t0->name : NULL));
    json_object_object_add(root, "buffers", bufs);
    json_object_object_add(root, "priority_matrix", matrix_json(t0 ? t0->topology : NULL));
    json_object_object_add(root, "tcp_data_port", json_object_new_uint64(d->tcp_data_port));
    if (d->n_hs_addrs) {
        json_object *ha = json_object_new_array_ext((int)d->n_hs_addrs);
        for (size_t i = 0; i < d->n_hs_addrs; i++)
            json_object_array_add(ha, json_object_new_string(d->hs_addrs[i]));
        json_object_object_add(root, "handshake_addrs", ha);
    }
    json_object_object_add(root, "timestamp", json_object_new_uint64(d->timestamp));
    json_object *ts = json_object_new_array_ext(d->ntransports ? (int)d->ntransports : 1);
    json_object *lifted = json_object_new_object();
    for (size_t i = 0; i < d->ntransports; i++) {
        const tern_seg_transport *t = &d->transports[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(t->name));
        json_object_object_add(o, "devices", devices_json(t->devices, t->ndevices));
        json_object_object_add(o, "priority_matrix", matrix_json(t->topology));
        json_object_object_add(o, "addr", addr_json(root, t->addr, lifted));
        json_object_array_add(ts, o);
    }
    json_object_object_add(root, "transports", ts);
    json_object_put(lifted);
    char *out = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return out;
}

/* ---- decoding ---- */

static int decode_devices(json_object *obj, const char *ppath, tern_device_desc **out,
                          size_t *n, char *err, size_t errlen)
{
    json_object *arr;
    char path[128];
    int rc = tern_json_member(obj, ppath, "devices", json_type_array, 0, &arr, err, errlen);
    *out = NULL;
    *n = 0;
    if (rc || !arr)
        return rc;
    size_t len = json_object_array_length(arr);
    snprintf(path, sizeof path, "%s%sdevices", ppath, *ppath ? "." : "");
    if (len > TERN_MAX_DEVICES)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "%s: %zu devices, at most %d", path,
                         len, TERN_MAX_DEVICES);
    if (!len)
        return 0;
    tern_device_desc *d = calloc(len, sizeof *d);
    if (!d)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < len && !rc; i++) {
        char ip[160];
        uint64_t lid = 0;
        json_object *o = json_object_array_get_idx(arr, i);
        snprintf(ip, sizeof ip, "%s[%zu]", path, i);
        if (!json_object_is_type(o, json_type_object)) {
            rc = tern_json_bad(err, errlen, ip, "an object", o);
            break;
        }
        rc = tern_json_get_str(o, ip, "name", 1, d[i].name, sizeof d[i].name, err, errlen);
        if (!rc)
            rc = tern_json_get_uint(o, ip, "lid", UINT16_MAX, 0, &lid, err, errlen);
        d[i].lid = (uint32_t)lid;
        if (!rc)
            rc = tern_json_get_gid(o, ip, "gid", d[i].gid, sizeof d[i].gid, err, errlen);
    }
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    *n = len;
    return 0;
}

/* priority_matrix -> topology (NULL for {} or absent). */
static int decode_matrix(json_object *obj, const char *ppath, const tern_device_desc *devs,
                         size_t ndev, struct tern_topology **out, char *err, size_t errlen)
{
    json_object *m;
    *out = NULL;
    int rc = tern_json_member(obj, ppath, "priority_matrix", json_type_object, 0, &m, err, errlen);
    if (rc || !m || json_object_object_length(m) == 0)
        return rc;
    tern_device_info *info = ndev ? calloc(ndev, sizeof *info) : NULL;
    if (ndev && !info)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "priority_matrix: out of memory");
    for (size_t i = 0; i < ndev; i++) {
        tern_strlcpy(info[i].name, devs[i].name, sizeof info[i].name);
        info[i].numa_node = -1;
        info[i].lid = devs[i].lid;
        tern_strlcpy(info[i].gid, devs[i].gid, sizeof info[i].gid);
    }
    char sub[256];
    rc = tern_topology_from_json(json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN),
                                 ndev ? info : NULL, (int)ndev, 0, out, sub, sizeof sub);
    free(info);
    if (rc)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "%s%spriority_matrix: %s", ppath,
                         *ppath ? "." : "", sub);
    return 0;
}

static int decode_keys(json_object *o, const char *path, const char *transport,
                       tern_buffer_keys *k, char *err, size_t errlen)
{
    size_t nl, nr;
    tern_strlcpy(k->transport, transport, sizeof k->transport);
    int rc = tern_json_get_uint_array(o, path, "lkey", UINT64_MAX, k->lkey, NULL, TERN_MAX_DEVICES,
                            &nl, err, errlen);
    if (!rc)
        rc = tern_json_get_uint_array(o, path, "rkey", UINT64_MAX, k->rkey, NULL, TERN_MAX_DEVICES,
                            &nr, err, errlen);
    if (!rc && nl != nr)
        rc = tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                       "%s: lkey has %zu entries but rkey has %zu", path, nl, nr);
    k->ndev = (int)nl;
    return rc;
}

static int decode_buffer(json_object *o, const char *path, const char *protocol,
                         tern_buffer_desc *b, char *err, size_t errlen)
{
    if (!json_object_is_type(o, json_type_object))
        return tern_json_bad(err, errlen, path, "an object", o);
    int rc = tern_json_get_str(o, path, "name", 1, b->location, sizeof b->location, err, errlen);
    if (!rc)
        rc = tern_json_get_str(o, path, "app_name", 0, b->app_name, sizeof b->app_name, err, errlen);
    if (!rc)
        rc = tern_json_get_uint(o, path, "addr", UINT64_MAX, 1, &b->addr, err, errlen);
    if (!rc)
        rc = tern_json_get_uint(o, path, "length", UINT64_MAX, 1, &b->length, err, errlen);
    if (rc)
        return rc;
    if (b->length > UINT64_MAX - b->addr)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "%s: addr 0x%" PRIx64 " + length %" PRIu64 " overflows 64 bits", path,
                         b->addr, b->length);
    json_object *keys;
    rc = tern_json_member(o, path, "keys", json_type_object, 0, &keys, err, errlen);
    if (rc)
        return rc;
    size_t nk = keys ? (size_t)json_object_object_length(keys) : 0;
    if (nk > TERN_DESC_MAX_TRANSPORTS)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "%s.keys: %zu transports, at most %d",
                         path, nk, TERN_DESC_MAX_TRANSPORTS);
    /* Reference descriptors carry only lkey/rkey: they belong to "protocol". */
    b->keys = calloc(nk ? nk : 1, sizeof *b->keys);
    if (!b->keys)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s: out of memory", path);
    if (!keys) {
        b->nkeys = 1;
        return decode_keys(o, path, protocol, &b->keys[0], err, errlen);
    }
    json_object_object_foreach(keys, name, kv)
    {
        char kp[224];
        snprintf(kp, sizeof kp, "%s.keys.%s", path, name);
        if (strlen(name) >= TERN_NAME_MAX)
            return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "%s: transport name longer than %d bytes", kp, TERN_NAME_MAX - 1);
        if (!json_object_is_type(kv, json_type_object))
            return tern_json_bad(err, errlen, kp, "an object", kv);
        rc = decode_keys(kv, kp, name, &b->keys[b->nkeys++], err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

static int cmp_buffer(const void *a, const void *b)
{
    const tern_buffer_desc *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int decode_buffers(json_object *root, tern_segment_desc *d, char *err, size_t errlen)
{
    json_object *arr;
    int rc = tern_json_member(root, "", "buffers", json_type_array, 1, &arr, err, errlen);
    if (rc)
        return rc;
    size_t n = json_object_array_length(arr);
    if (n > TERN_DESC_MAX_BUFFERS)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "buffers: %zu buffers, at most %d", n,
                         TERN_DESC_MAX_BUFFERS);
    d->buffers = calloc(n ? n : 1, sizeof *d->buffers);
    if (!d->buffers)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "buffers: out of memory");
    for (size_t i = 0; i < n; i++) {
        char path[32];
        snprintf(path, sizeof path, "buffers[%zu]", i);
        d->nbuffers = i + 1; /* so free() sees the partly decoded one */
        rc = decode_buffer(json_object_array_get_idx(arr, i), path, d->protocol,
                           &d->buffers[i], err, errlen);
        if (rc)
            return rc;
    }
    qsort(d->buffers, n, sizeof *d->buffers, cmp_buffer);
    for (size_t i = 1; i < n; i++)
        if (d->buffers[i].addr < d->buffers[i - 1].addr + d->buffers[i - 1].length)
            return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "buffers: [0x%" PRIx64 ", +%" PRIu64 ") overlaps [0x%" PRIx64
                             ", +%" PRIu64 ")",
                             d->buffers[i].addr, d->buffers[i].length,
                             d->buffers[i - 1].addr, d->buffers[i - 1].length);
    return 0;
}

/* An encoder lifts every "publish.<key>" out of a blob, so one left in a
 * received blob was not written by a tern encoder: dropped, so that the
 * descriptor encodes again to what was read (nothing a peer sends can
 * reach the top level of a descriptor this side writes). */
static void drop_publish_keys(json_object *blob)
{
    const char *drop[TERN_DESC_MAX_PUBLISH];
    size_t n;
    do {
        n = 0;
        json_object_object_foreach(blob, key, val)
        {
            (void)val;
            if (is_publish_key(key) && n < TERN_DESC_MAX_PUBLISH)
                drop[n++] = key;
        }
        for (size_t i = 0; i < n; i++)
            json_object_object_del(blob, drop[i]);
    } while (n == TERN_DESC_MAX_PUBLISH);
}

static int decode_transport(json_object *o, const char *path, tern_seg_transport *t,
                            char *err, size_t errlen)
{
    if (!json_object_is_type(o, json_type_object))
        return tern_json_bad(err, errlen, path, "an object", o);
    int rc = tern_json_get_str(o, path, "name", 1, t->name, sizeof t->name, err, errlen);
    if (!rc)
        rc = decode_devices(o, path, &t->devices, &t->ndevices, err, errlen);
    if (!rc)
        rc = decode_matrix(o, path, t->devices, t->ndevices, &t->topology, err, errlen);
    json_object *addr = NULL;
    if (!rc)
        rc = tern_json_member(o, path, "addr", json_type_object, 0, &addr, err, errlen);
    if (!rc && addr) {
        json_object *copy = NULL;
        if (json_object_deep_copy(addr, &copy, NULL) != 0)
            return tern_errf(err, errlen, TERN_ERR_NOMEM, "%s.addr: out of memory", path);
        drop_publish_keys(copy);
        t->addr = (tern_desc *)copy;
    }
    return rc;
}

static int decode_transports(json_object *root, tern_segment_desc *d, char *err, size_t errlen)
{
    json_object *arr;
    int rc = tern_json_member(root, "", "transports", json_type_array, 0, &arr, err, errlen);
    if (rc)
        return rc;
    size_t n = arr ? json_object_array_length(arr) : 0;
    if (n > TERN_DESC_MAX_TRANSPORTS)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL, "transports: %zu entries, at most %d",
                         n, TERN_DESC_MAX_TRANSPORTS);
    if (!arr) { /* a reference descriptor: one transport from the top level */
        d->transports = calloc(1, sizeof *d->transports);
        if (!d->transports)
            return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
        d->ntransports = 1;
        tern_seg_transport *t = &d->transports[0];
        tern_strlcpy(t->name, d->protocol, sizeof t->name);
        rc = decode_devices(root, "", &t->devices, &t->ndevices, err, errlen);
        if (!rc)
            rc = decode_matrix(root, "", t->devices, t->ndevices, &t->topology, err, errlen);
        return rc;
    }
    d->transports = calloc(n ? n : 1, sizeof *d->transports);
    if (!d->transports)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "transports: out of memory");
    for (size_t i = 0; i < n; i++) {
        char path[32];
        snprintf(path, sizeof path, "transports[%zu]", i);
        d->ntransports = i + 1;
        rc = decode_transport(json_object_array_get_idx(arr, i), path, &d->transports[i], err,
                              errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* "handshake_addrs" (optional): at most TERN_DESC_MAX_HS_ADDRS strings of
 * the form host:port; the segment's name stays where requests go first. */
static int decode_hs_addrs(json_object *root, tern_segment_desc *d, char *err, size_t errlen)
{
    json_object *arr;
    char path[64], host[TERN_DESC_HS_ADDR_MAX];
    uint16_t port = 0;
    int rc = tern_json_member(root, "", "handshake_addrs", json_type_array, 0, &arr, err, errlen);
    if (rc || !arr)
        return rc;
    size_t n = json_object_array_length(arr);
    if (n > TERN_DESC_MAX_HS_ADDRS)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "handshake_addrs: %zu addresses, at most %d", n, TERN_DESC_MAX_HS_ADDRS);
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(arr, i);
        snprintf(path, sizeof path, "handshake_addrs[%zu]", i);
        if (!json_object_is_type(v, json_type_string) ||
            (size_t)json_object_get_string_len(v) >= TERN_DESC_HS_ADDR_MAX ||
            tern_split_host_port(json_object_get_string(v), host, sizeof host, &port) != 0 ||
            !port)
            return tern_json_bad(err, errlen, path, "\"host:port\"", v);
        tern_strlcpy(d->hs_addrs[d->n_hs_addrs++], json_object_get_string(v),
                     TERN_DESC_HS_ADDR_MAX);
    }
    return 0;
}

int tern_segment_desc_decode(const char *json, size_t len, tern_segment_desc **out, char *err,
                             size_t errlen)
{
    if (!out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "segment descriptor: no output");
    *out = NULL;
    json_object *root;
    int rc = tern_json_parse_object(json, len, &root, err, errlen);
    if (rc)
        return rc;
    tern_mooncake_desc_normalize(root, TERN_LOCATION_MAX); /* see docs/protocol.md, Mooncake compatibility */
    tern_segment_desc *d = calloc(1, sizeof *d);
    if (!d) {
        json_object_put(root);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    }
    uint64_t port = 0;
    rc = tern_json_get_str(root, "", "name", 1, d->name, sizeof d->name, err, errlen);
    if (!rc)
        rc = tern_json_get_str(root, "", "protocol", 1, d->protocol, sizeof d->protocol, err, errlen);
    if (!rc)
        rc = tern_json_get_uint(root, "", "tcp_data_port", UINT16_MAX, 0, &port, err, errlen);
    d->tcp_data_port = (uint16_t)port;
    if (!rc)
        rc = tern_json_get_uint(root, "", "timestamp", UINT64_MAX, 0, &d->timestamp, err, errlen);
    if (!rc)
        rc = decode_hs_addrs(root, d, err, errlen);
    if (!rc)
        rc = decode_buffers(root, d, err, errlen);
    if (!rc)
        rc = decode_transports(root, d, err, errlen);
    json_object_put(root);
    if (rc) {
        tern_segment_desc_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void tern_segment_desc_free(tern_segment_desc *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nbuffers; i++)
        free(d->buffers[i].keys);
    free(d->buffers);
    for (size_t i = 0; i < d->ntransports; i++) {
        free(d->transports[i].devices);
        if (d->transports[i].topology)
            tern_topology_free(d->transports[i].topology);
        tern_desc_free(d->transports[i].addr);
    }
    free(d->transports);
    free(d);
}

const tern_buffer_desc *tern_segment_find_buffer(const tern_segment_desc *d, uint64_t addr,
                                                 uint64_t len)
{
    if (!d || !d->nbuffers || len > UINT64_MAX - addr)
        return NULL;
    /* Last buffer starting at or below addr (buffers are sorted). */
    size_t lo = tern_upper_bound_u64(d->buffers, d->nbuffers, sizeof *d->buffers,
                                     offsetof(tern_buffer_desc, addr), addr);
    if (lo == 0)
        return NULL;
    const tern_buffer_desc *b = &d->buffers[lo - 1];
    uint64_t off = addr - b->addr;
    return off <= b->length && len <= b->length - off ? b : NULL;
}

const tern_seg_transport *tern_segment_find_transport(const tern_segment_desc *d,
                                                      const char *name)
{
    for (size_t i = 0; d && name && i < d->ntransports; i++)
        if (strcmp(d->transports[i].name, name) == 0)
            return &d->transports[i];
    return NULL;
}

const tern_buffer_keys *tern_buffer_find_keys(const tern_buffer_desc *b, const char *transport)
{
    for (size_t i = 0; b && transport && i < b->nkeys; i++)
        if (strcmp(b->keys[i].transport, transport) == 0)
            return &b->keys[i];
    return NULL;
}
