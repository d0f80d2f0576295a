/* tern: the application API.
 *
 * One engine per process.  An engine has a server name (host:port of its
 * handshake daemon), a metadata backend, a topology and the transports its
 * configuration loaded.  Applications register memory, open peers' segments
 * by name and move bytes with batches of READ/WRITE requests.
 *
 * Threading: every function is safe to call from any thread, except that a
 * given batch must not be submitted to, waited on, reset or freed from two
 * threads at once (tern_batch_state, _fd, _inflight, _cancel and
 * _notify_error may run beside those).  No callback runs on an
 * application thread, the log hook of tern_engine_create_with excepted (it
 * runs where the line is logged): completions and notifications are
 * observed through the wait calls or the eventfds (docs/api.md).  Errors:
 * negative tern_err codes; tern_engine_last_error() holds
 * the message for the calling thread's last failure on that engine.
 */
#ifndef TERN_TERN_H
#define TERN_TERN_H

#include <stddef.h>
#include <stdint.h>

#include "tern/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TERN_VERSION_MAJOR 0
#define TERN_VERSION_MINOR 1
#define TERN_VERSION_PATCH 0
#define TERN_VERSION_STRING "0.1.0"

typedef struct tern_engine tern_engine;
typedef struct tern_batch tern_batch;
typedef int32_t tern_segment_id;

/* ---- engine ----------------------------------------------------------- */

/* Create an engine from a YAML file.  path NULL: $TERN_CONFIG, else the
 * embedded default, config/tern.yaml (shm for peers on this host, else tcp;
 * p2p metadata; 127.0.0.1:12001).  On failure returns
 * NULL and, when err is not NULL, writes the reason into err. */
tern_engine *tern_engine_create(const char *path, char *err, size_t errlen);

/* The same with the configuration's server_name replaced by `server_name`
 * (NULL keeps it), e.g. "127.0.0.1:0" to run another engine beside one that
 * holds the configured port. */
tern_engine *tern_engine_create_as(const char *path, const char *server_name,
                                   char *err, size_t errlen);

/* The same from YAML text held in memory; `origin` names it in messages. */
tern_engine *tern_engine_create_from_yaml(const char *yaml, const char *origin,
                                          char *err, size_t errlen);

/* Stops the daemon and transports, unpublishes the segment, frees all. */
void tern_engine_destroy(tern_engine *engine);

/* "host:port" actually listening (a configured port 0 is resolved). */
const char *tern_engine_server_name(const tern_engine *engine);

/* Message for the calling thread's last failure on this engine ("" if none). */
const char *tern_engine_last_error(const tern_engine *engine);

/* ---- describing a configuration --------------------------------------- */

/* What tern_engine_create(path, ...) would be made of, without starting
 * anything (no daemon, no port, no metadata backend), as JSON text in
 * *json_out (caller frees with free()): the resolved configuration
 * ("config"), every configured transport with its load outcome, options,
 * devices and topology ("transports"), the shared secret check ("auth"),
 * "ok" and "error".  The checks are the engine's own: what fails here makes
 * tern_engine_create fail too.
 *
 * Returns 0 when the engine could be created from it.  An invalid
 * configuration returns TERN_ERR_CONFIG with *json_out NULL; a transport,
 * topology or secret that fails returns its error with *json_out still set
 * (the report shows every outcome).  The reason is in err either way.
 *
 * flags: TERN_DESCRIBE_VERBOSE logs the loader down to debug on stderr;
 * TERN_DESCRIBE_CONFIG_ONLY stops after the configuration ({"config": ...},
 * no transport is loaded); TERN_DESCRIBE_SCHEMA returns instead
 * {"keys": [...]}, the table of configuration keys (key, type, accepts,
 * min, max, choices, default, env, help), and ignores path. */
#define TERN_DESCRIBE_VERBOSE 1u
#define TERN_DESCRIBE_SCHEMA 2u
#define TERN_DESCRIBE_CONFIG_ONLY 4u
int tern_config_describe(const char *path, unsigned flags, char **json_out,
                         char *err, size_t errlen);

