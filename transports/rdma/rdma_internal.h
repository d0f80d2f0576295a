/* transports/rdma: internal interface of the RDMA verbs transport.
 *
 * rdma_attr.c holds the PURE parts: nothing there touches a device, so
 * tests/transports/test_rdma_pure.c checks them without RDMA hardware.  They decide
 * the MTU, the GID index and the exact ibv_qp_attr + mask of each QP
 * transition (docs/rdma.md), and format/parse what travels in the
 * handshake.  The plugin itself (devices, endpoints, data path) is in the
 * other files, with its own state in rdma_plugin.h.
 */
#ifndef TERN_RDMA_INTERNAL_H
#define TERN_RDMA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "tern/errors.h"

#define TERN_RDMA_MAX_QP 64      /* per endpoint; the handshake's qp_num[] bound */
#define TERN_RDMA_HOP_LIMIT 16
#define TERN_RDMA_MAX_RD_ATOMIC 16
#define TERN_RDMA_MIN_RNR_TIMER 12
#define TERN_RDMA_TIMEOUT 14     /* 4.096 us * 2^14 ~ 67 ms */
#define TERN_RDMA_RETRY_CNT 7
#define TERN_RDMA_RNR_RETRY 7

/* ---- MTU ------------------------------------------------------------------ */

/* 256..4096 bytes (a power of two) to the verbs enum; 0 for anything else. */
enum ibv_mtu rd_mtu_from_bytes(int64_t bytes);
/* The verbs enum to bytes; 0 for an unknown value. */
int rd_mtu_to_bytes(enum ibv_mtu mtu);
/* Path MTU: the smaller of the port's active MTU and the configured one.
 * An unknown active MTU (0) leaves the configured one. */
enum ibv_mtu rd_path_mtu(enum ibv_mtu active, enum ibv_mtu configured);

/* ---- GID ------------------------------------------------------------------ */

/* One GID table entry as the chooser sees it. */
typedef struct rd_gid_entry {
    uint8_t raw[16];
    int type;      /* enum ibv_gid_type: IBV_GID_TYPE_IB / _ROCE_V1 / _ROCE_V2; -1 unknown */
    int has_ndev;  /* bound to a netdev (gid_attrs/ndevs or ndev_ifindex) */
} rd_gid_entry;

/* Rank of an entry for the automatic choice, lower is better:
 * 0 IPv4-mapped on a netdev, 1 IPv4-mapped without, 2 IPv6 on a netdev,
 * 3 IPv6 without; -1 unusable (all-zero GID, or neither RoCE v2 nor IB). */
int rd_gid_rank(const rd_gid_entry *e);
/* The best index of tbl[0..n) (lowest rank, then lowest index), or -1. */
int rd_gid_choose(const rd_gid_entry *tbl, int n);
/* "RoCE v2" / "IB" / "RoCE v1" (sysfs gid_attrs/types text) to the enum; -1. */
int rd_gid_type_parse(const char *text);
/* Handshake form: 16 bytes as two-digit lowercase hex joined by ':'
 * ("fe:80:00:..."); out needs 48 bytes. */
void rd_gid_format(const uint8_t raw[16], char out[48]);
/* Strict parse of that form (also accepts uppercase); 0 or -1. */
int rd_gid_parse(const char *text, uint8_t raw[16]);
/* sysfs form "fe80:0000:...:0001" (8 groups of 4 hex digits); 0 or -1. */
int rd_gid_parse_sysfs(const char *text, uint8_t raw[16]);

/* ---- QP transitions ---------------------------------------------------------- */

/* What the transitions need from the local side. */
typedef struct rd_qp_cfg {
    uint8_t port_num;         /* 1-based */
    uint16_t pkey_index;
    uint8_t sgid_index;       /* the chosen local GID index */
    int traffic_class;        /* -1: leave unset */
    enum ibv_mtu active_mtu;  /* the port's */
    enum ibv_mtu mtu;         /* configured */
} rd_qp_cfg;

/* What they need from the peer (its handshake descriptor). */
typedef struct rd_peer_qp {
    uint16_t lid;
    uint8_t gid[16];
    uint32_t qp_num;
    /* The peer's own path MTU (its "mtu" handshake key, tern's addition);
     * 0 when it sent none.  Both sides then use the same, smaller MTU: a
     * mismatch makes the receiver drop packets ("remote invalid request"). */
    enum ibv_mtu mtu;
} rd_peer_qp;

typedef enum rd_step {
    TERN_RDMA_STEP_RESET = 0,
    TERN_RDMA_STEP_INIT = 1,
    TERN_RDMA_STEP_RTR = 2,
    TERN_RDMA_STEP_RTS = 3,
} rd_step;

/* Each fills *attr (zeroed first) and returns the ibv_modify_qp mask.
 * RTR's path_mtu = min(port active MTU, configured MTU, peer's MTU if given). */
int rd_attr_reset(struct ibv_qp_attr *attr);
int rd_attr_init(const rd_qp_cfg *cfg, struct ibv_qp_attr *attr);
int rd_attr_rtr(const rd_qp_cfg *cfg, const rd_peer_qp *peer,
                       struct ibv_qp_attr *attr);
int rd_attr_rts(struct ibv_qp_attr *attr);
/* The text for a failed step, before ": strerror(errno)":
 * "Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num". */
const char *rd_step_message(rd_step step);

/* ---- handshake and options ------------------------------------------------ */

/* The peer's QP count must equal ours: 0, or TERN_ERR_REFUSED with a message
 * naming both counts and the option to align. */
int rd_check_qp_count(int local, int peer, const char *peer_nic_path, char *err,
                             size_t errlen);
/* Is `name` allowed by the list (NULL or empty list: everything)? */
int rd_device_allowed(const char *const *allow, size_t n, const char *name);
/* Work requests for one slice of `length` bytes cut into pieces of at most
 * `piece` bytes (0: no limit); a 0-byte slice still takes one. */
uint64_t rd_wr_count(uint64_t length, uint64_t piece);

#endif
