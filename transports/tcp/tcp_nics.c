/* transports/tcp/tcp_nics.c: which NICs the TCP transport serves on.
 *
 * Each NIC is one device of the transport, with its own listener and its
 * own address in the descriptor, so that the core can spread one peer's
 * slices over NIC pairs (docs/topology.md, Spreading).  The choice:
 *  - `bind` set: that address only, one device (a pinned data port stays
 *    pinned; a wildcard bind is one listener on every interface, device
 *    "tcp", as before);
 *  - the engine's host (server name) is a loopback or wildcard address, a
 *    name rather than an address, or none: that one address, as before;
 *  - otherwise every interface that is up, not loopback, and holds an
 *    address of the server name's family (IPv6: not link-local), narrowed
 *    by the transport's `devices` list; the interface holding the server
 *    name's address comes first, so the descriptor's plain "host" and
 *    "port" (what a peer without multi-NIC support reads) stay that one.
 *    When that address is on no such interface (a name the host does not
 *    hold, e.g. behind NAT), it is the one device, as before. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tcp_internal.h"

static const char *nics_sysfs_root(const tcp_ctx *ctx)
{
    return TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, sysfs_root) &&
                   ctx->host.sysfs_root ? ctx->host.sysfs_root : "/sys";
}

/* "class/net/<name>/device" when the interface is a PCI device (the core
 * reads its NUMA node there), else "". */
static void nics_set_sysfs(const tcp_ctx *ctx, tcp_nic *n)
{
    char path[512];
    struct stat st;
    n->sysfs[0] = 0;
    snprintf(path, sizeof path, "%s/class/net/%s/device", nics_sysfs_root(ctx), n->name);
    if (stat(path, &st) == 0)
        snprintf(n->sysfs, sizeof n->sysfs, "class/net/%s/device", n->name);
}

/* Numeric form of an interface address, "" for another family. */
static void nics_ntop(const struct sockaddr *sa, char *buf, size_t len)
{
    buf[0] = 0;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
}

/* The one-device case: the bind address, named after the interface that
 * holds it ("tcp" for a wildcard or an address no interface holds). */
static void nics_single(tcp_ctx *ctx)
{
    tcp_nic *n = &ctx->nics[0];
    memset(n, 0, sizeof *n);
    snprintf(n->name, sizeof n->name, "tcp");
    snprintf(n->bind, sizeof n->bind, "%s", ctx->bind_host);
    snprintf(n->adv, sizeof n->adv, "%s", ctx->adv_host);
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            char buf[INET6_ADDRSTRLEN];
            if (!i->ifa_addr || !i->ifa_name)
                continue;
            nics_ntop(i->ifa_addr, buf, sizeof buf);
            if (*buf && !strcmp(buf, ctx->bind_host)) {
                snprintf(n->name, sizeof n->name, "%s", i->ifa_name);
                break;
            }
        }
        freeifaddrs(ifa);
    }
    nics_set_sysfs(ctx, n);
    ctx->nnics = 1;
}

/* The family of a numeric address, 0 for a name. */
static int nics_family(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, buf) == 1)
        return AF_INET;
    if (inet_pton(AF_INET6, host, buf) == 1)
        return AF_INET6;
    return 0;
}

/* A loopback or wildcard address, or a name for one: one device. */
static int nics_local_only(const char *host, int fam)
{
    if (!*host || !strcmp(host, "localhost") || !strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
        return 1;
    if (fam == AF_INET) {
        struct in_addr a;
        inet_pton(AF_INET, host, &a);
        return (ntohl(a.s_addr) >> 24) == 127;
    }
    if (fam == AF_INET6) {
        struct in6_addr a;
        inet_pton(AF_INET6, host, &a);
        return IN6_IS_ADDR_LOOPBACK(&a) || IN6_IS_ADDR_UNSPECIFIED(&a);
    }
    return 0;
}

static int nics_allowed(const tcp_ctx *ctx, const char *name)
{
    if (!ctx->host.config_get_list || !ctx->host.config_get_list(ctx->host.host, "devices", 0))
        return 1;
    for (size_t i = 0;; i++) {
        const char *s = ctx->host.config_get_list(ctx->host.host, "devices", i);
        if (!s)
            return 0;
        if (!strcmp(s, name))
            return 1;
    }
}

int tcp_addr_is_local(const char *host)
{
    struct ifaddrs *ifa = NULL;
    int found = 0;
    if (!host || getifaddrs(&ifa) != 0)
        return 0;
    for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next) {
        char buf[INET6_ADDRSTRLEN];
        if (!i->ifa_addr)
            continue;
        nics_ntop(i->ifa_addr, buf, sizeof buf);
        found = *buf && !strcmp(buf, host);
    }
    freeifaddrs(ifa);
    return found;
}

