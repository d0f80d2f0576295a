/* transports/shm/shm_internal.h: the same-host transport's shared types.
 *
 * Files: shm.c (the vtable: init, devices, registrations, endpoints,
 * submit), shm_ident.c (who a peer is and whether this process may reach
 * it), shm_table.c (the registration table each process publishes in its own
 * memory and the peer reads before every copy), shm_pool.c (the worker
 * threads that copy), shm_copy.c (one chunk's copy, below the pool, and
 * an endpoint's last reference), shm_drain.c (the processes that copy into ours, and
 * the wait at deregistration for their copies under way), shm_map.c (peers'
 * shared files mapped), shm_relay.c (the ring a target serves for private
 * memory), shm_stream.c (the relay's copy into its final place).  The protocol is in docs/protocol.md, "Same-host
 * transport". */
#ifndef TERN_SHM_INTERNAL_H
#define TERN_SHM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <tern/plugin_kit.h>

#define SHM_VERSION "1.0.0"

#define SHM_TABLE_MAGIC 0x33544D48534E5254ULL /* "TRNSHMT3" */
#define SHM_PROOF_MAGIC 0x31504D48534E5254ULL /* "TRNSHMP1" */
#define SHM_PROOF_SLOTS 64
#define SHM_COPY_SLOTS 64 /* >= the most workers a context runs */
#define SHM_MAX_COPIERS 256

/* ---- the published table (see docs/protocol.md, Same-host transport) ---- */

/* A registration.  fd >= 0: the range is a shared mapping of that open
 * file of the owner, at file offset foff, whose inode is ino (shm_map.c):
 * a peer may map it instead of using cross-memory attach.  fd -1: not. */
typedef struct shm_entry {
    uint64_t addr, len, key;
    int64_t fd;
    uint64_t foff, ino;
} shm_entry;

/* One handshake's proof: "I, the owner of this table, was asked by
 * peer_instance with this nonce". */
typedef struct shm_proof {
    uint64_t magic;
    uint64_t peer_instance;
    uint64_t nonce[2];
} shm_proof;

/* The header a peer reads before each copy: one process_vm_readv. */
typedef struct shm_head {
    uint64_t magic;
    uint64_t instance;  /* random per context, published */
    uint64_t seq;       /* seqlock: odd while entries change */
    uint64_t n;         /* entries in use */
    uint64_t cap;
    uint64_t reserved[3];
} shm_head;

/* One copy under way from this process, published so that the process it
 * copies into can wait for it when it deregisters the range: "copying into
 * the table with `instance`, whose registrations were checked at its `seq`
 * (0: not read yet), our own local range checked at our `lseq` (0: not
 * yet)".  instance 0: the slot is free. */
typedef struct shm_copying {
    uint64_t instance;
    uint64_t seq;
    uint64_t lseq;
    uint64_t reserved;
} shm_copying;

typedef struct shm_table {
    shm_head head;
    shm_copying copying[SHM_COPY_SLOTS];
    shm_proof proofs[SHM_PROOF_SLOTS];
    shm_entry entries[]; /* head.cap of them */
} shm_table;

/* ---- identity of a process ------------------------------------------------ */

typedef struct shm_ident {
    uint64_t pid;
    uint64_t start;     /* start time, clock ticks after boot (/proc/PID/stat) */
    uint64_t pidns;     /* inode of /proc/PID/ns/pid */
    uint64_t uid;
    uint64_t instance;
    uint64_t table;     /* address of its shm_table */
    char boot[40];      /* /proc/sys/kernel/random/boot_id */
} shm_ident;

int shm_ident_self(shm_ident *id, uint64_t instance, uint64_t table, char *err, size_t errlen);
int shm_ident_put(const tern_host_services *h, tern_desc *d, const shm_ident *id);
/* TERN_ERR_PROTOCOL when a key is missing. */
int shm_ident_get(const tern_host_services *h, const tern_desc *d, shm_ident *id, char *err,
                  size_t errlen);
/* Same boot, same pid namespace, pid alive with the same start time, and
 * its table readable with the published magic and instance.  Returns 0 or
 * TERN_ERR_UNREACHABLE with the cause and the fix in err. */
