/* transports/tcp/tcp_internal.h: shared state of the TCP transport plugin.
 * The wire format is in docs/protocol.md, "TCP data frames" (encoded by
 * tcp_wire.h); the threading model at the top of tcp.c. */
#ifndef TERN_TCP_INTERNAL_H
#define TERN_TCP_INTERNAL_H

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "tern/plugin_kit.h"

#define TCP_HOST_MAX 256
#define TCP_RING_MIN 16
#define TCP_TICK_MS 100
#define TCP_NIC_MAX 16

/* One NIC the data server listens on: a device of this transport, its own
 * listener and address in the descriptor (tcp_nics.c). */
typedef struct tcp_nic {
    char name[TERN_NAME_MAX];        /* interface ("eth0", "lo"), "tcp" for a wildcard */
    char sysfs[256];                 /* "class/net/<name>/device", "" when not PCI */
    char bind[TCP_HOST_MAX];         /* address its listener binds */
    char adv[TCP_HOST_MAX];          /* address advertised to peers */
    int port;                        /* its listener's port, once listening */
} tcp_nic;

struct tcp_ctx;
struct tcp_worker;

/* The socket calls the transport makes on its data connections and
 * listeners, one table per instance (tcp_ctx.sys): tcp_sys_libc, the C
 * library's, unless the instance was started with another one
 * (tcp_init_sys).  A test that links the transport's objects starts an
 * instance whose calls fail on demand; the data path pays one indirect
 * call, and no table is shared between instances or changed once one runs. */
typedef struct tcp_sys {
    int (*connect)(int fd, const struct sockaddr *addr, socklen_t len);
    int (*poll)(struct pollfd *fds, nfds_t n, int timeout_ms);
    int (*ppoll)(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
                 const sigset_t *mask);
    int (*accept4)(int fd, struct sockaddr *addr, socklen_t *len, int flags);
    ssize_t (*recv)(int fd, void *buf, size_t len, int flags);
    ssize_t (*recvmsg)(int fd, struct msghdr *mh, int flags);
    ssize_t (*send)(int fd, const void *buf, size_t len, int flags);
    ssize_t (*sendmsg)(int fd, const struct msghdr *mh, int flags);
} tcp_sys;

/* tcp_util.c: the C library's calls. */
extern const tcp_sys tcp_sys_libc;

/* One registered range; the pointer is the mr handle given to the core.
 * refs: the table's reference plus one per transfer using the range (a
 * transfer pins it from its range check to its end, without a lock).
 * io: system calls touching the memory right now; revoked: deregistered,
 * no further byte may be moved (see tcp_mr_io_begin). */
typedef struct tcp_mr {
    uint64_t addr, len, key;
    int gpu;                 /* GPU ordinal of device memory, -1 host (docs/gpu.md) */
    atomic_int refs, io, revoked;
} tcp_mr;

/* Anything a worker's epoll set holds: a listening socket, a target-side
 * connection, an initiator-side connection.  Only the owning worker calls
 * on_event/on_tick; list links are the worker's own. */
typedef struct tcp_io {
    int fd;
    struct tcp_worker *w;
    void (*on_event)(struct tcp_io *io, uint32_t events);
    void (*on_tick)(struct tcp_io *io, uint64_t now_ms);
    void (*on_free)(struct tcp_io *io); /* after it left the list; may be NULL */
    struct tcp_io *prev, *next;
    int listed, dead;
} tcp_io;

/* A function a worker runs between two batches of events. */
typedef struct tcp_cmd {
    void (*fn)(void *arg);
    void *arg;
    int sync, done;
    struct tcp_cmd *next;
} tcp_cmd;

/* One I/O thread: an epoll set, an eventfd to wake it, a command queue. */
typedef struct tcp_worker {
    struct tcp_ctx *ctx;
    int idx, epfd, efd;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;        /* guards cmds, stop */
    pthread_cond_t cv;         /* a sync command finished */
    tcp_cmd *cmd_head, *cmd_tail;
    int stop;
    atomic_int tick_now;       /* a socket has something to do at once (an evicted
                                  stranger, tcp_budget.c): tick without waiting */
    atomic_int nconn;          /* connections it serves (for placement) */
    tcp_io *list;              /* worker-private */
    tcp_io *grave;             /* closed this batch, freed after it */
    uint64_t last_tick;
    atomic_int expect_more;    /* this batch of events left a large payload under way
                                  (tcp_rcvlowat): poll, not sleep; atomic because a
                                  submitting thread waiting for a lone reply may read
                                  on the connection too */
} tcp_worker;