/* ---- memory ----------------------------------------------------------- */

/* Register [addr, addr+len) with every loaded transport and publish it.
 * location: "cpu:0" etc., or NULL/"" / "*" to detect it with libnuma.
 * Overlap with an existing registration: TERN_ERR_EXISTS. */
int tern_register_memory(tern_engine *engine, void *addr, size_t len,
                         const char *location);
int tern_unregister_memory(tern_engine *engine, void *addr);

/* Memory tern allocates for the application (docs/protocol.md, "Memory
 * tern allocates"): len bytes rounded up to the page size, zeroed,
 * registered as tern_register_memory_named(engine, *out, len, location,
 * name) does.  It is a shared-memory file mapped into this process, so a
 * same-host peer's shm transport maps the same pages and copies with a
 * plain memcpy instead of cross-memory attach.  tern_free_memory
 * unregisters and unmaps it; tern_engine_destroy frees what is left.
 * An address tern_alloc_memory did not return is TERN_ERR_NOT_FOUND. */
#define TERN_API_ALLOC 1 /* this header has tern_alloc_memory and tern_free_memory */
int tern_alloc_memory(tern_engine *engine, size_t len, const char *location,
                      const char *name, void **out);
int tern_free_memory(tern_engine *engine, void *addr);

/* ---- GPU memory (see docs/gpu.md) --------------------------------------
 * The CUDA driver is loaded at run time on first use ($TERN_CUDA_LIBRARY,
 * else libcuda.so.1); without it these return TERN_ERR_NOT_SUPPORTED and
 * tern_engine_last_error() says why.  tern_register_memory detects device
 * memory itself and records it as "cuda:N". */

/* Number of GPUs the driver sees (>= 0), or an error when none can load. */
int tern_gpu_count(tern_engine *engine);
/* Device memory on GPU `gpu` (cuMemAlloc); free with tern_gpu_free. */
int tern_gpu_alloc(tern_engine *engine, int gpu, size_t len, void **out);
int tern_gpu_free(tern_engine *engine, void *ptr);
/* Synchronous copy where either side (or both) may be device memory. */
int tern_gpu_copy(tern_engine *engine, void *dst, const void *src, size_t len);

/* The same with an application name ("kv/layer0"): peers find the buffer
 * by it (tern_segment_buffer_find).  name NULL or "" is unnamed; at most
 * TERN_BUFFER_NAME_MAX - 1 bytes of [A-Za-z0-9._/:-]; a name already
 * registered on this engine is TERN_ERR_EXISTS.  location as for
 * tern_register_memory, plus "cuda:N" for device memory of GPU N (docs/gpu.md):
 * one that contradicts the memory ("cuda:0" for host memory) is
 * TERN_ERR_INVAL; "cuda:N" without a CUDA driver, or any other kind
 * ("gpu:0"), is TERN_ERR_NOT_SUPPORTED. */
#define TERN_BUFFER_NAME_MAX 128
int tern_register_memory_named(tern_engine *engine, void *addr, size_t len,
                               const char *location, const char *name);

/* Register n regions with one descriptor publish.  All or nothing: on an
 * error none of them stays registered and the message names the region. */
typedef struct tern_memory_region {
    void *addr;
    size_t length;
    const char *location; /* as tern_register_memory; NULL: detect */
    const char *name;     /* as tern_register_memory_named; NULL: unnamed */
} tern_memory_region;
int tern_register_memory_batch(tern_engine *engine, const tern_memory_region *regions,
                               size_t n);
/* Unregister n regions by address with one publish; stops at the first
 * that is not registered (TERN_ERR_NOT_FOUND, the rest stay). */
int tern_unregister_memory_batch(tern_engine *engine, void *const *addrs, size_t n);

/* ---- segments --------------------------------------------------------- */

/* Open a peer's segment by its server name; returns an id >= 0. */
tern_segment_id tern_segment_open(tern_engine *engine, const char *name);
int tern_segment_close(tern_engine *engine, tern_segment_id id);