int shm_ident_reach(const shm_ident *self, const shm_ident *peer, char *err, size_t errlen);
/* Why process_vm_* on pid failed with errno e: one sentence, cause and fix. */
void shm_ident_explain(pid_t pid, int e, char *out, size_t outlen);
int shm_random(void *buf, size_t len);
/* The proof value of a handshake (shm_bind.c): nonce bound to the direction
 * (to_target: the target's echo) and both segment names. */
int shm_bind(const tern_host_services *h, int to_target, const uint64_t nonce[2],
             const char *initiator, const char *target, uint64_t out[2]);

/* ---- this process's table (shm_table.c) ------------------------------------ */

typedef struct shm_local {
    shm_table *t;
    size_t bytes;
    pthread_rwlock_t lock; /* writers (de)register; readers check local ranges */
    uint64_t next_key;
    atomic_uint proof_next;
    atomic_uint_fast64_t copy_map; /* claimed copying[] slots, one bit each */
} shm_local;

int shm_local_init(shm_local *l, uint64_t cap, char *err, size_t errlen);
void shm_local_fini(shm_local *l);
/* e: the entry without its key (addr, len and the backing file, if any). */
int shm_local_add(shm_local *l, const shm_entry *e, uint64_t *key);
/* Removes the entry with key; *seq gets the table's seq after the change
 * (what a copy checked later sees). */
int shm_local_remove(shm_local *l, uint64_t key, uint64_t *seq);
/* Whether [addr, addr+len) lies in the entry with key; a copy in slot
 * (>= 0) records the seq it was checked at. */
int shm_local_covers(shm_local *l, int slot, uint64_t key, uint64_t addr, uint64_t len);
/* The relay's copy into (to_local) or out of our own [addr, addr+len),
 * under the table's lock so a deregistration waits for it: 0, or
 * TERN_ERR_RANGE when the range is not inside the registration with key. */
int shm_local_move(shm_local *l, uint64_t key, uint64_t addr, uint64_t len, void *buf,
                   int to_local);
/* A copy into the table `instance`: claims a copying[] slot (published
 * before the target's table is read), records the target's seq its range
 * was checked at, frees it when the bytes are moved. */
int shm_copy_begin(shm_local *l, uint64_t instance);
void shm_copy_checked(shm_local *l, int slot, uint64_t seq);
void shm_copy_end(shm_local *l, int slot);
/* Whether a copy of ours that checked our own table before seq is still
 * under way (deregistration waits for it). */
int shm_local_copying_before(shm_local *l, uint64_t seq);
/* Publishes a proof; returns its slot. */
unsigned shm_local_prove(shm_local *l, uint64_t peer_instance, const uint64_t nonce[2]);

/* ---- a peer's table, read through process_vm_readv ----------------------- */

typedef struct shm_remote {
    pid_t pid;
    uint64_t table, instance;
    pthread_rwlock_t lock; /* guards the cached copy */
    uint64_t seq;          /* seq of the cached entries; odd = none yet */
    uint64_t n, cap;
    shm_entry *e;
} shm_remote;

void shm_remote_init(shm_remote *r, pid_t pid, uint64_t table, uint64_t instance);
void shm_remote_fini(shm_remote *r);
/* Reads the peer's CURRENT header (and entries when they changed) and
 * checks [addr, addr+len) lies in the registration with key; *seq gets the
 * peer's seq the check was made at.  0, or
 * TERN_ERR_RANGE / TERN_ERR_CLOSED / TERN_ERR_UNREACHABLE with msg. */
int shm_remote_check(shm_remote *r, uint64_t key, uint64_t addr, uint64_t len, uint64_t *seq,
                     shm_entry *hit, char *msg, size_t msglen);
/* Whether the cached table still holds a registration with key. */
int shm_remote_has_key(shm_remote *r, uint64_t key);
/* Reads proof slot `slot` of the peer's table. */
int shm_remote_proof(const shm_remote *r, unsigned slot, shm_proof *out, char *err,
                     size_t errlen);
/* process_vm_readv of len bytes at the peer's addr into buf: 0 or -errno. */
int shm_peek(pid_t pid, uint64_t addr, void *buf, size_t len);

/* ---- shared mappings of a peer's memory (shm_map.c) ------------------------- */