int tcp_nic_find(const tcp_ctx *ctx, const char *name)
{
    for (int i = 0; name && i < ctx->nnics; i++)
        if (!strcmp(ctx->nics[i].name, name))
            return i;
    return -1;
}

/* One NIC per usable interface of family fam; returns the index of the
 * one holding the bind address, -1 when none does. */
static int nics_scan(tcp_ctx *ctx, int fam)
{
    struct ifaddrs *ifa = NULL;
    int home = -1;
    ctx->nnics = 0;
    if (getifaddrs(&ifa) != 0)
        return -1;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        char buf[INET6_ADDRSTRLEN];
        if (!i->ifa_addr || !i->ifa_name || i->ifa_addr->sa_family != fam ||
            !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK) ||
            strlen(i->ifa_name) >= TERN_NAME_MAX || !nics_allowed(ctx, i->ifa_name))
            continue;
        if (fam == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
            continue; /* needs a scope id a peer's address cannot carry */
        nics_ntop(i->ifa_addr, buf, sizeof buf);
        int k = tcp_nic_find(ctx, i->ifa_name);
        if (k < 0 && ctx->nnics == TCP_NIC_MAX)
            continue;
        if (k < 0) { /* first address of the interface */
            k = ctx->nnics++;
            memset(&ctx->nics[k], 0, sizeof ctx->nics[k]);
            snprintf(ctx->nics[k].name, sizeof ctx->nics[k].name, "%s", i->ifa_name);
        } else if (strcmp(buf, ctx->bind_host) != 0) {
            continue; /* keep the interface's first address, or the server name's */
        }
        snprintf(ctx->nics[k].bind, sizeof ctx->nics[k].bind, "%s", buf);
        snprintf(ctx->nics[k].adv, sizeof ctx->nics[k].adv, "%s", buf);
        if (!strcmp(buf, ctx->bind_host))
            home = k; /* this interface serves the server name's address */
    }
    freeifaddrs(ifa);
    return home;
}

int tcp_nics_pick(tcp_ctx *ctx, char *err, size_t errlen)
{
    int fam = nics_family(ctx->bind_host);
    if (ctx->bind_given || !fam || nics_local_only(ctx->bind_host, fam)) {
        nics_single(ctx);
        return 0;
    }
    int home = nics_scan(ctx, fam);
    int narrowed = ctx->host.config_get_list &&
                   ctx->host.config_get_list(ctx->host.host, "devices", 0);
    if (home < 0 && !narrowed) { /* the address is not ours to enumerate */
        nics_single(ctx);
        return 0;
    }
    if (ctx->nnics == 0) { /* snprintf, not tcp_errf: this file calls nothing of tcp.c */
        if (err && errlen)
            snprintf(err, errlen,
                     "tcp: transports.tcp.devices keeps none of this host's interfaces that "
                     "are up and hold an %s address (first listed: '%s'); check the names "
                     "with `ip addr`", fam == AF_INET6 ? "IPv6" : "IPv4",
                     ctx->host.config_get_list(ctx->host.host, "devices", 0));
        return TERN_ERR_CONFIG;
    }
    if (home > 0) { /* the server name's NIC first: "host"/"port" are its own */
        tcp_nic t = ctx->nics[0];
        ctx->nics[0] = ctx->nics[home];
        ctx->nics[home] = t;
    }
    for (int i = 0; i < ctx->nnics; i++)
        nics_set_sysfs(ctx, &ctx->nics[i]);
    snprintf(ctx->bind_host, sizeof ctx->bind_host, "%s", ctx->nics[0].bind);
    snprintf(ctx->adv_host, sizeof ctx->adv_host, "%s", ctx->nics[0].adv);
    return 0;
}
