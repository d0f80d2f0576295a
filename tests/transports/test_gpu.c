#define _GNU_SOURCE /* engine.h needs pthread_rwlock_t */
/* GPU memory through the fake CUDA driver (tests/support/fake_cuda/): registration
 * detects cuda:N and refuses contradicted locations; without a driver GPU
 * memory is refused with the loader's reason; two engines move "GPU"
 * memory byte-exact over tcp through the staging buffers (the fake's device
 * memory is PROT_NONE, so a transport touching it directly fails), both
 * directions, sizes crossing slice and staging-buffer boundaries; an
 * injected device-copy failure fails the request with its message; the
 * staging pool never allocates past gpu_staging_buffers.  The real-driver
 * check skips visibly where libcuda.so.1 does not load. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "host/gpu_topo.h"
#include "tern/tern.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

static tern_engine *engine_tcp(const char *name, int staging)
{
    char yaml[512], err[1024] = "";
    snprintf(yaml, sizeof yaml,
             "server_name: 127.0.0.1:0\n"
             "transports:\n"
             "  - name: tcp\n"
             "    slice_size: 64K\n"
             "gpu_staging_buffers: %d\n"
             "log_level: warn\n",
             staging);
    tern_engine *e = tern_engine_create_from_yaml(yaml, name, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    return e;
}

static void use_fake(void)
{
    setenv("TERN_CUDA_LIBRARY", TERN_FAKE_CUDA_PATH, 1);
}

static long fake_counter(const char *name)
{
    void *dl = dlopen(TERN_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(dl, "the fake driver is not loaded");
    long (*f)(void) = (long (*)(void))dlsym(dl, name);
    cr_assert_not_null(f, "%s missing", name);
    long n = f();
    dlclose(dl);
    return n;
}

static char *descriptor(tern_engine *e)
{
    char *json = NULL;
    cr_assert_eq(tern_segment_descriptor(e, TERN_LOCAL_SEGMENT, &json), 0);
    return json;
}

/* ---- registration -------------------------------------------------------- */

Test(gpu, register_detects_cuda_n)
{
    use_fake();
    tern_engine *e = engine_tcp("A", 4);
    cr_assert_eq(tern_gpu_count(e), 2, "%s", tern_engine_last_error(e));
    void *d = NULL;
    cr_assert_eq(tern_gpu_alloc(e, 1, MiB, &d), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_register_memory(e, d, MiB, NULL), 0, "%s", tern_engine_last_error(e));
    char *json = descriptor(e);
    cr_assert_not_null(strstr(json, "\"cuda:1\""), "descriptor: %s", json);
    free(json);
    cr_assert_eq(tern_unregister_memory(e, d), 0);
    /* the matching location and the wildcard are accepted */
    cr_assert_eq(tern_register_memory(e, d, MiB, "cuda:1"), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_unregister_memory(e, d), 0);
    cr_assert_eq(tern_register_memory(e, d, MiB, "*"), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_unregister_memory(e, d), 0);
    /* host memory still registers as before */
    char *h = malloc(MiB);
    cr_assert_eq(tern_register_memory(e, h, MiB, "cpu:0"), 0, "%s", tern_engine_last_error(e));
    json = descriptor(e);
    cr_assert_null(strstr(json, "cuda:"), "host memory published as GPU memory: %s", json);
    free(json);
    tern_unregister_memory(e, h);
    tern_gpu_free(e, d);
    tern_engine_destroy(e);
    free(h);
}

Test(gpu, register_refuses_contradicted_location)
{
    use_fake();
    tern_engine *e = engine_tcp("A", 4);
    void *d = NULL;
    cr_assert_eq(tern_gpu_alloc(e, 0, MiB, &d), 0, "%s", tern_engine_last_error(e));
    const char *wrong[] = {"cuda:1", "cpu:0"};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(tern_register_memory(e, d, MiB, wrong[i]), TERN_ERR_INVAL);
        const char *m = tern_engine_last_error(e);
        cr_assert_not_null(strstr(m, "contradicts"), "%s", m);
        cr_assert_not_null(strstr(m, "GPU 0"), "%s", m);
        cr_assert_not_null(strstr(m, wrong[i]), "%s", m);
    }
    char *h = malloc(MiB);
    cr_assert_eq(tern_register_memory(e, h, MiB, "cuda:0"), TERN_ERR_INVAL);
    cr_assert_not_null(strstr(tern_engine_last_error(e), "host memory"), "%s",
                       tern_engine_last_error(e));
    cr_assert_eq(tern_register_memory(e, h, MiB, "cuda:x"), TERN_ERR_INVAL);
    /* a range running past the device allocation */
    cr_assert_eq(tern_register_memory(e, d, 2 * MiB, NULL), TERN_ERR_INVAL);
    cr_assert_not_null(strstr(tern_engine_last_error(e), "leaves the memory of GPU 0"), "%s",
                       tern_engine_last_error(e));
    char *json = descriptor(e);
    cr_assert_null(strstr(json, "cuda:"), "a refused buffer was published: %s", json);
    free(json);
    tern_gpu_free(e, d);
    tern_engine_destroy(e);
    free(h);
}

