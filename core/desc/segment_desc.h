/* core/desc/segment_desc.h: the segment descriptor (segment_desc.c): what a
 * segment publishes of itself, encoded and decoded.
 *
 * Segment descriptor JSON:
 *   { "name": "host:port", "protocol": "<first transport>",
 *     "devices": [{"name","lid","gid"}...],           (first transport's)
 *     "buffers": [{"name": location, "addr", "length", "lkey": [], "rkey": [],
 *                  "keys": {"<transport>": {"lkey": [], "rkey": []}}}...],
 *     "priority_matrix": {location: [[preferred],[available]]},  (first's)
 *     "tcp_data_port": N, "timestamp": N,
 *     "transports": [{"name", "devices": [...], "priority_matrix": {...},
 *                     "addr": {transport blob}}...] }
 *   "handshake_addrs": ["host:port"...]  (optional: the daemon's other addresses)
 * plus each "publish.<key>" of a transport blob as a top-level <key>
 * (tcp publishes tcp_data_port and, serving Mooncake's format,
 * tcp_proto_version).
 */
#ifndef TERN_CORE_DESC_SEGMENT_DESC_H
#define TERN_CORE_DESC_SEGMENT_DESC_H

#include "desc/desc.h"

struct tern_topology;

typedef struct tern_device_desc {
    char name[TERN_NAME_MAX];
    uint32_t lid;
    char gid[48];
} tern_device_desc;

typedef struct tern_buffer_keys {
    char transport[TERN_NAME_MAX];
    int ndev;
    uint64_t lkey[TERN_MAX_DEVICES];
    uint64_t rkey[TERN_MAX_DEVICES];
} tern_buffer_keys;

typedef struct tern_buffer_desc {
    char location[TERN_LOCATION_MAX];  /* JSON key "name" */
    char app_name[128];                /* JSON key "app_name" (optional) */
    uint64_t addr, length;
    tern_buffer_keys *keys;            /* one per transport */
    size_t nkeys;
} tern_buffer_desc;

typedef struct tern_seg_transport {
    char name[TERN_NAME_MAX];
    tern_device_desc *devices;
    size_t ndevices;
    struct tern_topology *topology;    /* "priority_matrix" */
    tern_desc *addr;                   /* the transport's blob (json object) */
} tern_seg_transport;

typedef struct tern_segment_desc {
    char name[256];
    char protocol[TERN_NAME_MAX];
    uint16_t tcp_data_port;            /* encoded as the default: a transport
                                          may publish its own (addr_json) */
    uint64_t timestamp;
    tern_buffer_desc *buffers;         /* sorted by addr */
    size_t nbuffers;
    tern_seg_transport *transports;    /* in the owner's preference order */
    size_t ntransports;
    /* "handshake_addrs": other addresses its handshake daemon answers on
     * ("host:port"), tried when the name's own does not answer */
    char hs_addrs[TERN_DESC_MAX_HS_ADDRS][TERN_DESC_HS_ADDR_MAX];
    size_t n_hs_addrs;
} tern_segment_desc;

/* Encode to JSON text (malloc()ed). */
char *tern_segment_desc_encode(const tern_segment_desc *d);
/* Decode; on error returns TERN_ERR_PROTOCOL with the key named in err. */
int tern_segment_desc_decode(const char *json, size_t len, tern_segment_desc **out,
                             char *err, size_t errlen);
void tern_segment_desc_free(tern_segment_desc *d);
/* Buffer covering [addr, addr+len) or NULL (overflow-safe). */
const tern_buffer_desc *tern_segment_find_buffer(const tern_segment_desc *d,
                                                 uint64_t addr, uint64_t len);
const tern_seg_transport *tern_segment_find_transport(const tern_segment_desc *d,
                                                      const char *name);
const tern_buffer_keys *tern_buffer_find_keys(const tern_buffer_desc *b,
                                              const char *transport);

#endif
