/* transports/tcp/tcp_internal.h: shared state of the TCP transport plugin.
 * The wire format is documented at the top of tcp_wire.h; the threading
 * model at the top of tcp.c. */
#ifndef TERN_TCP_INTERNAL_H
#define TERN_TCP_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tern/transport.h"

#define TCP_HOST_MAX 256
#define TCP_RING_MIN 64

/* One registered range; the pointer is the mr handle given to the core. */
typedef struct tcp_mr {
    uint64_t addr, len, key;
} tcp_mr;

/* A connection accepted by the data server (one thread each). */
typedef struct tcp_srv_conn {
    struct tcp_ctx *ctx;
    int fd;
    pthread_t thread;
    atomic_int done;           /* the thread has returned: join and free */
    char peer[64];             /* "ip:port" for messages */
    struct tcp_srv_conn *next;
} tcp_srv_conn;

/* One slice in a connection's ring, with its encoded request header. */
typedef struct tcp_entry {
    tern_slice *s;
    uint64_t id;
    uint8_t hdr[32];
} tcp_entry;

/* One persistent connection of an endpoint's pool, driven by one thread. */
typedef struct tcp_conn {
    struct tcp_ep *ep;
    int idx;
    pthread_t thread;
    int started;
    int efd;                   /* eventfd: wakes the thread on submit/stop */

    pthread_mutex_t mu;        /* guards pend_*, sleeping, stop */
    tern_slice *pend_head, *pend_tail; /* linked by plugin[0] */
    int sleeping, stop;
    atomic_uint_fast64_t load; /* bytes queued or in flight (for spreading) */

    /* thread-private from here on */
    int fd;
    tcp_entry *ring;
    size_t cap, head, count;   /* ring of slices in request order */
    size_t nsent;              /* ring[head .. head+nsent) fully sent */
    uint64_t send_off;         /* bytes of hdr+payload sent of the next one */
    uint8_t rxbuf[64 * 24];
    size_t rx_have;            /* bytes of reply headers in rxbuf */
    int rx_payload;            /* 1: receiving the head READ's data */
    uint64_t rx_off;
    int can_send, can_recv;
    int lowat;                 /* SO_RCVLOWAT now set on fd (1 = default) */
    uint64_t last_progress_ms;
    uint64_t next_id;
} tcp_conn;

/* An endpoint: the pool of connections to one peer's data port. */
typedef struct tcp_ep {
    int wire;                        /* TCP_WIRE_TERN (0); see tcp_mooncake_glue.c */
    struct tcp_ctx *ctx;
    char host[TCP_HOST_MAX];
    uint16_t port;
    char peer[TCP_HOST_MAX + 8];     /* "host:port" for messages */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int nconn;
    tcp_conn *conns;
    atomic_uint rr;
    int connected;
    struct tcp_ep *next;             /* ctx->eps list */
} tcp_ep;

typedef struct tcp_ctx {
    tern_host_services host;
    int io_timeout_ms;

    /* options */
    int opt_port, opt_nconn, opt_nodelay, opt_max_server_conns;
    int opt_sndbuf, opt_rcvbuf;
    uint64_t opt_slice_size;
    char bind_host[TCP_HOST_MAX];    /* address the data server binds */
    char adv_host[TCP_HOST_MAX];     /* address advertised to peers */
    char devname[TERN_NAME_MAX];
    char dev_sysfs[256];

    /* data server */
    int lfd, lport, srv_efd;
    pthread_t srv_thread;
    int srv_started;
    pthread_mutex_t srv_mu;
    tcp_srv_conn *srv_conns;
    int nsrv;
    atomic_int srv_stopping;

    /* registered memory: sorted by addr, guarded by mr_lock */
    pthread_rwlock_t mr_lock;
    tcp_mr **mrs;
    size_t nmr, capmr;
    uint64_t next_key;

    /* endpoints */
    pthread_mutex_t ep_mu;
    tcp_ep *eps;

    /* completion queue: slices linked by plugin[0] */
    pthread_mutex_t cq_mu;
    pthread_cond_t cq_cv;
    tern_slice *cq_head, *cq_tail;
    int cq_waiters;

    /* Mooncake's format (tcp_mooncake_glue.c): its own listener, its endpoints */
    int opt_mc_port;                 /* -1: off */
    struct tcp_mc_server *mc_srv;
    struct tcp_mc_gep *mc_eps;       /* guarded by ep_mu */

    /* counters for query() */
    atomic_uint_fast64_t st_req_served, st_refused, st_bytes_in, st_bytes_out;
    atomic_uint_fast64_t st_conn_broken, st_connects;
} tcp_ctx;

/* tcp.c */
void tcp_log(tcp_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tcp_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
uint64_t tcp_now_ms(void);
/* Name of a tern_err code; the plugin does not link libtern. */
const char *tcp_errname(int code);
void tcp_sock_tune(tcp_ctx *ctx, int fd);
/* The registered range holding [addr, addr+len), or NULL; caller holds
 * mr_lock (read). Overflow-safe. */
const tcp_mr *tcp_mr_find(const tcp_ctx *ctx, uint64_t addr, uint64_t len);
void tcp_cq_push(tcp_ctx *ctx, tern_slice *head, tern_slice *tail, int n);

/* tcp_server.c */
int tcp_server_start(tcp_ctx *ctx, char *err, size_t errlen);
void tcp_server_stop(tcp_ctx *ctx);

/* tcp_client.c */
int tcp_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen);
int tcp_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen);
void tcp_ep_close(void *vep);
int tcp_submit(void *vep, tern_slice *const *slices, int n);

/* tcp_mooncake_glue.c: Mooncake's data format wired into the transport */
enum { TCP_WIRE_TERN = 0, TCP_WIRE_MOONCAKE = 1 };
int tcp_mc_start(tcp_ctx *ctx, char *err, size_t errlen);
void tcp_mc_stop(tcp_ctx *ctx);
int tcp_mc_describe(tcp_ctx *ctx, tern_desc *out);
int tcp_any_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen);
int tcp_any_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen);
void tcp_any_ep_close(void *vep);
int tcp_any_submit(void *vep, tern_slice *const *slices, int n);

#endif
