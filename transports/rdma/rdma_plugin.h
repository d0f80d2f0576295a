/* transports/rdma/rdma_plugin.h: the plugin's own state (devices,
 * registrations, context, endpoints) and the functions its files share.
 * rdma_internal.h is the pure part, shared with the tests.  Nothing here is
 * visible outside libtern-rdma.so. */
#ifndef TERN_RDMA_PLUGIN_H
#define TERN_RDMA_PLUGIN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "rdma_internal.h"
#include "tern/plugin_kit.h"

#define RD_WC_BATCH 32
#define RD_DRAIN_MS 5000

enum { EP_IDLE = 0, EP_CONNECTED, EP_FAILED, EP_CLOSING };

struct rd_ctx;
struct rd_ep;

typedef struct rd_dev {
    struct rd_ctx *ctx;
    char name[TERN_NAME_MAX];
    struct ibv_context *vctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    int cq_size;
    struct ibv_port_attr port_attr;
    int gid_index;
    uint8_t gid[16];
    int max_wr;                /* per QP, after clamping to the device */
    uint64_t piece;            /* bytes per work request */
    atomic_int posted;         /* work requests in flight on the CQ */
    atomic_int starved;        /* an endpoint waits for CQ room */
    pthread_t worker;
    int worker_started;
} rd_dev;

typedef struct rd_mr {
    struct rd_mr *next;
    int ndev;
    struct ibv_mr *mr[TERN_MAX_DEVICES];
} rd_mr;

typedef struct rd_ctx {
    const tern_host_services *host;
    rd_dev *devs;
    int ndev, devs_cap;
    /* options */
    int gid_index_cfg, qp_per_ep, max_wr, traffic_class, pkey_index, port;
    enum ibv_mtu mtu;
    uint64_t slice_size;
    atomic_int stop;

    pthread_mutex_t lock; /* endpoints and registrations */
    struct rd_ep *eps;
    rd_mr *mrs;
} rd_ctx;

typedef struct rd_ep {
    rd_ctx *ctx;
    rd_dev *dev;
    struct rd_ep *next, *prev;
    pthread_mutex_t lock;
    pthread_cond_t drained;
    int state;
    int nqp;
    struct ibv_qp *qp[TERN_RDMA_MAX_QP];
    enum ibv_qp_state qp_state[TERN_RDMA_MAX_QP];
    int outstanding[TERN_RDMA_MAX_QP];
    int total;
    int closer;      /* rd_ep_close waits for the flush: it destroys, not the worker */
    unsigned rr;
    tern_slice *q_head, *q_tail;
    char peer_nic_path[320];
    char fail_msg[512];
} rd_ep;

/* Slice scratch while we own it. */
#define S_NEXT(s) ((s)->plugin[0])
#define S_EP(s) ((s)->plugin[3])
/* plugin[1]: bytes already posted; plugin[2]: work requests not completed */
static inline uint64_t s_off(const tern_slice *s) { return (uint64_t)(uintptr_t)s->plugin[1]; }
static inline void s_set_off(tern_slice *s, uint64_t v) { s->plugin[1] = (void *)(uintptr_t)v; }
static inline uint64_t s_left(const tern_slice *s) { return (uint64_t)(uintptr_t)s->plugin[2]; }
static inline void s_set_left(tern_slice *s, uint64_t v) { s->plugin[2] = (void *)(uintptr_t)v; }

#define RD_LOG(ctx, lvl, ...) \
    do { if ((ctx)->host && (ctx)->host->log) (ctx)->host->log((ctx)->host->host, lvl, __VA_ARGS__); } while (0)

/* ---- functions shared by the plugin's files ------------------------------- */

/* ---- rdma_util.c ---- */
void *rd_alloc(rd_ctx *c, size_t n);
void rd_free(rd_ctx *c, void *p);
int64_t rd_opt_int(const tern_host_services *h, const char *key, int64_t def);
void rd_done_push(rd_ctx *c, tern_slice *s);
void rd_slice_fail(tern_slice *s, int code, const char *msg);

/* ---- rdma_dev.c ---- */
int rd_dev_open(rd_ctx *c, rd_dev *d, struct ibv_device *dev, char *err, size_t errlen);
void rd_dev_close(rd_dev *d);

/* ---- rdma_mr.c ---- */
int rd_mr_register(void *ctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                   char *err, size_t errlen);
int rd_mr_deregister(void *ctx, void *mr);
int rd_segment_describe(void *ctx, tern_desc *out);

/* ---- rdma_qp.c ---- */
void rd_ep_destroy(rd_ep *ep);
int rd_ep_open(void *ctx, const tern_ep_params *p, void **out, char *err, size_t errlen);
int rd_ep_describe(void *vep, tern_desc *out);
int rd_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen);
void rd_qps_to_err(rd_ep *ep);
void rd_fail_queue(rd_ep *ep, int code, const char *msg);
void rd_ep_close(void *vep);
int rd_ep_reset(void *vep);

/* ---- rdma_data.c ---- */
int rd_submit(void *vep, tern_slice *const *slices, int n);
void *rd_worker(void *arg);

#endif
