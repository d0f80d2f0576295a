/* tests/support/helpers/efa_peer.c: a target engine in its own process for
 * tests/transports/test_efa_integration.c (public API only).
 *
 *   tern-test-efa-peer <transports>
 *
 * <transports> is a comma-separated preference list: "efa-tcp" (efa with
 * provider tcp on lo), "efa-shm", "efa-shm-1M" (1 MiB slices), "tcp".
 * The word "no-attach-reads" in it adds no transport: it makes this
 * process die of SIGSYS at its first process_vm_readv, the call with which
 * libfabric's shm provider copies a WRITE by cross-memory attach.  The peer maps
 * GUARD | A | B | GUARD, fills the guards with canaries, registers A and B,
 * prints  READY <server name> <addr A> <len A> <addr B> <len B>  and then
 * answers on stdin:  CHECK -> "CANARY ok" / "CANARY bad <offset>",
 * EXIT (or EOF) -> cleans up and exits 0. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "peer_common.h"

/* YAML for a preference list like "efa-tcp,tcp"; NULL if a name is unknown. */
static char *efa_peer_yaml(const char *list)
{
    static char yaml[2048];
    char copy[256];
    size_t used = (size_t)snprintf(yaml, sizeof yaml,
                                   "server_name: 127.0.0.1:0\nmetadata: p2p\n"
                                   "slice_size: 64K\nio_timeout_ms: 3000\n"
                                   "log_level: warn\ntransports:\n");
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const char *entry;
        if (!strcmp(t, "efa-tcp"))
            entry = "  - name: efa\n    provider: tcp\n    iface: lo\n";
        else if (!strcmp(t, "efa-shm"))
            entry = "  - name: efa\n    provider: shm\n";
        else if (!strcmp(t, "efa-shm-1M"))
            entry = "  - name: efa\n    provider: shm\n    slice_size: 1M\n";
        else if (!strcmp(t, "no-attach-reads"))
            entry = "";
        else if (!strcmp(t, "efa-shm-rails3"))
            entry = "  - name: efa\n    provider: shm\n    rails: 3\n";
        else if (!strcmp(t, "tcp"))
            entry = "  - name: tcp\n";
        else
            return NULL;
        used += (size_t)snprintf(yaml + used, sizeof yaml - used, "%s", entry);
    }
    return yaml;
}

/* A seccomp filter: process_vm_readv kills the process, all else runs. */
static int forbid_vm_readv(void)
{
#if defined(__x86_64__)
    const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    const unsigned arch = AUDIT_ARCH_AARCH64;
#else
    const unsigned arch = 0;
#endif
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (!arch || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("efa_peer: seccomp filter");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *yaml = efa_peer_yaml(argc > 1 ? argv[1] : "efa-tcp");
    if (!yaml) {
        fprintf(stderr, "efa_peer: unknown transport list %s\n", argv[1]);
        return 2;
    }
    if (argc > 1 && strstr(argv[1], "no-attach-reads") && forbid_vm_readv())
        return 2;
    return peer_serve(yaml, "efa_peer");
}