/* A slice in an initiator connection's ring, with its encoded header. */
typedef struct tcp_entry {
    tern_slice *s;
    uint64_t id;
    uint8_t hdr[32];
} tcp_entry;

enum { TCP_C_OFF = 0, TCP_C_CONNECTING = 1, TCP_C_UP = 2 };

/* The lone-reply shortcut (tcp_client.c, conn_await) keeps two states per
 * connection, both under its mu.  The first: does the caller wait for each
 * request before the next one (submit() then waits for a lone reply
 * itself), or does it pipeline (waiting would serialize it)? */
typedef enum tcp_lone {
    /* Lone small requests are waited for in submit(), all but one in
     * LONE_PROBE.  -> PROBE: lone_wait sends that one as the probe. */
    TCP_LONE_WAIT = 0,
    /* probe_id went out without a wait, to see whether the caller submits
     * more meanwhile.  -> PIPED: another request was queued while the probe
     * was in the ring (lone_learn).  -> WAIT: the probe left the ring first
     * (conn_left): the caller waited for it. */
    TCP_LONE_PROBE = 1,
    /* The caller pipelines: submit() never waits.  -> WAIT: LONE_RESUME
     * submits in a row found nothing else in flight (lone_learn, counted in
     * idle_run). */
    TCP_LONE_PIPED = 2,
} tcp_lone;

/* The second: who reads the replies.  A submitter waiting for a lone reply
 * (awaiting counts them) reads it on its own thread, and the I/O thread
 * must then not be woken by it: conn_arm takes EPOLLIN out of the epoll set
 * while the connection is WAITER and a waiter waits or no reply is due. */
typedef enum tcp_reader {
    /* The I/O thread reads every reply (EPOLLIN armed).  -> WAITER: the I/O
     * thread saw a reply while a submitter waits for it (conn_on_event), or
     * a waiter read its reply itself (conn_await). */
    TCP_READER_IO = 0,
    /* Replies are the waiting submitters': EPOLLIN off while one waits or
     * none is due, so the next lone request needs no epoll_ctl either.
     * -> IO: a request no submitter waits for was queued (conn_enqueue), a
     * waiter gave up at its deadline (conn_await), or the stream was reset
     * (conn_reset_stream): a reply is never left unread. */
    TCP_READER_WAITER = 1,
} tcp_reader;

/* One connection of an endpoint (initiator side).  Everything below `mu`
 * is guarded by it: submit() appends and sends from the caller's thread
 * when the socket takes the bytes; the worker sends the rest when the
 * socket is writable and reads replies. */
typedef struct tcp_conn {
    tcp_io io;                 /* io.fd -1 while not connected */
    struct tcp_ep *ep;
    int idx;
    atomic_uint_fast64_t load; /* bytes queued or in flight (for spreading) */
    atomic_int state;          /* TCP_C_* */
    atomic_int closed;         /* the endpoint is being closed */

    pthread_mutex_t mu;
    int want_out;              /* EPOLLOUT armed */
    int fresh;                 /* no reply on this socket yet */
    int resent;                /* the ring was already resent once after a fresh break */
    int awaiting;              /* submitters waiting for a reply on the socket (conn_await) */
    tcp_reader reader;         /* who reads replies (TCP_READER_*) */
    int in_off;                /* EPOLLIN is out of the epoll set (EPOLLRDHUP in) */
    tcp_lone lone;             /* does submit() wait for lone replies (TCP_LONE_*) */
    unsigned lone_n;           /* lone requests since the last probe (conn_enqueue) */
    uint64_t probe_id;         /* while TCP_LONE_PROBE: the probe's id */
    unsigned idle_run;         /* while TCP_LONE_PIPED: submits in a row onto an idle
                                  connection */
    tcp_entry *ring;
    size_t cap, head, count;   /* ring of slices in request order */
    size_t nsent;              /* ring[head .. head+nsent) fully sent */
    uint64_t send_off;         /* bytes of hdr+payload sent of the next one */
    uint8_t rxbuf[16 * 24];
    size_t rx_have;
    int rx_payload;            /* receiving the head READ's data */
    int lowat;                 /* the socket's SO_RCVLOWAT (tcp_rcvlowat) */
    uint64_t rx_off;
    uint64_t last_progress_ms, last_used_ms;
    uint64_t next_id;
} tcp_conn;

/* What every endpoint the transport hands out starts with: the data
 * format it speaks, so the vtable entries (tcp_mooncake_glue.c) can tell
 * tern's endpoints from Mooncake-format ones. */
