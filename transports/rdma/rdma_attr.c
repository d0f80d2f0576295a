/* transports/rdma: the pure parts (see rdma_internal.h).  No device calls
 * here: everything is a function of its arguments, so the unit tests can
 * check the exact attributes docs/rdma.md lists. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "rdma_internal.h"
#include "tern/plugin_kit.h"

/* ---- MTU ------------------------------------------------------------------ */

enum ibv_mtu rd_mtu_from_bytes(int64_t bytes)
{
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return (enum ibv_mtu)0;
    }
}

int rd_mtu_to_bytes(enum ibv_mtu mtu)
{
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096)
        return 0;
    return 128 << (int)mtu;
}

/* The enum grows with the size, so the smaller enum is the smaller MTU. */
enum ibv_mtu rd_path_mtu(enum ibv_mtu active, enum ibv_mtu configured)
{
    if (!rd_mtu_to_bytes(active))
        return configured;
    if (!rd_mtu_to_bytes(configured))
        return active;
    return active < configured ? active : configured;
}

/* ---- GID ------------------------------------------------------------------ */

static int gid_is_zero(const uint8_t raw[16])
{
    for (int i = 0; i < 16; i++)
        if (raw[i])
            return 0;
    return 1;
}

/* ::ffff:a.b.c.d */
static int gid_is_v4mapped(const uint8_t raw[16])
{
    for (int i = 0; i < 10; i++)
        if (raw[i])
            return 0;
    return raw[10] == 0xff && raw[11] == 0xff;
}

int rd_gid_rank(const rd_gid_entry *e)
{
    if (!e || gid_is_zero(e->raw))
        return -1;
    if (e->type != IBV_GID_TYPE_ROCE_V2 && e->type != IBV_GID_TYPE_IB)
        return -1;
    int rank = gid_is_v4mapped(e->raw) ? 0 : 2;
    return rank + (e->has_ndev ? 0 : 1);
}

int rd_gid_choose(const rd_gid_entry *tbl, int n)
{
    int best = -1, best_rank = 99;
    for (int i = 0; tbl && i < n; i++) {
        int r = rd_gid_rank(&tbl[i]);
        if (r >= 0 && r < best_rank) {
            best = i;
            best_rank = r;
        }
    }
    return best;
}

int rd_gid_type_parse(const char *text)
{
    if (!text)
        return -1;
    /* sysfs prints "RoCE v2", "IB/RoCE v1" or "IB" (older kernels "RoCE V2"). */
    if (strncasecmp(text, "RoCE v2", 7) == 0)
        return IBV_GID_TYPE_ROCE_V2;
    if (strncasecmp(text, "IB/RoCE v1", 10) == 0 || strncasecmp(text, "RoCE v1", 7) == 0)
        return IBV_GID_TYPE_ROCE_V1;
    if (strncasecmp(text, "IB", 2) == 0 && (text[2] == '\0' || isspace((unsigned char)text[2])))
        return IBV_GID_TYPE_IB;
    return -1;
}