Test(gpu, no_driver_refuses_gpu_memory)
{
    setenv("TERN_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    tern_engine *e = engine_tcp("A", 4);
    char *h = malloc(MiB);
    cr_assert_eq(tern_register_memory(e, h, MiB, "cuda:0"), TERN_ERR_NOT_SUPPORTED);
    const char *m = tern_engine_last_error(e);
    cr_assert_not_null(strstr(m, "no CUDA driver"), "%s", m);
    cr_assert_not_null(strstr(m, "/nonexistent/libcuda.so.1"), "%s", m);
    cr_assert_eq(tern_gpu_count(e), TERN_ERR_NOT_SUPPORTED);
    void *d = NULL;
    cr_assert_eq(tern_gpu_alloc(e, 0, MiB, &d), TERN_ERR_NOT_SUPPORTED);
    /* host memory works as without any GPU code */
    cr_assert_eq(tern_register_memory(e, h, MiB, NULL), 0, "%s", tern_engine_last_error(e));
    tern_engine_destroy(e);
    free(h);
}

Test(gpu, driver_init_failure_refuses_gpu_memory)
{
    use_fake();
    setenv("FAKE_CUDA_FAIL_INIT", "1", 1);
    tern_engine *e = engine_tcp("A", 4);
    char *h = malloc(MiB);
    cr_assert_eq(tern_register_memory(e, h, MiB, "cuda:0"), TERN_ERR_NOT_SUPPORTED);
    cr_assert_not_null(strstr(tern_engine_last_error(e), "cuInit failed"), "%s",
                       tern_engine_last_error(e));
    cr_assert_eq(tern_register_memory(e, h, MiB, NULL), 0, "%s", tern_engine_last_error(e));
    tern_engine_destroy(e);
    free(h);
}

/* ---- transfers over tcp through staging ---------------------------------- */

typedef struct pair {
    tern_engine *a, *b; /* a initiates, b is the target */
    void *la, *rb;      /* a's local buffer, b's registered buffer */
    int la_gpu, rb_gpu; /* which of them is device memory */
    size_t len;
    tern_segment_id seg;
} pair;

static void *buffer(tern_engine *e, int gpu, size_t len)
{
    void *p = NULL;
    if (gpu)
        cr_assert_eq(tern_gpu_alloc(e, 0, len, &p), 0, "%s", tern_engine_last_error(e));
    else
        p = malloc(len);
    cr_assert_not_null(p);
    return p;
}

static void pair_up2(pair *p, size_t len, int staging, int la_gpu, int rb_gpu)
{
    use_fake();
    p->a = engine_tcp("A", staging);
    p->b = engine_tcp("B", staging);
    p->len = len;
    p->la_gpu = la_gpu;
    p->rb_gpu = rb_gpu;
    p->la = buffer(p->a, la_gpu, len);
    p->rb = buffer(p->b, rb_gpu, len);
    cr_assert_eq(tern_register_memory(p->a, p->la, len, NULL), 0, "%s",
                 tern_engine_last_error(p->a));
    cr_assert_eq(tern_register_memory(p->b, p->rb, len, NULL), 0, "%s",
                 tern_engine_last_error(p->b));
    p->seg = tern_segment_open(p->a, tern_engine_server_name(p->b));
    cr_assert_geq(p->seg, 0, "%s", tern_engine_last_error(p->a));
}

static tern_engine *engine_shm_tcp(const char *name)
{
    char err[1024] = "";
    tern_engine *e = tern_engine_create_from_yaml(
        "server_name: 127.0.0.1:0\n"
        "transports:\n"
        "  - name: shm\n"
        "  - name: tcp\n"
        "    slice_size: 64K\n"
        "log_level: error\n", name, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    return e;
}

static void pair_up(pair *p, size_t len, int staging)
{
    pair_up2(p, len, staging, 1, 0);
}

static void pair_down(pair *p)
{
    if (p->la_gpu)
        tern_gpu_free(p->a, p->la);
    else
        free(p->la);
    if (p->rb_gpu)
        tern_gpu_free(p->b, p->rb);
    tern_engine_destroy(p->a);
    tern_engine_destroy(p->b);
    if (!p->rb_gpu)
        free(p->rb);
}

/* Host <-> either kind of buffer. */
static void put(tern_engine *e, int gpu, void *dst, const void *src, size_t n)
{
    if (gpu)
        cr_assert_eq(tern_gpu_copy(e, dst, src, n), 0, "%s", tern_engine_last_error(e));
    else
        memcpy(dst, src, n);
}

static void fill(uint8_t *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)(i * 131u + seed * 7u + (i >> 9));
}

/* One request; returns its wait code and copies its message. */
static int move(pair *p, tern_opcode op, size_t off, size_t len, char *msg, size_t msglen)
{
    tern_batch *b = tern_batch_alloc(p->a, 1);
    cr_assert_not_null(b);
    tern_request r = {.opcode = op, .local = (char *)p->la + off, .segment = p->seg,
                      .remote = (uintptr_t)p->rb + off, .length = len};
    cr_assert_eq(tern_batch_submit(b, &r, 1), 1);
    int rc = tern_batch_wait(b, 60000);
    snprintf(msg, msglen, "%s", tern_batch_error(b, 0));
    cr_assert_eq(tern_batch_free(b), 0);
    return rc;
}

static const size_t sizes[] = {
    1, 4095, 64 * KiB - 1, 64 * KiB, 64 * KiB + 1,
    /* the tail rule's edge: 64 KiB slice + 16 KiB tail is one slice that
     * fills a staging buffer exactly; one byte more is two slices */
    80 * KiB, 80 * KiB + 1,
    3 * 64 * KiB + 7, 1 * MiB + 12345, 5 * MiB - 3,
};

/* Every size both ways, checked byte for byte with fences on both ends. */
static void both_ways(pair *p)
{
    size_t len = p->len;
    uint8_t *src = malloc(len), *back = malloc(len), *fence = malloc(len);
    char msg[512];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], off = i * 97; /* unaligned starts too */
        /* local -> remote (WRITE) */
        fill(src, len, (unsigned)i);
        put(p->a, p->la_gpu, p->la, src, len);
        memset(fence, 0xEE, len);
        put(p->b, p->rb_gpu, p->rb, fence, len);
        cr_assert_eq(move(p, TERN_WRITE, off, n, msg, sizeof msg), 0, "write %zu: %s", n, msg);
        put(p->b, p->rb_gpu, back, p->rb, len);
        cr_assert_eq(memcmp(back + off, src + off, n), 0, "write %zu bytes differ", n);
        cr_assert_eq(back[off + n], 0xEE, "write %zu ran past its end", n);
        if (off)
            cr_assert_eq(back[off - 1], 0xEE, "write %zu wrote before its start", n);
        /* remote -> local (READ) */
        fill(src, len, (unsigned)i + 100);
        put(p->b, p->rb_gpu, p->rb, src, len);
        memset(fence, 0x55, len);
        put(p->a, p->la_gpu, p->la, fence, len);
        cr_assert_eq(move(p, TERN_READ, off, n, msg, sizeof msg), 0, "read %zu: %s", n, msg);
        put(p->a, p->la_gpu, back, p->la, len);
        cr_assert_eq(memcmp(back + off, src + off, n), 0, "read %zu bytes differ", n);
        cr_assert_eq(back[off + n], 0x55, "read %zu ran past its end", n);
        if (off)
            cr_assert_eq(back[off - 1], 0x55, "read %zu wrote before its start", n);
    }
    free(src);
    free(back);
    free(fence);
}

