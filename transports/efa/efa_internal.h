/* transports/efa: the libfabric transport (AWS EFA and any RDM provider with
 * RMA: tcp;ofi_rxm, shm, verbs;ofi_rxm, ...).  Internal types shared by the
 * plugin's source files; nothing here is visible outside libtern-efa.so. */
#ifndef TERN_EFA_INTERNAL_H
#define TERN_EFA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "tern/plugin_kit.h"

#define EFA_ADDR_MAX 256        /* endpoint names larger than this are refused */
#define EFA_DEFAULT_SLICE (1024 * 1024)
#define EFA_DEFAULT_INFLIGHT 256

struct efa_ctx;

/* One address of a peer in a device's AV, shared by the endpoints that
 * reach the same peer endpoint (fi_av_insert once, fi_av_remove at 0). */
typedef struct efa_peer {
    struct efa_peer *next;
    uint8_t addr[EFA_ADDR_MAX];
    size_t addrlen;
    fi_addr_t fi_addr;
    fi_addr_t fi_addr_b;        /* the peer's bounce endpoint, when has_b */
    int has_b;
    int refs;                   /* endpoints using it */
    int stale;                  /* its AV was closed by a recycle */
    int gen;                    /* the device generation it was inserted in */
    int pid;                    /* shm: the peer's process, checked before posting */
    int pidfd;                  /* shm: a pidfd of it (readable once it exits), or -1 */
    int inflight;               /* operations the provider still holds */
} efa_peer;

/* One libfabric operation in flight.  Plugin-owned (not in the slice), so
 * a completion that arrives after the slice was given back (timeout,
 * ep_close) only frees this record. */
typedef struct efa_op {
    struct fi_context2 fctx;    /* first: op_context points here */
    struct efa_op *prev, *next; /* the device's in-flight list */
    tern_slice *slice;          /* NULL once abandoned */
    struct efa_ep *ep;          /* NULL once the endpoint closed */
    efa_peer *peer;             /* holds peer->inflight until completion */
    uint64_t posted_ms;
} efa_op;

/* One call inside fi_write / fi_read now.  It lives on the posting
 * thread's stack, not in the operation: a completion may free the
 * operation before the call returns. */
typedef struct efa_posting {
    struct efa_posting *prev, *next; /* the device's list of calls */
    uint64_t since_ms;
} efa_posting;

/* One fi_info = one device: fabric, domain, endpoint, AV, CQ. */
typedef struct efa_dev {
    struct efa_ctx *ctx;
    int index;
    struct fi_info *info;
    struct fi_info *info_b;     /* shm: the bounce endpoint's (FI_HMEM), or NULL */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_ep *ep_b;        /* shm: same domain, AV and CQ, never attaches */
    struct fid_av *av;
    struct fid_cq *cq;
    int cq_waitable;            /* fi_cq_sread usable */
    int serialise;              /* threading below FI_THREAD_SAFE: lock calls */
    pthread_mutex_t fi_lock;    /* taken around libfabric calls when serialise */
    pthread_mutex_t ops_lock;   /* in-flight list, peer table */
    /* Readers: CQ reads and posts; writer: fi_av_insert/fi_av_remove, which
     * some providers (shm) do not synchronise with their progress. */
    pthread_rwlock_t av_lock;
    efa_op ops;                 /* list head of in-flight operations */
    efa_posting posting;        /* list head of calls inside the provider */
    efa_peer *peers;
    uint64_t mr_mode;
    uint64_t max_msg;
    uint8_t addr[EFA_ADDR_MAX];
    size_t addrlen;
    uint8_t addr_b[EFA_ADDR_MAX]; /* ep_b's, when there is one */
    size_t addrlen_b;
    tern_device_info dinfo;
    pthread_t thread;
    int thread_started;
    atomic_uint_fast64_t next_key; /* requested keys when not FI_MR_PROV_KEY */
    atomic_uint_fast64_t posted, completed, failed, bounced;
    atomic_int gen;             /* bumped when the endpoint is recycled */
    atomic_int wedged;          /* a peer stopped answering: recycle */
    atomic_uint_fast64_t recycles;
    uint64_t stuck_logged_ms;   /* progress thread only */
} efa_dev;

typedef struct efa_ep {
    struct efa_ctx *ctx;
    efa_dev *dev;
    efa_peer *peer;             /* NULL until ep_connect */
    int gen;                    /* the device generation it connected in */
    struct efa_ep *prev, *next; /* ctx's endpoint list */
    char peer_nic_path[192];
    /* Peer's registrations (rkey -> base) when the provider has no
     * FI_MR_VIRT_ADDR: remote addresses are then offsets from the base. */
    size_t nbases;
    uint64_t *base_keys, *base_addrs;
} efa_ep;

