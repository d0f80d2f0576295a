/* tern: the application API.
 *
 * One engine per process.  An engine has a server name (host:port of its
 * handshake daemon), a metadata backend, a topology and the transports its
 * configuration loaded.  Applications register memory, open peers' segments
 * by name and move bytes with batches of READ/WRITE requests.
 *
 * Threading: every function is safe to call from any thread, except that a
 * given batch must not be submitted to, waited on or freed from two threads
 * at once.  Errors: negative tern_err codes; tern_engine_last_error() holds
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
 * embedded default (TCP, p2p metadata, 127.0.0.1:12001).  On failure returns
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

/* ---- notifications ---------------------------------------------------- */

#define TERN_NOTIFY_MAX 4096
/* Send a small message to the segment's owner (handshake Notify frame). */
int tern_notify_send(tern_engine *engine, tern_segment_id id,
                     const char *name, const char *msg);
/* Pop one received notification; returns 1 if one was written, 0 if none.
 * from/name/msg are NUL-terminated and truncated to their buffers. */
int tern_notify_recv(tern_engine *engine, char *from, size_t fromlen,
                     char *name, size_t namelen, char *msg, size_t msglen);

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
 * wait timed out, or the first failed request's error otherwise. */
int tern_batch_wait(tern_batch *batch, int timeout_ms);
/* The message of the failure of request `index` ("" if none). */
const char *tern_batch_error(tern_batch *batch, size_t index);
/* Refused with TERN_ERR_BUSY while requests are in flight. */
int tern_batch_free(tern_batch *batch);
/* Requests submitted so far. */
size_t tern_batch_size(const tern_batch *batch);

#ifdef __cplusplus
}
#endif
#endif