Test(gpu, gpu_to_host_byte_exact_through_staging)
{
    pair p;
    pair_up2(&p, 6 * MiB, 3, 1, 0); /* 3 buffers: a 5 MiB request reuses each many times */
    both_ways(&p);
    cr_assert_gt(fake_counter("fake_cuda_async_copies"), 0, "nothing went through staging");
    pair_down(&p);
}

Test(gpu, host_to_remote_gpu_byte_exact)
{
    pair p;
    pair_up2(&p, 6 * MiB, 3, 0, 1); /* the target's tcp reaches its GPU through mem_copy */
    both_ways(&p);
    pair_down(&p);
}

Test(gpu, gpu_to_gpu_byte_exact)
{
    setenv("FAKE_CUDA_DELAY_US", "50", 1);
    pair p;
    pair_up2(&p, 6 * MiB, 4, 1, 1);
    both_ways(&p);
    pair_down(&p);
}

/* shm cannot reach a peer's GPU memory (cross-memory attach needs host
 * pages): the peer moves to tcp, whose target stages it; local GPU memory
 * goes through the core's staging on shm. */
Test(gpu, peer_gpu_memory_moves_the_peer_from_shm_to_tcp)
{
    use_fake();
    pair p = {.len = 6 * MiB, .la_gpu = 1, .rb_gpu = 1};
    p.a = engine_shm_tcp("A");
    p.b = engine_shm_tcp("B");
    p.la = buffer(p.a, 1, p.len);
    p.rb = buffer(p.b, 1, p.len);
    cr_assert_eq(tern_register_memory(p.a, p.la, p.len, NULL), 0);
    cr_assert_eq(tern_register_memory(p.b, p.rb, p.len, NULL), 0);
    p.seg = tern_segment_open(p.a, tern_engine_server_name(p.b));
    cr_assert_geq(p.seg, 0);
    both_ways(&p);
    char name[32] = "";
    cr_assert_eq(tern_segment_transport(p.a, p.seg, name, sizeof name), 0);
    cr_assert_str_eq(name, "tcp");
    pair_down(&p);
}