/* Where [addr, addr+len) of this process is a shared mapping of a file we
 * hold open (tern_alloc_memory's memory): fills fd, foff and ino of e
 * (fd -1 when it is not). */
void shm_backing_find(shm_entry *e);

#define SHM_MAP_SLOTS 16

typedef struct shm_map {
    shm_entry e;        /* the registration mapped (key, addr, len, ino, foff) */
    uint8_t *base;      /* e.addr in our mapping; NULL: cannot be mapped */
    void *m;
    size_t mlen;
    int users;
} shm_map;

/* An endpoint's mappings of its peer's registrations, at most
 * SHM_MAP_SLOTS; a slot in use is never unmapped. */
typedef struct shm_maps {
    pthread_mutex_t lock;
    shm_map slot[SHM_MAP_SLOTS];
    unsigned next;
} shm_maps;

void shm_maps_init(shm_maps *m);
void shm_maps_fini(shm_maps *m);
/* The slot mapping registration e of process pid, *base where e->addr is
 * mapped here; or -1: copy with cross-memory attach.  Release with
 * shm_maps_put. */
int shm_maps_get(shm_maps *m, const tern_host_services *h, shm_remote *r, pid_t pid,
                 const shm_entry *e, uint8_t **base);
void shm_maps_put(shm_maps *m, int slot);

/* ---- the relay (shm_relay.c): a copy in two halves through a shared ring ------ */

#define SHM_RELAY_MAX_RINGS 64
#define SHM_RELAY_MAX_SLOTS 64
#define SHM_RELAY_MAX_SLOT_SIZE (1u << 20)

/* The initiator's ring file: one ring per copier at a time (busy). */
typedef struct shm_relay_tx {
    int fd, pidfd;
    uint64_t ino;
    uint8_t *map;
    size_t mlen;
    uint32_t rings, slots, slot_size;
    uint64_t next[SHM_RELAY_MAX_RINGS]; /* slots posted so far, per ring (its holder's) */
    atomic_uint_fast64_t busy;          /* rings held by a copier, one bit each */
    atomic_int on;                      /* the target serves it and nothing broke */
} shm_relay_tx;

void shm_relay_tx_init(shm_relay_tx *tx);
/* A sealed memfd of `rings` rings of `slots` slots of slot_size bytes. */
int shm_relay_tx_create(shm_relay_tx *tx, uint32_t rings, uint32_t slots, uint32_t slot_size,
                        char *err, size_t errlen);
/* The handshake reply said the target serves it. */
void shm_relay_tx_start(shm_relay_tx *tx, pid_t target);
void shm_relay_tx_fini(shm_relay_tx *tx);
/* One chunk through the relay: 0; TERN_ERR_RANGE / TERN_ERR_REFUSED (the
 * target refused the range); SHM_RELAY_AGAIN (the target stopped
 * answering and nothing of the chunk is in its hands: copy it another
 * way); TERN_ERR_CLOSED / TERN_ERR_TIMEOUT (it went away, or stopped in
 * the middle of a copy).  After any of the last three the ring is off. */
#define SHM_RELAY_AGAIN 1
int shm_relay_copy(shm_relay_tx *tx, int op, uint8_t *local, uint64_t key, uint64_t remote,
                   uint64_t len, int64_t timeout_ms, char *msg, size_t msglen);

/* memcpy into memory that will not be read soon (streaming stores on
 * x86-64; shm_stream.c). */
void shm_copy_stream(void *dst, const void *src, size_t n);

/* The target's side: a thread serving one initiator's ring file. */
typedef struct shm_relay_rx shm_relay_rx;
int shm_relay_rx_start(shm_local *local, atomic_uint_fast64_t *served, pid_t pid, int64_t fd,
                       uint64_t ino, shm_relay_rx **out, char *err, size_t errlen);
void shm_relay_rx_describe(const shm_relay_rx *rx, uint32_t *rings, uint32_t *slots,
                           uint32_t *slot_size);
void shm_relay_rx_stop(shm_relay_rx *rx);

/* ---- context and endpoints ---------------------------------------------------- */

typedef struct shm_pool shm_pool;
typedef struct shm_job shm_job;

/* The processes that proved a handshake with us as initiators, i.e. that
 * may copy into our memory (shm_drain.c). */
