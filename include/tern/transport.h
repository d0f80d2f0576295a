/* tern: the transport plugin ABI.
 *
 * A transport is a shared object that exports ONE const data symbol,
 * TERN_TRANSPORT_SYMBOL, of type `const tern_transport`.  The core dlopen()s
 * the object with RTLD_NOW|RTLD_LOCAL and checks magic, abi_major and
 * struct_size on that symbol before it runs any of the plugin's code.
 *
 * Versioning (learned from sqlite3_io_methods and libfabric's fi_ops):
 *  - struct_size is sizeof(tern_transport) as the plugin was compiled.
 *    Members are only ever appended; the core reads a member only when
 *    struct_size covers it (TERN_HAS_MEMBER), so an older plugin keeps
 *    working with a newer core.  A struct smaller than the v1.0 layout
 *    is refused.
 *  - abi_major changes on any breaking change, together with the symbol
 *    name.  abi_minor grows when members are appended.
 *  - Mandatory operations must be non-NULL (checked at load).  Optional
 *    operations may be NULL; the core then uses its own default, which
 *    answers TERN_ERR_NOT_SUPPORTED (docs/plugins.md, Optional operations).
 *
 * Ownership: the core allocates and frees every tern_slice and tern_desc it
 * hands to a plugin; the plugin owns its own context, endpoints and memory
 * registrations (the opaque pointers it returns) until the matching
 * fini/ep_close/mr_deregister call.
 *
 * Threading: init/fini are called once, from one thread.  All other
 * operations may be called concurrently from several threads (the core's
 * batch submitters, and for a plugin that uses poll() one progress thread
 * per transport calling it); a plugin that needs serialisation does it
 * itself.
 *
 * Completions (ABI 1.1): a plugin hands each finished slice back exactly
 * once, either through the host service complete() (from any of its
 * threads, or from inside submit(); the core needs no thread of its own)
 * or, the 1.0 way, by returning it from poll().  A plugin built for 1.1 or
 * later may leave poll NULL and must then use complete(); a 1.0 plugin
 * (struct_size of the 1.0 layout, abi_minor 0) keeps working through poll.
 *
 * Errors: negative tern_err codes.  Operations that take `err, errlen`
 * write a NUL-terminated message that names what failed and what to check
 * (e.g. "Failed to modify QP to RTR, check mtu, gid, peer lid, peer qp num:
 * Invalid argument"); the core shows it to the user once, after the
 * transport's name (a leading "<name>: " in the message is not repeated).
 * What the core does with a failed slice depends on the code
 * (docs/architecture.md, Healing): TERN_ERR_RANGE and TERN_ERR_INVAL are
 * not retried; TERN_ERR_CONNECT, CLOSED, IO, TIMEOUT make it refetch the
 * peer's descriptor and retry with backoff; TERN_ERR_DEVICE marks the local
 * device down for a while; TERN_ERR_UNREACHABLE moves the peer to the next
 * transport both sides share.
 */
#ifndef TERN_TRANSPORT_H
#define TERN_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "tern/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TERN_TRANSPORT_MAGIC 0x5452504E5245545FULL /* "_TERNPRT" */
#define TERN_TRANSPORT_ABI_MAJOR 1
#define TERN_TRANSPORT_ABI_MINOR 2
#define TERN_TRANSPORT_SYMBOL "tern_transport_v1"
/* Use in the plugin: TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {...}; */
#define TERN_TRANSPORT_EXPORT __attribute__((visibility("default")))

/* True when a struct of `size` bytes (as its author compiled it) holds member. */
#define TERN_HAS_MEMBER(size, type, member) \
    ((size) >= offsetof(type, member) + sizeof(((type *)0)->member))

#define TERN_MAX_DEVICES 64
#define TERN_NAME_MAX 64

/* ---- operations ------------------------------------------------------------
 * tern_slice.opcode.  The same values as tern_opcode in <tern/tern.h> (the
 * core checks it), so a plugin needs only this header. */
#define TERN_OP_READ 0  /* copy remote -> local */
#define TERN_OP_WRITE 1 /* copy local -> remote */

/* ---- capability bits ------------------------------------------------------
 * The core honours each bit it defines.  READ and WRITE: the core sends a
 * transport only the operations its caps carry (TERN_CAP_OP(op)); a peer
 * that needs another one moves to the next transport both sides list.  A
 * transport that carries neither (every plugin built for ABI 1.0, when the
 * bits were not read) is taken to do both. */
#define TERN_CAP_READ (1ULL << 0)          /* one-sided READ */
#define TERN_CAP_WRITE (1ULL << 1)         /* one-sided WRITE */
#define TERN_CAP_OP(op) (1ULL << (op))     /* the bit of TERN_OP_READ / _WRITE */
#define TERN_CAP_HANDSHAKE (1ULL << 2)     /* endpoints need the handshake exchange;
                                              without it ep_connect gets peer == NULL */