void rd_gid_format(const uint8_t raw[16], char out[48])
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i)
            *p++ = ':';
        *p++ = hex[raw[i] >> 4];
        *p++ = hex[raw[i] & 15];
    }
    *p = '\0';
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int rd_gid_parse(const char *text, uint8_t raw[16])
{
    if (!text || strlen(text) != 47)
        return -1;
    for (int i = 0; i < 16; i++) {
        const char *p = text + 3 * i;
        int hi = hexval((unsigned char)p[0]), lo = hexval((unsigned char)p[1]);
        if (hi < 0 || lo < 0 || (i < 15 && p[2] != ':'))
            return -1;
        raw[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int rd_gid_parse_sysfs(const char *text, uint8_t raw[16])
{
    if (!text)
        return -1;
    for (int g = 0; g < 8; g++) {
        int v = 0;
        for (int k = 0; k < 4; k++) {
            int h = hexval((unsigned char)*text++);
            if (h < 0)
                return -1;
            v = v << 4 | h;
        }
        raw[2 * g] = (uint8_t)(v >> 8);
        raw[2 * g + 1] = (uint8_t)v;
        if (g < 7 && *text++ != ':')
            return -1;
    }
    return (*text == '\0' || *text == '\n') ? 0 : -1;
}

/* ---- QP transitions ---------------------------------------------------------- */

int rd_attr_reset(struct ibv_qp_attr *attr)
{
    memset(attr, 0, sizeof *attr);
    attr->qp_state = IBV_QPS_RESET;
    return IBV_QP_STATE;
}

int rd_attr_init(const rd_qp_cfg *cfg, struct ibv_qp_attr *attr)
{
    memset(attr, 0, sizeof *attr);
    attr->qp_state = IBV_QPS_INIT;
    attr->port_num = cfg->port_num;
    attr->pkey_index = cfg->pkey_index;
    attr->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
}

int rd_attr_rtr(const rd_qp_cfg *cfg, const rd_peer_qp *peer,
                       struct ibv_qp_attr *attr)
{
    memset(attr, 0, sizeof *attr);
    attr->qp_state = IBV_QPS_RTR;
    attr->path_mtu = rd_path_mtu(cfg->active_mtu, cfg->mtu);
    if (rd_mtu_to_bytes(peer->mtu) && peer->mtu < attr->path_mtu)
        attr->path_mtu = peer->mtu;
    memcpy(attr->ah_attr.grh.dgid.raw, peer->gid, 16);
    attr->ah_attr.grh.sgid_index = cfg->sgid_index;
    attr->ah_attr.grh.hop_limit = TERN_RDMA_HOP_LIMIT;
    if (cfg->traffic_class >= 0)
        attr->ah_attr.grh.traffic_class = (uint8_t)cfg->traffic_class;
    attr->ah_attr.dlid = peer->lid;
    attr->ah_attr.sl = 0;
    attr->ah_attr.src_path_bits = 0;
    attr->ah_attr.static_rate = 0;
    attr->ah_attr.is_global = 1;
    attr->ah_attr.port_num = cfg->port_num;
    attr->dest_qp_num = peer->qp_num;
    attr->rq_psn = 0;
    attr->max_dest_rd_atomic = TERN_RDMA_MAX_RD_ATOMIC;
    attr->min_rnr_timer = TERN_RDMA_MIN_RNR_TIMER;
    return IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
}

int rd_attr_rts(struct ibv_qp_attr *attr)
{
    memset(attr, 0, sizeof *attr);
    attr->qp_state = IBV_QPS_RTS;
    attr->timeout = TERN_RDMA_TIMEOUT;
    attr->retry_cnt = TERN_RDMA_RETRY_CNT;
    attr->rnr_retry = TERN_RDMA_RNR_RETRY;
    attr->sq_psn = 0;
    attr->max_rd_atomic = TERN_RDMA_MAX_RD_ATOMIC;
    return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
}

const char *rd_step_message(rd_step step)
{
    switch (step) {
    case TERN_RDMA_STEP_RESET: return "Failed to modify QP to RESET";
    case TERN_RDMA_STEP_INIT: return "Failed to modify QP to INIT, check local context port num";
    case TERN_RDMA_STEP_RTR:
        return "Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num";
    case TERN_RDMA_STEP_RTS: return "Failed to modify QP to RTS";
    }
    return "Failed to modify QP";
}

/* ---- handshake and options ------------------------------------------------ */

int rd_check_qp_count(int local, int peer, const char *peer_nic_path, char *err,
                             size_t errlen)
{
    if (local == peer)
        return 0;
    return tern_kit_errf(err, errlen, TERN_ERR_REFUSED,
                         "QP count mismatch: peer %s has %d QP%s per endpoint, this side has %d; "
                         "set transports.rdma.qp_per_endpoint to the same value on both sides",
                         peer_nic_path ? peer_nic_path : "?", peer, peer == 1 ? "" : "s", local);
}

int rd_device_allowed(const char *const *allow, size_t n, const char *name)
{
    if (!allow || n == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (allow[i] && name && strcmp(allow[i], name) == 0)
            return 1;
    return 0;
}

uint64_t rd_wr_count(uint64_t length, uint64_t piece)
{
    if (length == 0 || piece == 0)
        return 1;
    return length / piece + (length % piece ? 1 : 0);
}