typedef struct shm_copiers {
    pthread_mutex_t lock;
    shm_ident id[SHM_MAX_COPIERS];
    int n;
    unsigned evict; /* next slot replaced when full */
} shm_copiers;

/* The YAML keys, filled by offset (tern/plugin_kit.h; the table is in shm.c). */
typedef struct shm_opts {
    int64_t workers;     /* 0: the online CPUs, at most 8 */
    int64_t chunk_size;
    int64_t slice_size;  /* read by the core */
    int64_t max_registrations;
    int64_t unregister_wait_ms;
    int64_t relay_slots;      /* 0: no relay */
    int64_t relay_slot_size;
    int64_t relay_timeout_ms;
} shm_opts;

typedef struct shm_ctx {
    const tern_host_services *host;
    shm_opts opt;
    shm_ident self;
    shm_local local;
    shm_pool *pool;
    shm_copiers copiers;
    int workers;
    uint64_t chunk;
    atomic_uint_fast64_t mapped_bytes, cma_bytes, relay_bytes; /* copied each way (query) */
    atomic_uint_fast64_t served_bytes; /* copied by our relays for peers */
    pthread_mutex_t log_lock; /* one log line per distinct unreachable cause */
    char last_unreachable[256];
} shm_ctx;

typedef struct shm_ep {
    shm_ctx *ctx;
    int passive;
    int have_blob;       /* active: identity from the peer's segment blob */
    shm_ident peer;
    shm_remote remote;
    shm_maps maps;       /* the peer's shared registrations we mapped */
    shm_relay_tx tx;     /* active: our ring, when the target serves it */
    shm_relay_rx *rx;    /* passive: the thread serving the initiator's ring */
    uint64_t nonce[2];
    unsigned slot;       /* our proof slot for this handshake */
    char initiator[256], target[256]; /* segment names the proofs bind (shm_bind) */
    int connected;
    int unreachable;     /* passive: the peer could not be proven from here */
    char why[256];
    /* Life: one reference for the core (dropped by ep_close) and one per
     * queued slice, so a slice still queued after ep_close never sees freed
     * memory; ep_close waits only for chunks being copied (running), never
     * for queued ones, which may need the very worker that called it. */
    atomic_int refs;
    atomic_int running;
    atomic_int closing;
    pthread_mutex_t lock;
    pthread_cond_t idle;
} shm_ep;

/* ---- the worker pool (shm_pool.c) --------------------------------------------- */

int shm_pool_start(shm_ctx *ctx, int workers, shm_pool **out, char *err, size_t errlen);
void shm_pool_stop(shm_pool *p);
/* A job for one slice (its ranges are checked chunk by chunk); holds a
 * reference on ep.  NULL when out of memory. */
shm_job *shm_job_new(shm_pool *p, shm_ep *ep, tern_slice *s);
/* Queues the list first..last (n jobs, linked through next). */
void shm_pool_push(shm_pool *p, shm_job *first, shm_job *last, int n);
/* The link of a job list. */
void shm_job_link(shm_job *j, shm_job *next);

/* ---- copies into our memory (shm_drain.c) ----------------------------------- */

void shm_copiers_init(shm_copiers *c);
void shm_copiers_fini(shm_copiers *c);
/* Remembers a process that may copy into ours (a handshake's initiator). */
void shm_copiers_add(shm_copiers *c, const shm_ident *id);
/* After a deregistration that left our table at seq: waits, up to wait_ms,
 * until no copy checked against an older table is under way, ours (into
 * our own range) or a copier's (into our memory).  0, or TERN_ERR_TIMEOUT
 * with msg naming the process still copying. */
int shm_drain_wait(shm_ctx *ctx, uint64_t seq, int wait_ms, char *msg, size_t msglen);

/* Drops a reference; the last one frees the endpoint (shm_copy.c). */
void shm_ep_unref(shm_ep *ep);

/* Copy one chunk [off, off+len) of s: checks and process_vm_*; 0 or a
 * tern_err with msg (shm_copy.c).  Refuses (CLOSED) once ep_close began. */
int shm_copy_chunk(shm_ep *ep, tern_slice *s, uint64_t off, uint64_t len, char *msg,
                   size_t msglen);

#endif
