/* tests/system/vm/rdma_vm_concurrent.c: the RDMA VM suite, continued (the
 * Criterion suite rdma_vm of rdma_vm_suite.c, same test program): one
 * plugin instance used from several threads at once. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "desc/desc.h"
#include "plugin/plugin.h"
#include "rdma_vm_pair.h"
#include "tern/tern.h"
#include "tern/transport.h"

/* ep_open / ep_connect / submit / ep_close from several threads at once on
 * one plugin instance: each thread connects two endpoints of this process
 * to each other (RC QPs on the same rxe0), WRITEs through one of them and
 * checks the bytes, then closes both.  Run under the suite's timeout: a
 * deadlock fails it, a race shows up as wrong bytes or lost slices. */
typedef struct loop_arg {
    side *s;
    int idx, iters, failures;
    char err[512];
} loop_arg;

static int loop_connect(side *s, void *a, void *b, char *err, size_t errlen)
{
    tern_desc *da = tern_desc_new(), *db = tern_desc_new();
    int rc = s->t->ep_describe(a, da);
    if (rc == 0)
        rc = s->t->ep_describe(b, db);
    if (rc == 0)
        rc = s->t->ep_connect(a, db, err, errlen);
    if (rc == 0)
        rc = s->t->ep_connect(b, da, err, errlen);
    tern_desc_free(da);
    tern_desc_free(db);
    return rc;
}

static void *loop_thread(void *p)
{
    loop_arg *la = p;
    side *s = la->s;
    const uint64_t len = 65536 + 17, src = (uint64_t)la->idx * 2 * (1u << 20);
    const uint64_t dst = src + (1u << 20);
    for (int it = 0; it < la->iters; it++) {
        void *a = NULL, *b = NULL;
        tern_ep_params prm = {.struct_size = sizeof prm, .peer_nic_path = "self@rxe0"};
        tern_desc *seg = tern_desc_new();
        prm.peer_segment = seg;
        int rc = s->t->ep_open(s->ctx, &prm, &a, la->err, sizeof la->err);
        if (rc == 0)
            rc = s->t->ep_open(s->ctx, &prm, &b, la->err, sizeof la->err);
        tern_desc_free(seg);
        if (rc == 0)
            rc = loop_connect(s, a, b, la->err, sizeof la->err);
        if (rc == 0) {
            fill(s->buf + src, len, (uint64_t)(la->idx * 1000 + it));
            tern_slice sl[2];
            tern_slice *ptr[2];
            int done[2] = {0, 0}; /* set by the poller thread through slice->core */
            for (int k = 0; k < 2; k++) {
                uint64_t off = k ? 65536 : 0, l = k ? len - 65536 : 65536;
                sl[k] = (tern_slice){.struct_size = sizeof sl[k], .opcode = TERN_WRITE,
                                     .local = s->buf + src + off,
                                     .remote = (uint64_t)(uintptr_t)(s->buf + dst + off),
                                     .length = l, .lkey = s->keys.lkey[0],
                                     .rkey = s->keys.rkey[0], .core = &done[k]};
                ptr[k] = &sl[k];
            }
            rc = s->t->submit(a, ptr, 2) == 2 ? 0 : TERN_ERR_DEVICE;
            time_t dl = time(NULL) + 60;
            while (rc == 0 && (!__atomic_load_n(&done[0], __ATOMIC_ACQUIRE) ||
                               !__atomic_load_n(&done[1], __ATOMIC_ACQUIRE))) {
                if (time(NULL) > dl) {
                    rc = TERN_ERR_TIMEOUT;
                    break;
                }
                usleep(1000);
            }
            if (rc == 0 && (sl[0].status || sl[1].status))
                rc = sl[0].status ? sl[0].status : sl[1].status;
            if (rc == 0 && check(s->buf + dst, len, (uint64_t)(la->idx * 1000 + it)) != -1) {
                snprintf(la->err, sizeof la->err, "thread %d iteration %d: bytes differ",
                         la->idx, it);
                rc = TERN_ERR_IO;
            }
        }
        if (a)
            s->t->ep_close(a);
        if (b)
            s->t->ep_close(b);
        if (rc != 0) {
            la->failures++;
            if (!la->err[0])
                snprintf(la->err, sizeof la->err, "thread %d iteration %d: %s", la->idx, it,
                         tern_strerror(rc));
        }
    }
    return NULL;
}

/* The poller: hands finished slices back through the flag in slice->core
 * (the core's bookkeeping pointer: the plugin never touches it). */
typedef struct poller_arg {
    side *s;
    int stop;
    long polled;
} poller_arg;

static void *poller_thread(void *p)
{
    poller_arg *pa = p;
    while (!__atomic_load_n(&pa->stop, __ATOMIC_ACQUIRE)) {
        tern_slice *d[64];
        int got = vm_poll(d, 64, 50);
        for (int i = 0; i < got; i++) {
            pa->polled++;
            __atomic_store_n((int *)d[i]->core, 1, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

Test(rdma_vm, concurrent_open_connect_close_in_one_process)
{
    need_rxe();
    side s;
    char err[512] = "";
    cr_assert_eq(side_open(&s, "qp_per_endpoint: 3", err, sizeof err), 0, "%s", err);
    enum { T = 4, ITERS = 8 };
    loop_arg la[T];
    pthread_t th[T], pt;
    poller_arg pa = {.s = &s};
    pthread_create(&pt, NULL, poller_thread, &pa);
    for (int i = 0; i < T; i++) {
        la[i] = (loop_arg){.s = &s, .idx = i, .iters = ITERS};
        pthread_create(&th[i], NULL, loop_thread, &la[i]);
    }
    int failures = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        failures += la[i].failures;
        cr_expect_eq(la[i].failures, 0, "thread %d: %d failures, first: %s", i, la[i].failures,
                     la[i].err);
    }
    __atomic_store_n(&pa.stop, 1, __ATOMIC_RELEASE);
    pthread_join(pt, NULL);
    cr_expect_eq(pa.polled, (long)T * ITERS * 2, "slices polled");
    char q[1024] = "";
    s.t->query(s.ctx, "", q, sizeof q);
    cr_expect(strstr(q, " 0 endpoint(s)") != NULL, "every endpoint closed: %s", q);
    cr_log_info("%d threads x %d rounds of open/connect/WRITE/close in one process: %d failures",
                T, ITERS, failures);
    side_close(&s);
}