/* The segment descriptor as JSON text (caller frees with free()).  id
 * TERN_LOCAL_SEGMENT gives this engine's own descriptor. */
#define TERN_LOCAL_SEGMENT (-1)
int tern_segment_descriptor(tern_engine *engine, tern_segment_id id,
                            char **json_out);

/* Name of the transport this engine uses to reach the segment ("tcp"). */
int tern_segment_transport(tern_engine *engine, tern_segment_id id,
                           char *name, size_t namelen);

/* One registered buffer of a segment. */
typedef struct tern_buffer_info {
    char name[TERN_BUFFER_NAME_MAX]; /* application name, "" if unnamed */
    uint64_t addr;                   /* the owner's virtual address: use it
                                        as tern_request.remote */
    uint64_t length;
    char location[32];               /* "cpu:0", ... */
} tern_buffer_info;

/* The segment's buffers, sorted by address: writes min(count, max) entries
 * to out (out may be NULL when max is 0) and returns the count.  The
 * descriptor is fetched again first, so buffers the peer registered (or
 * dropped) since the segment was opened are listed; when the peer cannot
 * be reached the cached descriptor answers.  id TERN_LOCAL_SEGMENT lists
 * this engine's own. */
int tern_segment_buffers(tern_engine *engine, tern_segment_id id, tern_buffer_info *out,
                         size_t max);
/* The buffer named `name` (cached descriptor first; refetched when it is
 * not there).  0, or TERN_ERR_NOT_FOUND. */
int tern_segment_buffer_find(tern_engine *engine, tern_segment_id id, const char *name,
                             tern_buffer_info *out);

/* ---- notifications ---------------------------------------------------- */

/* A notification is (from, name, msg): from is the sender's server name,
 * name at most 255 bytes, msg a NUL-terminated string of at most
 * TERN_NOTIFY_MAX bytes.  The receiver queues up to TERN_NOTIFY_QUEUE;
 * nothing is dropped: a send to a full queue fails TERN_ERR_BUSY (the
 * receiver counts it in tern_notify_stats.refused) and the sender may try
 * again.  Sends to one peer share one control connection, opened on the
 * first send and kept (docs/api.md, Notifications). */
#define TERN_NOTIFY_MAX 65536
#define TERN_NOTIFY_QUEUE 1024
/* Send a message to the segment's owner; returns once the peer queued it
 * (0) or refused it (TERN_ERR_BUSY: its queue is full). */
int tern_notify_send(tern_engine *engine, tern_segment_id id,
                     const char *name, const char *msg);
/* Pop one received notification; returns 1 if one was written, 0 if none.
 * from/name/msg are NUL-terminated and truncated to their buffers. */
int tern_notify_recv(tern_engine *engine, char *from, size_t fromlen,
                     char *name, size_t namelen, char *msg, size_t msglen);
/* The same, waiting up to timeout_ms (-1: forever) for one: 1, or 0 when
 * the time passed. */
int tern_notify_recv_wait(tern_engine *engine, char *from, size_t fromlen,
                          char *name, size_t namelen, char *msg, size_t msglen,
                          int timeout_ms);
/* An eventfd (EFD_NONBLOCK, owned by the engine: do not close it) that is
 * readable while notifications are queued.  Poll it, then call
 * tern_notify_recv until it returns 0; the fd is drained by
 * tern_notify_recv, never read it yourself. */
int tern_notify_fd(tern_engine *engine);

typedef struct tern_notify_stats {
    uint64_t received;  /* queued by this engine */
    uint64_t delivered; /* popped by tern_notify_recv */
    uint64_t refused;   /* sends refused because the queue was full */
    uint64_t queued;    /* in the queue now */
    uint64_t sent;      /* sends of this engine the peer accepted */
    uint64_t send_failed; /* sends of this engine that returned an error */
} tern_notify_stats;
int tern_notify_stats_get(tern_engine *engine, tern_notify_stats *out);

/* ---- batches ---------------------------------------------------------- */

