/* transports/shm/shm_ident.c: who a process is, and whether this one may
 * reach it with cross-memory attach (see docs/protocol.md, Same-host
 * transport, "Reachability").  A pid alone names nothing: it is only
 * meaningful on the same boot, in the same pid namespace, and for as long as
 * the process that had it lives, so a peer is the tuple (boot id, pid
 * namespace, pid, start time) plus the table whose magic and random instance
 * it published. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm_internal.h"

int shm_random(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom((char *)buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

static int read_line(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int ok = fgets(out, (int)outlen, f) != NULL;
    fclose(f);
    if (!ok)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

/* Field 22 of /proc/PID/stat (after the parenthesised command name, which
 * may hold spaces).  0 when the process does not exist. */
static uint64_t start_time(const char *pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++; /* the space before field 3 */
    for (int field = 3; field < 22 && p; field++)
        p = strchr(p + 1, ' '); /* the space before field + 1 */
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static uint64_t ns_inode(const char *pid)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", pid);
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Real uid of a process from /proc/PID/status; -1 unknown. */
static long proc_uid(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long uid = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Uid:", 4)) {
            uid = strtol(line + 4, NULL, 10);
            break;
        }
    fclose(f);
    return uid;
}

/* CAP_SYS_PTRACE (bit 19) in our effective set. */
static int have_cap_sys_ptrace(void)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    unsigned long long eff = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "CapEff:", 7))
            eff = strtoull(line + 7, NULL, 16);
    fclose(f);
    return (eff >> 19) & 1;
}

int shm_ident_self(shm_ident *id, uint64_t instance, uint64_t table, char *err, size_t errlen)
{
    memset(id, 0, sizeof *id);
    id->pid = (uint64_t)getpid();
    id->start = start_time("self");
    id->pidns = ns_inode("self");
    id->uid = (uint64_t)geteuid();
    id->instance = instance;
    id->table = table;
    if (read_line("/proc/sys/kernel/random/boot_id", id->boot, sizeof id->boot) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND,
                    "shm: cannot read /proc/sys/kernel/random/boot_id (%s): is /proc mounted?",
                    strerror(errno));
    if (!id->start || !id->pidns)
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_FOUND,
                    "shm: cannot read this process's start time or pid namespace from /proc/self "
                    "(is /proc mounted?)");
    return 0;
}

int shm_ident_put(const tern_host_services *h, tern_desc *d, const shm_ident *id)
{
    int rc = 0;
    rc = rc ? rc : h->desc_set_u64(d, "pid", id->pid);
    rc = rc ? rc : h->desc_set_u64(d, "start_time", id->start);
    rc = rc ? rc : h->desc_set_u64(d, "pid_ns", id->pidns);
    rc = rc ? rc : h->desc_set_u64(d, "uid", id->uid);
    rc = rc ? rc : h->desc_set_u64(d, "instance", id->instance);
    rc = rc ? rc : h->desc_set_u64(d, "table", id->table);
    rc = rc ? rc : h->desc_set_str(d, "boot_id", id->boot);
    return rc;
}

int shm_ident_get(const tern_host_services *h, const tern_desc *d, shm_ident *id, char *err,
                  size_t errlen)
{
    static const char *const keys[] = {"pid", "start_time", "pid_ns", "uid", "instance", "table"};
    uint64_t *dst[] = {&id->pid, &id->start, &id->pidns, &id->uid, &id->instance, &id->table};
    memset(id, 0, sizeof *id);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (h->desc_get_u64(d, keys[i], dst[i]) < 0)
            return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "shm: the peer published no '%s'",
                        keys[i]);
    const char *boot = h->desc_get_str(d, "boot_id");
    if (!boot || strlen(boot) >= sizeof id->boot)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "shm: the peer published no valid 'boot_id'");
    snprintf(id->boot, sizeof id->boot, "%s", boot);
    if (id->pid == 0 || id->pid > (uint64_t)0x7fffffff)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "shm: the peer published pid %llu",
                    (unsigned long long)id->pid);
    return 0;
}

int shm_peek(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    struct iovec l = {buf, len}, r = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EFAULT;
}