enum { TCP_WIRE_TERN = 0, TCP_WIRE_MOONCAKE = 1 };
typedef struct tcp_ep_head {
    int wire; /* TCP_WIRE_* */
} tcp_ep_head;

static inline int tcp_ep_wire(const void *vep)
{
    return ((const tcp_ep_head *)vep)->wire;
}

/* An endpoint: up to `connections` connections to one peer's data port;
 * one is open from ep_connect on, more while the queue is deep. */
typedef struct tcp_ep {
    tcp_ep_head head;                /* TCP_WIRE_TERN (0) */
    struct tcp_ctx *ctx;
    char host[TCP_HOST_MAX];
    uint16_t port;
    char peer[TCP_HOST_MAX + 8];     /* "host:port" for messages */
    char segment[256];               /* the segment name asked for (auth binds it) */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int nconn;                       /* the maximum */
    tcp_conn *conns;
    atomic_uint rr;
    atomic_int growing;              /* a connection is being opened */
    atomic_int refs;                 /* I/O threads still holding a connection (close) */
    int connected;
    struct tcp_ep *next;             /* ctx->eps list */
} tcp_ep;

/* Rate limit of one kind of warning: at most one line a second, with the
 * count of those left out. */
typedef struct tcp_ratelim {
    atomic_uint_fast64_t last_ms, skipped;
} tcp_ratelim;

typedef struct tcp_srv_conn tcp_srv_conn;

typedef struct tcp_ctx {
    tern_host_services host;
    tcp_sys sys;                     /* socket calls: set at init, never changed */
    int io_timeout_ms;
    int auth;                        /* auth_secret_file configured */

    /* options (see tcp_options in tcp.c) */
    int opt_port, opt_nconn, opt_nodelay, opt_max_server_conns;
    int opt_sndbuf, opt_rcvbuf, opt_io_threads;
    int opt_idle_close_ms, opt_unproven_idle_ms, opt_unproven_per_source, opt_max_unproven;
    int opt_progress_window_ms, opt_unregister_wait_ms, opt_reply_wait_us, opt_spin_us;
    uint64_t opt_progress_min_rate;
    uint64_t opt_slice_size;
    uint64_t opt_zerocopy_min;
    atomic_uint_fast64_t zc_sends, zc_copied; /* MSG_ZEROCOPY sends; of them, copied */
    atomic_int zc_logged;            /* the first completion report was logged */
    char bind_host[TCP_HOST_MAX];    /* address the data server binds (the first NIC's) */
    char adv_host[TCP_HOST_MAX];     /* address advertised to peers (the first NIC's) */
    int bind_given;                  /* `bind` set: that address is the only NIC */

    /* NICs: the devices, one listener each (tcp_nics.c); fixed after init */
    tcp_nic nics[TCP_NIC_MAX];
    int nnics;

    /* I/O threads */
    tcp_worker *workers;
    int nworkers;
    atomic_uint next_worker;

    /* data server */
    int lport;                       /* the first NIC's port */
    pthread_mutex_t srv_mu;          /* guards the counts and the stranger list */
    int nsrv, nunproven;
    tcp_srv_conn *strangers;         /* unproven connections, oldest first */
    tcp_srv_conn *strangers_tail;

    /* registered memory: sorted by addr; mr_lock is held only to look up
     * or change the table, never across network I/O */
    pthread_rwlock_t mr_lock;
    tcp_mr **mrs;
    size_t nmr, capmr;
    uint64_t next_key;

    /* endpoints */
    pthread_mutex_t ep_mu;
    tcp_ep *eps;

    tcp_ratelim rl_refuse, rl_auth, rl_garbage, rl_slow;

    /* Mooncake's format (tcp_mooncake_glue.c): its own listener, its endpoints */
    int opt_mc_port;                 /* -1: off */
    struct tcp_mc_server *mc_srv;
    struct tcp_mc_gep *mc_eps;       /* guarded by ep_mu */

    /* counters for query() */
    atomic_uint_fast64_t st_req_served, st_refused, st_bytes_in, st_bytes_out;
    atomic_uint_fast64_t st_conn_broken, st_connects, st_evicted, st_slow_cut;
} tcp_ctx;

/* tcp.c: init with the socket calls of sys (the exported table's init
 * passes tcp_sys_libc). */
int tcp_init_sys(const tcp_sys *sys, const tern_host_services *host, void **out, char *err,
                 size_t errlen);