typedef enum tern_opcode { TERN_READ = 0, TERN_WRITE = 1 } tern_opcode;

typedef enum tern_status {
    TERN_WAITING = 0,
    TERN_PENDING = 1,
    TERN_INVALID = 2,
    TERN_CANCELED = 3,
    TERN_COMPLETED = 4,
    TERN_TIMEOUT = 5,
    TERN_FAILED = 6,
} tern_status;

typedef struct tern_request {
    tern_opcode opcode;
    void *local;             /* inside memory registered on this engine */
    tern_segment_id segment; /* from tern_segment_open */
    uint64_t remote;         /* virtual address in the peer's registered memory */
    uint64_t length;
    uint32_t timeout_ms;     /* 0: none; else the request ends TIMEOUT */
} tern_request;

typedef struct tern_request_state {
    tern_status status;
    uint64_t transferred;    /* bytes completed so far */
    int error;               /* tern_err of the failure, 0 otherwise */
} tern_request_state;

tern_batch *tern_batch_alloc(tern_engine *engine, size_t capacity);
/* Append n requests; each starts WAITING then PENDING.  Returns n, or an
 * error if the batch is full.  A request that cannot be valid (unregistered
 * local memory, unknown segment, zero length) is stored as INVALID. */
int tern_batch_submit(tern_batch *batch, const tern_request *reqs, size_t n);
int tern_batch_state(tern_batch *batch, size_t index, tern_request_state *out);
/* A request's final status is published only when no transport holds any
 * of its slices, so its local memory is the application's again -- except
 * TIMEOUT, which is published at the deadline: until tern_batch_free
 * succeeds, a timed-out request's memory may still be read or written.
 *
 * Wait until no request is WAITING/PENDING, or timeout_ms passes (-1 =
 * forever).  Returns 0 when all ended COMPLETED, TERN_ERR_TIMEOUT when the
 * wait timed out, or the first failed request's error otherwise -- which
 * may itself be TERN_ERR_TIMEOUT (a request whose peer went silent): when
 * the difference matters, tern_batch_state tells whether any is pending. */
int tern_batch_wait(tern_batch *batch, int timeout_ms);
/* The message of the failure of request `index` ("" if none). */
const char *tern_batch_error(tern_batch *batch, size_t index);
/* Refused with TERN_ERR_BUSY while requests are in flight. */
int tern_batch_free(tern_batch *batch);
/* Requests submitted so far. */
size_t tern_batch_size(const tern_batch *batch);

/* An eventfd (EFD_NONBLOCK, owned by the batch: do not close it) that
 * becomes readable when a request of the batch reaches its final status
 * (and when a notification attached to the batch is handed over).  Poll
 * it, then check with tern_batch_state or tern_batch_wait(batch, 0);
 * tern_batch_wait and tern_batch_reset drain it.  Read it to clear it
 * yourself if you poll again before calling those. */
int tern_batch_fd(tern_batch *batch);

/* Empty the batch for reuse once every request has its final status and
 * no slice is held anywhere (COMPLETED/FAILED/INVALID/CANCELED, and a
 * TIMEOUT's slices are back).  TERN_ERR_BUSY otherwise. */
int tern_batch_reset(tern_batch *batch);

/* End every WAITING/PENDING request CANCELED (error TERN_ERR_CANCELED).
 * Returns the number of requests canceled.  Slices not yet handed to a
 * transport are dropped; slices a transport holds are left to finish and
 * ignored.  As with TIMEOUT, a canceled request is published at once and
 * its memory may still be read or written until tern_batch_reset or
 * tern_batch_free succeeds (both refuse with TERN_ERR_BUSY until every
 * slice is back; tern_batch_inflight counts them). */
int tern_batch_cancel(tern_batch *batch);
/* Slices of the batch the core or a transport still holds. */
long tern_batch_inflight(tern_batch *batch);

