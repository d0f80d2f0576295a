/* transports/rdma/rdma_util.c: small helpers of the rdma transport:
 * error messages, the host's allocator, option reading, handing slices
 * back. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "rdma_internal.h"
#include "rdma_plugin.h"
#include "tern/transport.h"

/* ---- small helpers ----------------------------------------------------------- */

void *rd_alloc(rd_ctx *c, size_t n)
{
    void *p = c->host && c->host->alloc ? c->host->alloc(n) : malloc(n);
    if (p)
        memset(p, 0, n);
    return p;
}

void rd_free(rd_ctx *c, void *p)
{
    if (c->host && c->host->free)
        c->host->free(p);
    else
        free(p);
}

int64_t rd_opt_int(const tern_host_services *h, const char *key, int64_t def)
{
    return h && h->config_get_int ? h->config_get_int(h->host, key, def) : def;
}

/* The slice is the core's again once complete() is called. */
void rd_done_push(rd_ctx *c, tern_slice *s)
{
    S_NEXT(s) = NULL;
    c->host->complete(c->host->host, s);
}

/* First failure wins: its text is what the core shows. */
void rd_slice_fail(tern_slice *s, int code, const char *msg)
{
    if (s->status == 0) {
        size_t n = strnlen(msg, sizeof s->errmsg - 1);
        s->status = code;
        memcpy(s->errmsg, msg, n); /* cut to fit: the full text is in the log */
        s->errmsg[n] = '\0';
    }
}