/* tcp_util.c */
void tcp_log(tcp_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A warning about a stranger: at most one line a second per kind, the next
 * one says how many were left out. */
void tcp_warn_limited(tcp_ctx *ctx, tcp_ratelim *rl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Milliseconds from `then` to `now`, 0 when `then` is later: a tick samples
 * its clock once, and a submitting thread may stamp a connection after
 * that; an unsigned difference would wrap to "forever ago". */
static inline uint64_t tcp_since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}
const char *tcp_errname(int code);
void tcp_sock_tune(tcp_ctx *ctx, int fd);
/* sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL), with MSG_ZEROCOPY when `payload`
 * bytes reach zerocopy_min (and the socket took SO_ZEROCOPY); a send the
 * kernel cannot pin memory for (ENOBUFS) is made again without it. */
ssize_t tcp_send(tcp_ctx *ctx, int fd, const struct msghdr *mh, uint64_t payload);
/* Reads the zerocopy completions off fd's error queue.  Returns nonzero
 * when fd also has a real error pending (the connection is gone). */
int tcp_zc_drain(tcp_ctx *ctx, int fd);
/* While `left` bytes of a payload are still to come, the socket reports
 * readable only once min(left, TCP_LOWAT) of them are there (SO_RCVLOWAT);
 * left 0 (between payloads): at once.  *cur is what fd has now. */
#define TCP_LOWAT (128u << 10)
void tcp_rcvlowat(tcp_io *io, int *cur, uint64_t left);
void tcp_complete(tcp_ctx *ctx, tern_slice *s);

/* tcp_mr.c */
int tcp_mr_register(void *vctx, void *addr, size_t len, tern_mr_keys *keys, void **mr, char *err,
                    size_t errlen);
int tcp_mr_deregister(void *vctx, void *vmr);
/* Pin the registered range holding [addr, addr+len) (NULL if none). */
tcp_mr *tcp_mr_pin(tcp_ctx *ctx, uint64_t addr, uint64_t len);
void tcp_mr_unpin(tcp_mr *m);
/* Around each system call that touches pinned memory: 0, or -1 when the
 * range was deregistered meanwhile (the transfer must stop). */
int tcp_mr_io_begin(tcp_mr *m);
void tcp_mr_io_end(tcp_mr *m);

/* tcp_loop.c */
int tcp_workers_start(tcp_ctx *ctx, char *err, size_t errlen);
void tcp_workers_stop(tcp_ctx *ctx);
tcp_worker *tcp_worker_pick(tcp_ctx *ctx);
int tcp_worker_is_self(const tcp_worker *w);
/* Run fn(arg) on the worker (sync: wait for it; from the worker itself it
 * runs at once).  Async commands are freed by the worker. */
void tcp_worker_call(tcp_worker *w, void (*fn)(void *), void *arg);
int tcp_worker_post(tcp_worker *w, void (*fn)(void *), void *arg);
void tcp_worker_wake(tcp_worker *w);
/* Worker thread only: add to / take out of its epoll set and list. */
int tcp_io_add(tcp_io *io, uint32_t events);
void tcp_io_mod(tcp_io *io, uint32_t events);
void tcp_io_unlist(tcp_io *io); /* leaves the list; on_free runs after the batch */
void tcp_io_list(tcp_io *io);

/* tcp_nics.c: the NICs from the bind address, the server name's host and
 * the interfaces (docs/configuration.md, tcp: several NICs). */
int tcp_nics_pick(tcp_ctx *ctx, char *err, size_t errlen);
/* Our NIC of that name, -1 if none. */
int tcp_nic_find(const tcp_ctx *ctx, const char *name);
/* 1 when a numeric address is one of this host's own. */
int tcp_addr_is_local(const char *host);

/* tcp_accept.c: one listener per NIC */
int tcp_server_start(tcp_ctx *ctx, char *err, size_t errlen);

/* tcp_client.c */
int tcp_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen);
int tcp_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen);
void tcp_ep_close(void *vep);
/* The core found the endpoint's NIC pair stalled: fail its slices now,
 * drop its sockets, keep the endpoint (the next slice reconnects). */
int tcp_ep_reset(void *vep);
int tcp_submit(void *vep, tern_slice *const *slices, int n);

/* tcp_mooncake_glue.c: Mooncake's data format wired into the transport */
int tcp_mc_start(tcp_ctx *ctx, char *err, size_t errlen);
void tcp_mc_stop(tcp_ctx *ctx);
int tcp_mc_describe(tcp_ctx *ctx, tern_desc *out);
int tcp_any_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen);
int tcp_any_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen);
void tcp_any_ep_close(void *vep);
int tcp_any_ep_reset(void *vep);
int tcp_any_submit(void *vep, tern_slice *const *slices, int n);

#endif