typedef struct efa_mr {
    struct efa_mr *prev, *next;
    int ndev;
    void *addr;
    size_t len;
    struct fid_mr *mr[TERN_MAX_DEVICES];
} efa_mr;

typedef struct efa_ctx {
    const tern_host_services *host;
    char provider[64];          /* as configured */
    char prov_name[64];         /* as given to fi_getinfo */
    char iface[64];
    uint64_t slice_size;
    int max_inflight;
    int rails;                  /* endpoints per device (efa_dev each) */
    uint64_t shm_bounce_min;    /* option: shm WRITEs this large use ep_b */
    int timeout_ms;
    efa_dev *devs;
    int ndev;
    atomic_int stop;
    atomic_int inflight;
    pthread_mutex_t list_lock;  /* endpoints and registrations */
    efa_ep eps;
    efa_mr mrs;
} efa_ctx;

/* ---- functions shared by the plugin's files ---------------------------- */

/* ---- efa_util.c ---- */
void efa_log(const efa_ctx *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void efa_lock(efa_dev *d);
void efa_unlock(efa_dev *d);
void efa_hex_encode(const uint8_t *in, size_t n, char *out);
long efa_hex_decode(const char *in, uint8_t *out, size_t max);
void efa_map_provider(const char *p, char *out, size_t outlen);

/* ---- efa_fabric.c ---- */
int efa_getinfo(const char *prov_name, int delivery_complete, int bounce, struct fi_info **out);
int efa_not_found(const efa_ctx *c, int rc, char *err, size_t errlen);
int efa_pick_devices(efa_ctx *c, struct fi_info *list, struct fi_info **picked, int max);
void efa_sysfs_path(const efa_ctx *c, const struct fi_info *i, tern_device_info *di);
int efa_key_is_base(const efa_dev *d);
int efa_dev_open(efa_dev *d, char *err, size_t errlen);
int efa_dev_open_ep(efa_dev *d, char *err, size_t errlen);
void efa_dev_close_ep(efa_dev *d);
void efa_dev_close(efa_dev *d);

/* efa_shm.c */
int efa_is_shm(const efa_dev *d);
int efa_shm_name(efa_dev *d, char *err, size_t errlen);
int efa_shm_sweep(const efa_ctx *c, const char *dir);
int efa_shm_pid(const uint8_t *addr, size_t len);

/* ---- efa_progress.c ---- */
void efa_slice_finish(efa_ctx *c, tern_slice *s, int status, const char *msg);
void efa_op_link(efa_dev *d, efa_op *op, efa_posting *call);
int efa_ops_abandon(efa_dev *d, const efa_ep *ep, uint64_t older_than,
                    int status, const char *msg);
int efa_cq_drain(efa_dev *d, int timeout_ms);
/* How long the oldest post still inside the provider has been there (0:
 * none).  Posts take microseconds; one that stays is stuck in the provider
 * (libfabric's shm spins on a lock its dead peer held: docs/protocol.md,
 * libfabric shm regions). */
uint64_t efa_dev_stuck_post_ms(efa_dev *d);
void *efa_progress_main(void *arg);

/* ---- efa_mr.c ---- */
void efa_mr_free(efa_ctx *c, efa_mr *m);
int efa_mr_register(void *ctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                    char *err, size_t errlen);
int efa_mr_deregister(void *ctx, void *mr);
int efa_segment_describe(void *ctx, tern_desc *out);

/* ---- efa_peer.c ---- */
/* The peer at addr, its AV entry inserted once (a reference taken). */
int efa_peer_get(efa_dev *d, const uint8_t *addr, size_t len, const uint8_t *addr_b,
                 size_t len_b, efa_peer **out, char *err, size_t errlen);
/* Drops a reference; the last one with nothing in flight removes it. */
void efa_peer_put(efa_dev *d, efa_peer *p);
int efa_peer_dead(const efa_peer *p);
void efa_peer_free(efa_peer *p);
efa_peer *efa_peer_unlink_locked(efa_dev *d, efa_peer *p);
void efa_peer_remove(efa_dev *d, efa_peer *p);

/* ---- efa_ep.c ---- */
int efa_ep_open(void *ctx, const tern_ep_params *p, void **out, char *err, size_t errlen);
int efa_ep_describe(void *ep, tern_desc *out);
int efa_ep_connect(void *ep, const tern_desc *peer, char *err, size_t errlen);
void efa_ep_free(efa_ep *e);
void efa_ep_close(void *ep);

/* ---- efa_data.c ---- */
int efa_submit(void *ep, tern_slice *const *slices, int n);

#endif