Test(gpu, local_gpu_memory_is_staged_on_shm)
{
    use_fake();
    pair p = {.len = 6 * MiB, .la_gpu = 1, .rb_gpu = 0};
    p.a = engine_shm_tcp("A");
    p.b = engine_shm_tcp("B");
    p.la = buffer(p.a, 1, p.len);
    p.rb = buffer(p.b, 0, p.len);
    cr_assert_eq(tern_register_memory(p.a, p.la, p.len, NULL), 0);
    cr_assert_eq(tern_register_memory(p.b, p.rb, p.len, NULL), 0);
    p.seg = tern_segment_open(p.a, tern_engine_server_name(p.b));
    cr_assert_geq(p.seg, 0);
    both_ways(&p);
    char name[32] = "";
    cr_assert_eq(tern_segment_transport(p.a, p.seg, name, sizeof name), 0);
    cr_assert_str_eq(name, "shm");
    pair_down(&p);
}

/* efa (libfabric's tcp provider here) gets GPU memory through the same
 * staging: its registrations of the staging buffers give the local keys. */
Test(gpu, local_gpu_memory_is_staged_on_efa)
{
    use_fake();
    char err[1024] = "";
    const char *yaml = "server_name: 127.0.0.1:0\n"
                       "transports:\n"
                       "  - name: efa\n"
                       "    provider: tcp\n"
                       "log_level: error\n";
    pair p = {.len = 6 * MiB, .la_gpu = 1, .rb_gpu = 0};
    p.a = tern_engine_create_from_yaml(yaml, "A", err, sizeof err);
    if (!p.a)
        cr_skip_test("efa with libfabric's tcp provider does not load here: %s", err);
    p.b = tern_engine_create_from_yaml(yaml, "B", err, sizeof err);
    cr_assert_not_null(p.b, "%s", err);
    p.la = buffer(p.a, 1, p.len);
    p.rb = buffer(p.b, 0, p.len);
    cr_assert_eq(tern_register_memory(p.a, p.la, p.len, NULL), 0, "%s",
                 tern_engine_last_error(p.a));
    cr_assert_eq(tern_register_memory(p.b, p.rb, p.len, NULL), 0);
    p.seg = tern_segment_open(p.a, tern_engine_server_name(p.b));
    cr_assert_geq(p.seg, 0, "%s", tern_engine_last_error(p.a));
    both_ways(&p);
    pair_down(&p);
}