#define TERN_CAP_MULTI_DEVICE (1ULL << 4)  /* several devices: the topology chooses
                                              among them; without it the core uses
                                              the first device devices() reports */
#define TERN_CAP_GPU_DIRECT (1ULL << 6)    /* takes GPU device addresses in slices and
                                              mr_register (e.g. dma-buf); without it the
                                              core stages GPU memory through pinned host
                                              buffers and the plugin only ever sees host
                                              addresses (docs/gpu.md) */
#define TERN_CAP_GPU_TARGET (1ULL << 7)    /* the target side reaches GPU memory it
                                              registered by itself (host service
                                              mem_copy); without it (or GPU_DIRECT) a
                                              peer's GPU buffer makes the core move
                                              that peer to the next transport */
/* No longer read by the core (kept so plugins written for 1.0 compile):
 * the core checks remote ranges against the peer's descriptor whatever the
 * transport does, and a transport that cannot reach a peer says so with
 * TERN_ERR_UNREACHABLE from ep_open/ep_connect instead of a static bit. */
#define TERN_CAP_REMOTE_CHECK (1ULL << 3)
#define TERN_CAP_LOOPBACK_ONLY (1ULL << 5)

/* ---- logging levels ------------------------------------------------------- */
enum { TERN_LOG_ERROR = 0, TERN_LOG_WARN = 1, TERN_LOG_INFO = 2, TERN_LOG_DEBUG = 3 };

/* ---- descriptors ----------------------------------------------------------
 * An opaque JSON object owned by the core.  A plugin reads and writes it only
 * through the host services below, so plugins do not depend on a JSON
 * library.  Used for the segment-level address blob of a transport and for
 * the transport's fields in the handshake descriptor (qp_num, local_lid,
 * local_gid, efa_addr, ...).  Unknown keys are ignored by readers. */
typedef struct tern_desc tern_desc;
typedef struct tern_slice tern_slice;

/* ---- YAML options a transport accepts ---------------------------------------
 * The core validates the transport's entry in the YAML file against this
 * table (unknown key, wrong type, out of range) and reports file:line:col. */
typedef enum tern_opt_type {
    TERN_OPT_END = 0,   /* terminates the table */
    TERN_OPT_STRING = 1,
    TERN_OPT_INT = 2,   /* integer within [min, max] */
    TERN_OPT_BOOL = 3,
    TERN_OPT_CHOICE = 4, /* string or integer that must be one of `choices` */
    TERN_OPT_SIZE = 5,  /* integer with optional K/M/G suffix, within [min, max] */
    TERN_OPT_STRING_LIST = 6,
} tern_opt_type;

typedef struct tern_option {
    const char *key;
    tern_opt_type type;
    int64_t min, max;              /* INT/SIZE */
    const char *const *choices;    /* CHOICE: NULL-terminated */
    const char *default_value;     /* as text; NULL = no default */
    const char *help;              /* one line for tern-info and the README */
} tern_option;

/* ---- host services: what the core offers a plugin -------------------------
 * Versioned by size like tern_transport: check TERN_HAS_MEMBER before using
 * a member added after v1.0. */