/* tern_batch_submit, then send (name, msg) to segment `notify_seg` once
 * every request of this call has COMPLETED: the peer receives it only
 * after all their bytes are in its memory (for WRITE, in the target's).
 * If a request of the call does not complete, the notification is not
 * sent.  tern_batch_wait covers the notification: it returns once it was
 * handed over (0) or has failed (its error, also in
 * tern_batch_notify_error). One notification per call; several calls may
 * each carry one. */
int tern_batch_submit_with_notify(tern_batch *batch, const tern_request *reqs, size_t n,
                                  tern_segment_id notify_seg, const char *name,
                                  const char *msg);
/* The outcome of the batch's notifications: 0 when all were sent (or none
 * attached), 1 while one is pending, else the first one's error; the
 * message is in why (may be NULL). */
int tern_batch_notify_error(tern_batch *batch, char *why, size_t whylen);

/* ---- one request ------------------------------------------------------ */

/* Submit one request on a private batch and wait for it (timeout_ms -1:
 * forever; on TERN_ERR_TIMEOUT the request is canceled and the call
 * returns only once no transport holds its memory).  0 or the error. */
int tern_transfer_sync(tern_engine *engine, tern_opcode opcode, void *local,
                       tern_segment_id segment, uint64_t remote, uint64_t length,
                       int timeout_ms);

/* ---- creation with options, and the log hook ---------------------------- */

/* Receives every log line of an engine that passes its log_level: level
 * 0 error, 1 warn, 2 info, 3 debug (TERN_LOG_* in tern/transport.h), the
 * engine's name (its server_name, "" before it has one) and the message (no
 * time, no newline).
 * Return 0 to take the line over, nonzero to have the engine also write it
 * to stderr in its log_format.  Called on whichever thread logs, engine
 * threads and application threads alike, possibly from several at once and
 * while engine locks are held: it must be thread-safe, return promptly and
 * not call into the same engine.  The strings live for the call only. */
typedef int (*tern_log_hook)(void *user, int level, const char *engine, const char *msg);
#define TERN_LOG_HOOK 1 /* this header has tern_log_hook and tern_engine_create_with */

/* What tern_engine_create_with builds an engine from.  Zero it, set size to
 * sizeof(tern_engine_options) and fill what you need; fields may be added
 * at the end, and the engine reads only the first `size` bytes, so a
 * program built against an older header keeps working. */
typedef struct tern_engine_options {
    size_t size;              /* sizeof(tern_engine_options) */
    const char *config_path;  /* YAML file; NULL: $TERN_CONFIG, else the default */
    const char *config_yaml;  /* YAML text instead of a file (config_path ignored) */
    const char *origin;       /* names config_yaml in messages; NULL: "<yaml>" */
    const char *server_name;  /* replaces the configuration's; NULL keeps it */
    tern_log_hook log_hook;   /* NULL: lines go to stderr */
    void *log_user;           /* log_hook's first argument */
} tern_engine_options;

/* Create an engine as tern_engine_create/_as/_from_yaml do, with the log
 * hook in place before the first line: every line of the engine's life,
 * creation and destruction included, goes to it.  NULL on failure, the
 * reason in err (a bad options->size is TERN_ERR_INVAL's message). */
tern_engine *tern_engine_create_with(const tern_engine_options *options, char *err,
                                     size_t errlen);
/* ---- closing and liveness --------------------------------------------- */

/* Defined when tern_engine_close and tern_segment_probe are there. */
#define TERN_API_CLOSE_PROBE 1

/* Close the engine from any thread: every thread blocked in it
 * (tern_notify_recv_wait, tern_batch_wait with a timeout other than 0,
 * tern_transfer_sync) is woken and returns TERN_ERR_CLOSED, and this call
 * returns once all of them have left (a tern_transfer_sync first waits for
 * its slices, which the transports hand back within io_timeout_ms).  From
 * then on those calls return TERN_ERR_CLOSED at once instead of blocking
 * (a batch that already finished still gives its result), and so do
 * tern_batch_submit and tern_batch_submit_with_notify; a non-blocking call
 * behaves as before, so a thread that was not blocked sees nothing
 * different.  The engine stays allocated: free its batches,
 * then tern_engine_destroy (which closes it first when this was not
 * called).  Idempotent; TERN_ERR_INVAL for NULL. */
