/* transports/efa/efa_shm.c: names of the regions libfabric's shm provider
 * creates for this transport, and removal of those a dead process left.
 *
 * Why: shm (libfabric 1.17) names an endpoint's region "<pid>:<domain>:<ep>"
 * under /dev/shm.  A process killed with SIGKILL leaves its region behind
 * (16 MiB of tmpfs each), and when a later process is given the same pid,
 * shm finds "its" name taken by a region whose owner pid is alive (itself)
 * and fi_enable fails with EBUSY.  So each device gets a name of its own,
 * "fi_shm://tern-efa.<pid namespace>.<pid>.<nonce>", and each init removes
 * the regions of that form whose process (in this pid namespace) is gone.
 * See docs/protocol.md, "libfabric shm regions". */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "efa_internal.h"

#define EFA_SHM_URI "fi_shm://"
#define EFA_SHM_TAG "tern-efa."
#define EFA_SHM_BOUNCE ".b"

/* The pid namespace's inode: a pid in a name means something only here. */
static unsigned long long efa_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* "tern-efa.<ns>.<pid>.<nonce>..." -> pid when <ns> is ours, else 0. */
static int efa_shm_tagged_pid(const char *s)
{
    unsigned long long ns;
    long pid;
    char *end;
    if (strncmp(s, EFA_SHM_TAG, sizeof EFA_SHM_TAG - 1))
        return 0;
    s += sizeof EFA_SHM_TAG - 1;
    errno = 0;
    ns = strtoull(s, &end, 10);
    if (errno || *end != '.' || ns != efa_pidns())
        return 0;
    pid = strtol(end + 1, &end, 10);
    if (*end != '.' || pid <= 0 || pid >= (1L << 30))
        return 0;
    return (int)pid;
}

int efa_shm_pid(const uint8_t *addr, size_t len)
{
    char buf[128];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, addr, n);
    buf[n] = '\0';
    if (strncmp(buf, EFA_SHM_URI, sizeof EFA_SHM_URI - 1))
        return 0;
    const char *rest = buf + sizeof EFA_SHM_URI - 1;
    if (!strncmp(rest, EFA_SHM_TAG, sizeof EFA_SHM_TAG - 1))
        return efa_shm_tagged_pid(rest);
    /* shm's own naming, "<pid>:...": a peer that did not name itself. */
    long pid = strtol(rest, NULL, 10);
    return pid > 0 && pid < (1L << 30) ? (int)pid : 0;
}

int efa_is_shm(const efa_dev *d)
{
    const char *p = d->info->fabric_attr->prov_name;
    return p && !strcmp(p, "shm");
}

/* Give fi its own name (plus suffix). */
static int efa_shm_set_name(struct fi_info *fi, const char *name, const char *suffix)
{
    size_t n = strlen(name) + strlen(suffix) + 1;
    char *copy = malloc(n);
    if (!copy)
        return TERN_ERR_NOMEM;
    snprintf(copy, n, "%s%s", name, suffix);
    free(fi->src_addr);
    fi->src_addr = copy;
    fi->src_addrlen = n;
    return 0;
}

/* The bounce endpoint is named after the rail's, plus ".b". */
int efa_shm_name(efa_dev *d, char *err, size_t errlen)
{
    uint64_t nonce;
    char name[128];
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)d;
    snprintf(name, sizeof name, EFA_SHM_URI EFA_SHM_TAG "%llu.%d.%016" PRIx64, efa_pidns(),
             (int)getpid(), nonce);
    if (efa_shm_set_name(d->info, name, "") ||
        (d->info_b && efa_shm_set_name(d->info_b, name, EFA_SHM_BOUNCE)))
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM,
                             "out of memory naming the shm endpoint of %s", d->dinfo.name);
    return 0;
}

int efa_shm_sweep(const efa_ctx *c, const char *dir)
{
    DIR *dh = opendir(dir);
    struct dirent *de;
    int removed = 0;
    if (!dh)
        return 0;
    while ((de = readdir(dh)) != NULL) {
        int pid = efa_shm_tagged_pid(de->d_name);
        if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0) {
            removed++;
            efa_log(c, TERN_LOG_INFO, "removed %s: its process %d is gone", path, pid);
        }
    }
    closedir(dh);
    return removed;
}