void shm_ident_explain(pid_t pid, int e, char *out, size_t outlen)
{
    if (e == ESRCH) {
        snprintf(out, outlen, "process %ld is gone", (long)pid);
        return;
    }
    if (e == ENOSYS) {
        snprintf(out, outlen, "this kernel has no cross-memory attach "
                 "(process_vm_readv: %s): rebuild it with CONFIG_CROSS_MEMORY_ATTACH",
                 strerror(e));
        return;
    }
    if (e != EPERM && e != EACCES) {
        snprintf(out, outlen, "process_vm_readv on process %ld: %s", (long)pid, strerror(e));
        return;
    }
    long uid = proc_uid(pid);
    int cap = have_cap_sys_ptrace();
    char scope[16] = "";
    read_line("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof scope);
    if (uid >= 0 && (uid_t)uid != geteuid() && !cap)
        snprintf(out, outlen, "permission denied reading process %ld: it runs as uid %ld and "
                 "this process as uid %ld without CAP_SYS_PTRACE; fix: run both engines as the "
                 "same user, or grant this one CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE)",
                 (long)pid, uid, (long)geteuid());
    else if (scope[0] && atoi(scope) >= 1 && !cap)
        snprintf(out, outlen, "permission denied reading process %ld: kernel.yama.ptrace_scope "
                 "is %s, which forbids attaching to a process that is not a descendant; fix: "
                 "sysctl kernel.yama.ptrace_scope=0, or grant CAP_SYS_PTRACE (containers: "
                 "--cap-add SYS_PTRACE)", (long)pid, scope);
    else if (!cap)
        snprintf(out, outlen, "permission denied reading process %ld (not dumpable, or a "
                 "security module refuses ptrace access) and this process lacks CAP_SYS_PTRACE; "
                 "fix: grant CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE) or keep the peer "
                 "dumpable (no setuid, no prctl PR_SET_DUMPABLE 0)", (long)pid);
    else
        snprintf(out, outlen, "permission denied reading process %ld even with CAP_SYS_PTRACE "
                 "(a security module such as SELinux, AppArmor or seccomp refuses it); fix: "
                 "allow ptrace read access between the two processes", (long)pid);
}

int shm_ident_reach(const shm_ident *self, const shm_ident *peer, char *err, size_t errlen)
{
    if (strcmp(self->boot, peer->boot) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                    "shm: the peer runs on another host or boot (boot id %s, here %s)",
                    peer->boot, self->boot);
    if (self->pidns != peer->pidns)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                    "shm: the peer (pid %llu) is in another pid namespace (inode %llu, here "
                    "%llu), so its pid means nothing here; fix: run both in one pid namespace "
                    "(e.g. docker --pid=host or a shared pod pid namespace)",
                    (unsigned long long)peer->pid, (unsigned long long)peer->pidns,
                    (unsigned long long)self->pidns);
    char pid[24];
    snprintf(pid, sizeof pid, "%llu", (unsigned long long)peer->pid);
    uint64_t st = start_time(pid);
    if (st == 0)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE, "shm: the peer's process %s is gone", pid);
    if (st != peer->start)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                    "shm: pid %s now belongs to another process (start time %llu, the peer "
                    "published %llu): the peer is gone and its pid was reused", pid,
                    (unsigned long long)st, (unsigned long long)peer->start);
    if (ns_inode(pid) != self->pidns && ns_inode(pid) != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                    "shm: process %s is in another pid namespace than this one", pid);
    shm_head h;
    int rc = shm_peek((pid_t)peer->pid, peer->table, &h, sizeof h);
    if (rc < 0) {
        char why[400];
        shm_ident_explain((pid_t)peer->pid, -rc, why, sizeof why);
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE, "shm: %s", why);
    }
    if (h.magic != SHM_TABLE_MAGIC || h.instance != peer->instance)
        return tern_kit_errf(err, errlen, TERN_ERR_UNREACHABLE,
                    "shm: process %s holds no shm table of instance %llu at 0x%llx: not the "
                    "peer that published it", pid, (unsigned long long)peer->instance,
                    (unsigned long long)peer->table);
    return 0;
}
