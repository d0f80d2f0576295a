/* tests/support/stores.c: real Redis and etcd servers on loopback for tests
 * (see stores.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stores.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

int test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t sl = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &sl);
    close(fd);
    return ntohs(a.sin_port);
}

int test_have_binary(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

static pid_t spawn(char *const argv[])
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 1);
        dup2(nul, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Send req to 127.0.0.1:port and check the answer contains want. */
static int answers(int port, const char *req, const char *want)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int ok = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        tern_io_write_all(fd, req, strlen(req), 500) == 0) {
        char buf[1024];
        size_t n = 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (n < sizeof buf - 1 && poll(&p, 1, 500) > 0) {
            ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
            if (r <= 0)
                break;
            n += (size_t)r;
            buf[n] = '\0';
            if (strstr(buf, want)) {
                ok = 1;
                break;
            }
        }
    }
    close(fd);
    return ok;
}

/* Waits on the server's answer, not on a timer: a loaded machine only makes
 * it slower.  A server that exits first, or never answers, fails the test,
 * after test_store_stop so that no process or data directory is left. */
static void wait_ready(test_store *s, const char *req, const char *want, const char *what)
{
    for (int i = 0; i < 200; i++) {
        if (answers(s->port, req, want))
            return;
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            test_store_stop(s);
            cr_assert_fail("%s exited before answering on port %d", what, s->port);
        }
        usleep(50 * 1000);
    }
    test_store_stop(s);
    cr_assert_fail("%s did not answer on port %d within 10 s", what, s->port);
}

void test_redis_start(test_store *s)
{
    if (!test_have_binary("redis-server"))
        cr_skip_test("redis-server not installed (Debian package redis-server)");
    if (!s->port)
        s->port = test_free_port();
    char ps[16];
    snprintf(ps, sizeof ps, "%d", s->port);
    char *argv[] = {"redis-server", "--port", ps, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", NULL};
    s->pid = spawn(argv);
    wait_ready(s, "PING\r\n", "+PONG", "redis-server");
}

void test_etcd_start(test_store *s)
{
    if (!test_have_binary("etcd"))
        cr_skip_test("etcd not installed (Debian package etcd-server)");
    if (!s->port) {
        s->port = test_free_port();
        s->peer_port = test_free_port();
    }
    snprintf(s->dir, sizeof s->dir, "/tmp/tern-etcd-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir));
    char client[64], peers[64], cluster[96];
    snprintf(client, sizeof client, "http://127.0.0.1:%d", s->port);
    snprintf(peers, sizeof peers, "http://127.0.0.1:%d", s->peer_port);
    snprintf(cluster, sizeof cluster, "default=%s", peers);
    char *argv[] = {"etcd", "--name", "default", "--data-dir", s->dir,
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peers, "--initial-advertise-peer-urls", peers,
                    "--initial-cluster", cluster, NULL};
    s->pid = spawn(argv);
    wait_ready(s, "GET /health HTTP/1.0\r\n\r\n", "\"health\":\"true\"", "etcd");
}

void test_store_stop(test_store *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
    if (s->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            cr_log_warn("could not remove %s", s->dir);
        s->dir[0] = '\0';
    }
}

tern_config test_md_config(const char *uri, const char *cluster, int timeout_ms)
{
    static char *const plugin_dirs[] = {TEST_MD_PLUGIN_DIR};
    tern_config c = {0};
    c.metadata = (char *)uri;
    c.cluster_id = (char *)cluster;
    c.plugin_path = (char **)plugin_dirs;
    c.nplugin_path = 1;
    c.connect_timeout_ms = timeout_ms;
    c.io_timeout_ms = timeout_ms;
    c.handshake_max_frame = 1 << 20;
    return c;
}

tern_metadata *test_md_open(const char *uri, const char *cluster, char *err, size_t errlen)
{
    tern_config c = test_md_config(uri, cluster, 2000);
    tern_metadata *md = NULL;
    cr_assert_eq(tern_metadata_open(&c, &md, err, errlen), 0, "%s: %s", uri, err);
    return md;
}