typedef struct tern_host_services {
    uint32_t struct_size;
    uint32_t reserved;
    void *host; /* pass back as the first argument */

    void (*log)(void *host, int level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

    /* This transport's own YAML keys (transports[i].<key>), with the option
     * table's default applied.  Returns NULL when unset and no default. */
    const char *(*config_get)(void *host, const char *key);
    /* Integer form (also parses K/M/G suffixes); returns `fallback` if unset. */
    int64_t (*config_get_int)(void *host, const char *key, int64_t fallback);
    /* i-th string of a list key; NULL past the end. */
    const char *(*config_get_list)(void *host, const char *key, size_t i);

    void *(*alloc)(size_t size); /* never NULL unless out of memory */
    void (*free)(void *ptr);

    /* descriptor access */
    int (*desc_set_str)(tern_desc *d, const char *key, const char *value);
    int (*desc_set_u64)(tern_desc *d, const char *key, uint64_t value);
    int (*desc_set_u32_array)(tern_desc *d, const char *key,
                              const uint32_t *values, size_t n);
    /* NULL when absent or not a string; valid while d lives. */
    const char *(*desc_get_str)(const tern_desc *d, const char *key);
    /* TERN_ERR_NOT_FOUND when absent, TERN_ERR_PROTOCOL when not a u64. */
    int (*desc_get_u64)(const tern_desc *d, const char *key, uint64_t *value);
    /* Returns the element count (may exceed max; only max are written), or a
     * negative code when absent or not an array of uint32. */
    int (*desc_get_u32_array)(const tern_desc *d, const char *key,
                              uint32_t *values, size_t max);

    /* The engine's server name "host:port" and its configured I/O timeout. */
    const char *server_name;
    int io_timeout_ms;
    /* Root of sysfs (tests point it at fake trees). */
    const char *sysfs_root;

    /* ---- appended after v1.0 (check TERN_HAS_MEMBER) ---- */
    /* HMAC-SHA256 of msg with the engine's shared secret (auth_secret_file),
     * so a transport can authenticate its own data connections without
     * linking a crypto library (see transports/tcp/tcp_auth.h).  Returns 0,
     * or TERN_ERR_NOT_SUPPORTED when no secret is configured (any other
     * error: treat authentication as on and failing). */
    int (*auth_mac)(void *host, const void *msg, size_t len, uint8_t out[32]);

    /* ---- ABI 1.1 ---- */
    /* Hand back a finished slice (status and transferred set) from any
     * thread, or from inside submit(), exactly once per accepted slice.
     * The slice is the core's again: the plugin must not touch it
     * afterwards.  complete() never calls back into the plugin (retries,
     * connects and ep_close run on the core's own threads later), so a
     * plugin may call it with its own locks held. */
    void (*complete)(void *host, tern_slice *slice);

    /* ---- ABI 1.2: GPU memory (docs/gpu.md) ---- */
    /* The core stages every slice whose LOCAL memory is on a GPU for a
     * transport without TERN_CAP_GPU_DIRECT, so such a transport only meets
     * device memory as the target of a peer's request, inside memory it
     * registered.  mem_gpu says whether addr is device memory: the GPU
     * ordinal, or -1 for host memory (also when no CUDA driver is loaded).
     * Ask at mr_register time, not per request. */
    int (*mem_gpu)(void *host, const void *addr);
    /* Synchronous copy of len bytes where dst, src or both may be device
     * memory (the other side host memory).  0, or a tern_err with the
     * reason in err. */
    int (*mem_copy)(void *host, void *dst, const void *src, size_t len, char *err,
                    size_t errlen);
    /* Pinned host memory for a bounce buffer of GPU `gpu` (copies from and
     * to it run at the full rate); NULL when none can be had (then use
     * alloc()).  Free with pinned_free. */
    void *(*pinned_alloc)(void *host, int gpu, size_t len);
    void (*pinned_free)(void *host, void *ptr);
} tern_host_services;

/* ---- devices ------------------------------------------------------------- */
typedef struct tern_device_info {
    char name[TERN_NAME_MAX];  /* "mlx5_0", "rdmap0s6-rdm", "lo" */
    /* sysfs path of the device below the sysfs root, e.g.
     * "class/infiniband/mlx5_0/device" or "class/net/eth0/device"; the core
     * reads numa_node there.  "" = not a PCI device (NUMA node unknown). */
    char sysfs_path[256];
    int numa_node;             /* -2: let the core read sysfs; -1 unknown */
    uint32_t lid;              /* 0 where not meaningful */
    char gid[48];              /* "fe:80:..." or "" */
} tern_device_info;

/* ---- memory registration ------------------------------------------------- */
typedef struct tern_mr_keys {
    int ndev;                       /* devices covered, in device order */
    uint64_t lkey[TERN_MAX_DEVICES];
    uint64_t rkey[TERN_MAX_DEVICES];
} tern_mr_keys;

/* ---- endpoints ------------------------------------------------------------
 * An endpoint joins one local device to one peer NIC path
 * ("host:port@device").  The core caches endpoints by that pair. */
typedef struct tern_ep_params {
    uint32_t struct_size;
    int local_dev;              /* index into this transport's devices() */
    int peer_dev;               /* index into the peer's device list */
    const char *peer_name;      /* peer server name "host:port" */
    const char *peer_nic_path;  /* "host:port@device" */
    const char *local_nic_path; /* ours */
    const tern_desc *peer_segment; /* the peer's blob for this transport (its
                                      segment_describe output); never NULL */
    int passive;                /* 1 when created by an incoming handshake */
} tern_ep_params;

/* ---- slices ---------------------------------------------------------------
 * The unit of work the core hands to a transport.  Core-allocated; the
 * plugin must not free it and must return it exactly once, through the host
 * service complete() or through poll(). */
struct tern_slice {
    uint32_t struct_size;
    int opcode;                /* TERN_OP_READ or TERN_OP_WRITE (one of the caps) */
    void *local;               /* local address */
    uint64_t remote;           /* remote virtual address */
    uint64_t length;
    uint64_t lkey, rkey;       /* from the local and the peer's registration */
    int status;                /* set by the plugin before poll returns it:
                                  0 done, else a tern_err */
    uint64_t transferred;      /* set by the plugin */
    void *ep;                  /* the endpoint it was submitted on */
    void *plugin[4];           /* scratch for the plugin while it owns it */
    void *core;                /* core bookkeeping: do not touch */
    char errmsg[128];          /* optional reason on failure, set by plugin */
};

/* ---- the transport --------------------------------------------------------- */
typedef struct tern_transport {
    /* identity: checked by the loader before any plugin code runs */
    uint64_t magic;            /* TERN_TRANSPORT_MAGIC */
    uint32_t struct_size;      /* sizeof(tern_transport) when built */
    uint16_t abi_major;        /* TERN_TRANSPORT_ABI_MAJOR */
    uint16_t abi_minor;        /* TERN_TRANSPORT_ABI_MINOR */
    const char *name;          /* "tcp", "rdma", "efa", ... */
    const char *version;       /* plugin's own version string */
    uint64_t caps;             /* TERN_CAP_* */
    const tern_option *options; /* YAML keys accepted; ends with TERN_OPT_END */
    uint64_t default_slice_size; /* 0: the engine's slice_size */

    /* ---- mandatory ---- */

    /* Set up the transport.  *ctx is the plugin's context, passed to every
     * other call.  Return TERN_ERR_NOT_FOUND when there is no usable device
     * (the loader then reports "no device" and skips the transport). */
    int (*init)(const tern_host_services *host, void **ctx, char *err, size_t errlen);
    /* Tear down everything left (endpoints, registrations). */
    void (*fini)(void *ctx);

    /* Fill up to max devices; return the count (>= 1) or an error. */
    int (*devices)(void *ctx, tern_device_info *out, int max);

    /* Register memory with every device; fill keys->ndev, lkey[], rkey[].
     * *mr is the plugin's handle for deregister. */
    int (*mr_register)(void *ctx, void *addr, size_t len, tern_mr_keys *keys,
                       void **mr, char *err, size_t errlen);
    int (*mr_deregister)(void *ctx, void *mr);

    /* Write this transport's segment-level address blob (e.g. the TCP data
     * port, host).  Published in the segment descriptor under
     * "transports"[i]. */
    int (*segment_describe)(void *ctx, tern_desc *out);

    /* Create an endpoint (not yet connected). */
    int (*ep_open)(void *ctx, const tern_ep_params *params, void **ep,
                   char *err, size_t errlen);
    /* Write this endpoint's handshake fields (qp_num, local_lid, local_gid,
     * efa_addr, ...).  Not called for transports without TERN_CAP_HANDSHAKE,
     * which may leave it NULL. */
    int (*ep_describe)(void *ep, tern_desc *out);
    /* Bring the endpoint up with the peer's handshake fields (NULL for
     * transports without TERN_CAP_HANDSHAKE).  On failure, the message goes
     * back to the peer in reply_msg when this is the passive side. */
    int (*ep_connect)(void *ep, const tern_desc *peer, char *err, size_t errlen);
    /* Release an endpoint; slices still in flight complete with an error. */
    void (*ep_close)(void *ep);

    /* Start n slices on an endpoint.  Returns the number accepted (the rest
     * are resubmitted later by the core) or an error, in which case none
     * were accepted.  Each accepted slice comes back exactly once, through
     * complete() or poll().  TERN_ERR_UNREACHABLE (here, from ep_open or
     * from ep_connect) says this transport can never reach this peer: the
     * core then moves the peer to the next transport both sides share. */
    int (*submit)(void *ep, tern_slice *const *slices, int n);
    /* Return up to max finished slices (status set); wait up to timeout_ms
     * when none is ready.  Returns the count (0 on timeout) or an error.
     * May be NULL in a plugin built for ABI 1.1 or later that hands slices
     * back through the host service complete() instead. */
    int (*poll)(void *ctx, tern_slice **done, int max, int timeout_ms);

    /* ---- optional (v1.0): may be NULL ---- */

    /* Return the endpoint to a connectable state after a failure (e.g. QPs
     * to RESET); NULL means the core closes and reopens it.  The core also
     * calls it on an endpoint whose NIC pair stalled (nothing came back
     * while the peer's other pairs moved): the plugin then fails every
     * slice in flight on it (they come back through complete() and the
     * core sends them over another pair), makes sure no byte still queued
     * there reaches the peer later, and keeps the endpoint usable. */
    int (*ep_reset)(void *ep);
    /* Free-form status text for tern-info (counters, versions). */
    int (*query)(void *ctx, const char *what, char *out, size_t outlen);
} tern_transport;

/* Size of the first published layout: anything smaller is refused. */
#define TERN_TRANSPORT_V1_0_SIZE offsetof(tern_transport, ep_reset)

#ifdef __cplusplus
}
#endif
#endif
