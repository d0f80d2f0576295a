/* core/desc/desc.h: segment and handshake descriptors (json-c), with the
 * reference's exact JSON keys so the two stay readable to each other.
 * Implemented in desc.c (tern_desc), segment_desc.c, handshake_desc.c and
 * desc_json.c (strict reading).  Decoders refuse wrong types, missing
 * mandatory keys, out-of-range numbers and absurd sizes with a message
 * naming the key.
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
#ifndef TERN_CORE_DESC_H
#define TERN_CORE_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "control/frames.h"
#include "tern/transport.h"

struct json_object;
struct tern_topology;

#define TERN_LOCATION_MAX 32
#define TERN_DESC_MAX_HS_ADDRS TERN_HS_MAX_LISTEN
#define TERN_DESC_HS_ADDR_MAX TERN_HS_ADDR_MAX
#define TERN_DESC_MAX_BUFFERS 65536
#define TERN_DESC_MAX_TRANSPORTS 16

/* tern_desc (transport.h) is a json_object; these are the host services'
 * implementations, handed to plugins by the loader. */
int tern_desc_set_str(tern_desc *d, const char *key, const char *value);
int tern_desc_set_u64(tern_desc *d, const char *key, uint64_t value);
int tern_desc_set_u32_array(tern_desc *d, const char *key, const uint32_t *v, size_t n);
const char *tern_desc_get_str(const tern_desc *d, const char *key);
int tern_desc_get_u64(const tern_desc *d, const char *key, uint64_t *value);
int tern_desc_get_u32_array(const tern_desc *d, const char *key, uint32_t *v, size_t max);
tern_desc *tern_desc_new(void);              /* empty object */
void tern_desc_free(tern_desc *d);

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

/* Handshake descriptor: the reference's keys plus the transport's own.
 * Limits per key: docs/protocol.md, Handshake frames. */
#define TERN_HS_DESC_MAX_KEYS 64 /* members of a handshake descriptor object */
#define TERN_HS_DESC_MAX_QP 64   /* qp_num entries */
typedef struct tern_handshake_desc {
    char transport[TERN_NAME_MAX];     /* tern's addition: "transport" */
    char local_nic_path[320];
    char peer_nic_path[320];
    uint16_t local_lid;
    char local_gid[48];
    uint32_t qp_num[TERN_HS_DESC_MAX_QP];
    size_t nqp;
    char reply_msg[512];
    char efa_addr[512];
    tern_desc *fields;                 /* the whole object, for transports */
} tern_handshake_desc;

char *tern_handshake_desc_encode(const tern_handshake_desc *d);
int tern_handshake_desc_decode(const char *json, size_t len, tern_handshake_desc *out,
                               char *err, size_t errlen);
void tern_handshake_desc_clear(tern_handshake_desc *d); /* frees fields */

#endif