int tern_engine_close(tern_engine *engine);

/* Is the engine named `name` ("host:port", its server name; no segment
 * need be open) alive?  Sends one Probe frame to its handshake daemon,
 * connect and answer each within timeout_ms (<= 0: io_timeout_ms).
 * 0 when it answered; TERN_ERR_TIMEOUT when it accepted the connection but
 * did not answer (stopped, hung or overloaded), TERN_ERR_CONNECT when
 * nothing listens there, another code otherwise; the reason is in
 * tern_engine_last_error().  The data path asks the same question after a
 * request timed out (docs/configuration.md, Stalled peers). */
int tern_segment_probe(tern_engine *engine, const char *name, int timeout_ms);
/* ---- statistics (docs/api.md, Statistics) ------------------------------ */

#define TERN_STATS_BUCKETS 28 /* latency buckets: k < 27 holds latencies
                                 <= 2^k microseconds (and above bucket
                                 k-1's); the last holds the rest */
#define TERN_STATS_ERRORS 32  /* failures by code: index -code (0: other) */

typedef enum tern_stats_kind {
    TERN_STATS_ENGINE = 0,    /* every request of the engine */
    TERN_STATS_TRANSPORT = 1, /* name: the transport ("tcp") */
    TERN_STATS_PEER = 2,      /* name: the segment ("host:port") */
} tern_stats_kind;

/* One counter set, as of the call.  Versioned: `size` is the library's
 * sizeof(tern_stats); fields are only ever appended, so a caller built
 * against an older header reads the fields it knows, and one built
 * against a newer header checks `size` before reading newer ones.
 * Index [op] is a tern_opcode.  A request counts once, when it ends, in
 * its peer's set and the set of the transport that moved its last slice:
 * COMPLETED in ops, bytes and the latency histogram (submit to
 * completion), anything else (FAILED, TIMEOUT, CANCELED, INVALID) in
 * failures and errors (and bytes, what it moved).  COMPLETED requests
 * show once no request of their batch is running (docs/metrics.md). */
typedef struct tern_stats {
    uint32_t size;
    uint32_t kind;            /* tern_stats_kind */
    const char *name;         /* the engine's server name, the transport or the peer;
                                 valid during the callback only */
    uint64_t ops[2];          /* requests COMPLETED */
    uint64_t bytes[2];        /* bytes moved */
    uint64_t failures[2];     /* requests that ended otherwise */
    uint64_t errors[TERN_STATS_ERRORS]; /* failures by error code, [-code] */
    uint64_t retries;         /* slice attempts repeated after a failure */
    uint64_t refetches;       /* peer descriptors fetched again to heal */
    uint64_t fallbacks;       /* peers moved to their next common transport */
    uint64_t heals;           /* refetches that found a newer generation */
    int64_t in_flight;        /* requests submitted and not ended (0 for a transport) */
    uint64_t latency_sum_ns[2];
    uint64_t latency_count[2];
    uint64_t latency[2][TERN_STATS_BUCKETS]; /* per bucket, not cumulative */
} tern_stats;

/* Called once per set; a non-zero return stops the walk. */
typedef int (*tern_stats_fn)(const tern_stats *stats, void *arg);

/* Walk the engine's counter sets: the engine's, one per loaded transport,
 * one per peer opened since the engine started (a closed segment's stays).
 * Counting takes no lock on the data path; each set is read counter by
 * counter, so counters of one set may be a few events apart while
 * requests run.  Returns 0, fn's non-zero return, or TERN_ERR_INVAL.
 * With `stats: false` in the configuration every counter stays 0. */
int tern_engine_stats(tern_engine *engine, tern_stats_fn fn, void *arg);

/* The upper bound of latency bucket k in seconds (2^k microseconds; the
 * last bucket: infinity). */
double tern_stats_bucket_le(int k);

#ifdef __cplusplus
}
#endif
#endif
