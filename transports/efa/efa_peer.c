/* transports/efa/efa_peer.c: the peers endpoints reach: one AV entry per
 * peer address, shared by the endpoints that use it and held by the
 * operations in flight to it; its process, watched through a pidfd where
 * the address names one (shm).  Below endpoints and progress, which both
 * take and drop peers. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "efa_internal.h"

/* A shm peer that died holding its region's lock makes fi_write spin
 * forever on it, so shm peers are checked for life before each post (same
 * pid namespace: CMA needs it anyway).  efa_shm_pid() reads the pid.  A
 * process that has exited but whose parent has not reaped it yet (a zombie)
 * still answers kill(pid, 0), so the check polls a pidfd, which becomes
 * readable at exit; kill() is the fallback where pidfd_open is refused. */
int efa_peer_dead(const efa_peer *p)
{
    if (p->pid <= 0)
        return 0;
    if (p->pidfd >= 0) {
        struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) > 0;
    }
    return kill(p->pid, 0) != 0 && errno == ESRCH;
}

static int efa_pidfd_open(int pid)
{
#ifdef SYS_pidfd_open
    return pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
#else
    (void)pid;
    return -1;
#endif
}

void efa_peer_free(efa_peer *p)
{
    if (p->pidfd >= 0)
        close(p->pidfd);
    free(p);
}

/* Insert addr in the device's AV once; endpoints to the same peer share
 * it.  Lock order everywhere: av_lock, then ops_lock. */
int efa_peer_get(efa_dev *d, const uint8_t *addr, size_t len, const uint8_t *addr_b,
                 size_t len_b, efa_peer **out, char *err, size_t errlen)
{
    efa_peer *p;
    *out = NULL;
    pthread_mutex_lock(&d->ops_lock);
    for (p = d->peers; p; p = p->next)
        if (p->addrlen == len && !memcmp(p->addr, addr, len))
            break;
    if (p)
        p->refs++;
    pthread_mutex_unlock(&d->ops_lock);
    if (p) {
        *out = p;
        return 0;
    }
    if ((p = calloc(1, sizeof *p)) == NULL)
        return TERN_ERR_NOMEM;
    memcpy(p->addr, addr, len);
    p->addrlen = len;
    p->pid = efa_shm_pid(p->addr, len);
    p->pidfd = efa_pidfd_open(p->pid);
    pthread_rwlock_wrlock(&d->av_lock);
    efa_lock(d);
    int n = fi_av_insert(d->av, p->addr, 1, &p->fi_addr, 0, NULL);
    /* Its bounce endpoint, if it has one: large WRITEs go there.  Not
     * accepted: every WRITE goes to the first. */
    p->has_b = n == 1 && len_b && d->ep_b &&
               fi_av_insert(d->av, addr_b, 1, &p->fi_addr_b, 0, NULL) == 1;
    efa_unlock(d);
    if (n == 1) {
        p->refs = 1;
        p->gen = atomic_load(&d->gen);
        pthread_mutex_lock(&d->ops_lock);
        p->next = d->peers;
        d->peers = p;
        pthread_mutex_unlock(&d->ops_lock);
    }
    pthread_rwlock_unlock(&d->av_lock);
    if (n != 1) {
        efa_peer_free(p);
        return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                             "fi_av_insert of the peer's efa_addr on %s failed (%s): is the peer "
                             "using the same provider (%s)?",
                             d->dinfo.name, n < 0 ? fi_strerror(-n) : "address not accepted",
                             d->ctx->prov_name);
    }
    *out = p;
    return 0;
}

void efa_peer_put(efa_dev *d, efa_peer *p)
{
    efa_peer *gone = NULL;
    pthread_mutex_lock(&d->ops_lock);
    if (--p->refs == 0 && p->stale) {
        efa_peer_free(p);
    } else if (p->refs == 0 && p->inflight == 0) {
        gone = efa_peer_unlink_locked(d, p);
    }
    pthread_mutex_unlock(&d->ops_lock);
    if (gone)
        efa_peer_remove(d, gone);
}

/* Take p out of the device's peer table (ops_lock held). */
efa_peer *efa_peer_unlink_locked(efa_dev *d, efa_peer *p)
{
    for (efa_peer **pp = &d->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    return p;
}

/* fi_av_remove once no endpoint and no operation in the provider uses the
 * address (removing it under a pending operation crashed shm's progress). */
void efa_peer_remove(efa_dev *d, efa_peer *p)
{
    pthread_rwlock_wrlock(&d->av_lock);
    efa_lock(d);
    if (p->gen == atomic_load(&d->gen)) {
        fi_av_remove(d->av, &p->fi_addr, 1, 0);
        if (p->has_b)
            fi_av_remove(d->av, &p->fi_addr_b, 1, 0);
    }
    efa_unlock(d);
    pthread_rwlock_unlock(&d->av_lock);
    efa_peer_free(p);
}