Test(gpu, staging_survives_slow_device_copies)
{
    setenv("FAKE_CUDA_DELAY_US", "300", 1); /* a copy not waited for would read stale bytes */
    pair p;
    size_t len = 2 * MiB + 333;
    pair_up(&p, len, 4);
    uint8_t *src = malloc(len), *back = malloc(len);
    char msg[512];
    fill(src, len, 7);
    cr_assert_eq(tern_gpu_copy(p.a, p.la, src, len), 0);
    cr_assert_eq(move(&p, TERN_WRITE, 0, len, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(memcmp(p.rb, src, len), 0, "write differs");
    fill(p.rb, len, 9);
    cr_assert_eq(move(&p, TERN_READ, 0, len, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(tern_gpu_copy(p.a, back, p.la, len), 0);
    cr_assert_eq(memcmp(back, p.rb, len), 0, "read differs");
    free(src);
    free(back);
    pair_down(&p);
}

Test(gpu, staging_pool_stays_within_its_bound)
{
    setenv("FAKE_CUDA_DELAY_US", "100", 1);
    pair p;
    size_t len = 4 * MiB;
    pair_up(&p, len, 2);
    char msg[512];
    long before = fake_counter("fake_cuda_host_allocs");
    /* several requests at once: 4 x 16 slices compete for 2 buffers */
    tern_batch *b = tern_batch_alloc(p.a, 4);
    tern_request r[4];
    for (int i = 0; i < 4; i++)
        r[i] = (tern_request){.opcode = i % 2 ? TERN_READ : TERN_WRITE,
                              .local = (char *)p.la + (size_t)i * MiB, .segment = p.seg,
                              .remote = (uintptr_t)p.rb + (size_t)i * MiB, .length = MiB};
    cr_assert_eq(tern_batch_submit(b, r, 4), 4);
    cr_assert_eq(tern_batch_wait(b, 60000), 0, "%s", tern_batch_error(b, 0));
    tern_batch_free(b);
    cr_assert_eq(move(&p, TERN_WRITE, 0, len, msg, sizeof msg), 0, "%s", msg);
    long made = fake_counter("fake_cuda_host_allocs") - before;
    cr_assert_gt(made, 0, "no staging buffer was made");
    cr_assert_leq(made, 2, "%ld staging buffers made with gpu_staging_buffers: 2", made);
    pair_down(&p);
}

Test(gpu, injected_device_copy_failure_fails_the_request)
{
    setenv("FAKE_CUDA_FAIL_COPY", "3", 1); /* the third asynchronous copy fails */
    pair p;
    size_t len = MiB;
    pair_up(&p, len, 4);
    char msg[512];
    int rc = move(&p, TERN_WRITE, 0, len, msg, sizeof msg);
    cr_assert_eq(rc, TERN_ERR_DEVICE, "rc %d: %s", rc, msg);
    cr_assert_not_null(strstr(msg, "copy from the GPU failed"), "%s", msg);
    cr_assert_not_null(strstr(msg, "FAKE_CUDA_FAIL_COPY"), "%s", msg);
    /* the engine goes on: the next request (no more injected failures) works */
    uint8_t *src = malloc(len);
    fill(src, len, 3);
    cr_assert_eq(tern_gpu_copy(p.a, p.la, src, len), 0);
    cr_assert_eq(move(&p, TERN_WRITE, 0, len, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(memcmp(p.rb, src, len), 0);
    free(src);
    pair_down(&p);
}

Test(gpu, injected_copy_to_gpu_failure_fails_a_read)
{
    setenv("FAKE_CUDA_FAIL_COPY", "2", 1);
    pair p;
    pair_up(&p, MiB, 4);
    char msg[512];
    int rc = move(&p, TERN_READ, 0, MiB, msg, sizeof msg);
    cr_assert_eq(rc, TERN_ERR_DEVICE, "rc %d: %s", rc, msg);
    cr_assert_not_null(strstr(msg, "copy to the GPU failed"), "%s", msg);
    pair_down(&p);
}

/* ---- topology: the NIC closest to a GPU ------------------------------------ */

static void mkpci(const char *root, const char *path, int numa)
{
    char cmd[1024], f[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/devices/%s'", root, path);
    cr_assert_eq(system(cmd), 0);
    snprintf(f, sizeof f, "%s/devices/%s/numa_node", root, path);
    FILE *o = fopen(f, "w");
    cr_assert_not_null(o);
    fprintf(o, "%d\n", numa);
    fclose(o);
}

static void link_to(const char *root, const char *from, const char *to)
{
    char cmd[1100], target[1024], link[1024];
    snprintf(link, sizeof link, "%s/%s", root, from);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", link);
    cr_assert_eq(system(cmd), 0);
    snprintf(target, sizeof target, "%s/devices/%s", root, to);
    cr_assert_eq(symlink(target, link), 0);
}

Test(gpu_topology, nearest_nic_by_pci_distance_then_numa)
{
    char root[] = "/tmp/tern-gputopo-XXXXXX";
    cr_assert_not_null(mkdtemp(root));
    mkpci(root, "pci0000:00/0000:00:01.0/0000:10:00.0", 0);   /* the GPU */
    mkpci(root, "pci0000:00/0000:00:01.0/0000:11:00.0", 0);   /* a: behind its switch */
    mkpci(root, "pci0000:00/0000:00:02.0/0000:20:00.0", 0);   /* b: same root complex */
    mkpci(root, "pci0000:80/0000:80:01.0/0000:81:00.0", 1);   /* c: another socket */
    mkpci(root, "pci0000:80/0000:80:02.0/0000:82:00.0", 0);   /* d: another root, GPU's node */
    link_to(root, "bus/pci/devices/0000:10:00.0", "pci0000:00/0000:00:01.0/0000:10:00.0");
    link_to(root, "class/net/a/device", "pci0000:00/0000:00:01.0/0000:11:00.0");
    link_to(root, "class/net/b/device", "pci0000:00/0000:00:02.0/0000:20:00.0");
    link_to(root, "class/net/c/device", "pci0000:80/0000:80:01.0/0000:81:00.0");
    link_to(root, "class/net/d/device", "pci0000:80/0000:80:02.0/0000:82:00.0");
    tern_device_info devs[4] = {{.name = "c", .sysfs_path = "class/net/c/device"},
                                {.name = "b", .sysfs_path = "class/net/b/device"},
                                {.name = "a", .sysfs_path = "class/net/a/device"},
                                {.name = "d", .sysfs_path = "class/net/d/device"}};
    char out[64];
    cr_assert_eq(tern_gpu_nearest(root, "0000:10:00.0", devs, 4, out, sizeof out), 2);
    cr_assert_str_eq(out, "a", "the NIC behind the GPU's own switch");
    cr_assert_eq(tern_gpu_nearest(root, "0000:10:00.0", devs, 2, out, sizeof out), 1);
    cr_assert_str_eq(out, "b", "then one on the same root complex");
    tern_device_info far[2] = {devs[0], devs[3]};
    cr_assert_eq(tern_gpu_nearest(root, "0000:10:00.0", far, 2, out, sizeof out), 1);
    cr_assert_str_eq(out, "d", "then one on the GPU's NUMA node");
    cr_assert_eq(tern_gpu_nearest(root, "0000:10:00.0", devs, 1, out, sizeof out),
                 TERN_ERR_NOT_FOUND, "another socket only: no preference");
    cr_assert_str_eq(out, "");
    cr_assert_eq(tern_gpu_nearest(root, "0000:99:00.0", devs, 4, out, sizeof out),
                 TERN_ERR_NOT_FOUND, "unknown GPU");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

/* ---- the real driver -------------------------------------------------------------- */

Test(gpu, real_driver)
{
    unsetenv("TERN_CUDA_LIBRARY");
    void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        cr_skip_test("no libcuda.so.1 on this machine (%s): the real-driver checks run in "
                     "scripts/gpu-check.sh on a GPU machine", why ? why : "");
    }
    dlclose(dl);
    tern_engine *e = engine_tcp("A", 4);
    int n = tern_gpu_count(e);
    if (n <= 0) {
        tern_engine_destroy(e);
        cr_skip_test("libcuda.so.1 loads but sees no GPU");
    }
    void *d = NULL;
    cr_assert_eq(tern_gpu_alloc(e, 0, MiB, &d), 0, "%s", tern_engine_last_error(e));
    cr_assert_eq(tern_register_memory(e, d, MiB, "cpu:0"), TERN_ERR_INVAL);
    cr_assert_eq(tern_register_memory(e, d, MiB, NULL), 0, "%s", tern_engine_last_error(e));
    tern_unregister_memory(e, d);
    tern_gpu_free(e, d);
    tern_engine_destroy(e);
}
