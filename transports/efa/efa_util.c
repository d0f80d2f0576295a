/* transports/efa/efa_util.c: small helpers of the efa transport: clocks,
 * logging, the libfabric call lock, option reading, hex for endpoint
 * names, provider names. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "efa_internal.h"

/* ---- small helpers ------------------------------------------------------- */

void efa_log(const efa_ctx *c, int level, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    if (!c->host || !c->host->log)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->host->log(c->host->host, level, "efa: %s", buf);
}

void efa_lock(efa_dev *d)
{
    if (d->serialise)
        pthread_mutex_lock(&d->fi_lock);
}

void efa_unlock(efa_dev *d)
{
    if (d->serialise)
        pthread_mutex_unlock(&d->fi_lock);
}

/* Lower-case hex of n bytes into out (2n+1 bytes). */
void efa_hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int efa_hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Decode hex text; returns the byte count or -1 when it is not even-length
 * hex or decodes to more than max bytes (or to nothing). */
long efa_hex_decode(const char *in, uint8_t *out, size_t max)
{
    size_t len = strlen(in);
    if (len == 0 || len % 2 || len / 2 > max)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = efa_hex_digit(in[2 * i]), lo = efa_hex_digit(in[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(len / 2);
}

/* "tcp" means tcp;ofi_rxm and "verbs" verbs;ofi_rxm: neither gives RDM
 * endpoints by itself. */
void efa_map_provider(const char *p, char *out, size_t outlen)
{
    if (!strcmp(p, "tcp"))
        p = "tcp;ofi_rxm";
    else if (!strcmp(p, "verbs"))
        p = "verbs;ofi_rxm";
    snprintf(out, outlen, "%s", p);
}
