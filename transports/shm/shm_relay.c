/* transports/shm/shm_relay.c: the relay, a copy in two halves through a
 * small shared ring, for registrations neither side can map (the
 * application's own private memory).
 *
 * Why: cross-memory attach pins every 4 KiB page of the peer for each copy
 * and the copier does it alone, so one copier reaches about a third of
 * memcpy and the pinning, not the bytes, is the limit.  Through the relay
 * the initiator copies its side into a slot of a ring it created (a sealed
 * memfd the target maps) and the target's relay thread copies the slot
 * into its own registered memory (READ: the other way round): two plain
 * memcpy calls on two CPUs, pipelined over the ring's slots, no page
 * pinned.  docs/protocol.md, "Same-host transport", "The relay".
 *
 * Ownership of a slot: FREE -> POSTED by the initiator (after filling
 * it), POSTED -> SERVING -> DONE by the target (claimed, then answered
 * with a status), DONE -> FREE by the initiator (after reading it).  An
 * initiator that waited relay_timeout_ms takes back what the target has
 * not claimed (POSTED -> FREE), so a stopped target that wakes up later
 * never writes a stale copy over newer bytes, and copies the chunk with
 * cross-memory attach instead.  Each initiator worker holds one ring of
 * the file at a time (claimed in `busy`), so a ring has one writer and its
 * slots are posted and served in order.  The target reads a posted slot's
 * fields once and checks them against its own registration table under
 * the table's lock, so a range it deregistered or never registered is
 * refused (TERN_ERR_RANGE) whatever the ring says, and its deregistration
 * waits for a copy under way.  The initiator trusts nothing of the target
 * but the status: its own lengths decide what it copies out. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm_internal.h"

#define RELAY_MAGIC 0x31594C52534E5254ULL /* "TRNSRLY1" */
#define RELAY_FREE 0u
#define RELAY_POSTED 1u
#define RELAY_DONE 2u
#define RELAY_SERVING 3u /* claimed by the target: it can no longer be withdrawn */
/* How long the relay thread keeps looking (yielding the CPU between looks)
 * after its last copy before it sleeps on the bell: long enough to cover
 * the gap between the pieces of one request and the next request of a
 * pipeline, short enough to cost an idle target nothing. */
#define RELAY_SPIN_NS 200000
#define RELAY_NAP_MS 100 /* a sleeping relay looks for its stop flag this often */

/* The file: head, then rings*slots slot headers, then (from a page
 * boundary) rings*slots*slot_size bytes of data. */
typedef struct relay_head {
    uint64_t magic;
    uint32_t rings, slots, slot_size, reserved0;
    _Atomic uint32_t bell;   /* futex word: bumped by an initiator that finds the relay asleep */
    _Atomic uint32_t asleep; /* the relay thread sleeps on bell */
    _Atomic uint32_t gone;   /* the target stopped serving this ring */
    uint32_t reserved[7];
} relay_head;

typedef struct relay_slot {
    _Atomic uint32_t state;
    uint32_t op;
    uint64_t key, addr, len;
    int32_t status;
    uint32_t reserved[7];
} relay_slot;

_Static_assert(sizeof(relay_head) == 64, "one cache line");
_Static_assert(sizeof(relay_slot) == 64, "one cache line per slot");

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static size_t data_offset(uint32_t rings, uint32_t slots)
{
    size_t p = page_size(), h = sizeof(relay_head) + (size_t)rings * slots * sizeof(relay_slot);
    return (h + p - 1) / p * p;
}

static size_t file_size(uint32_t rings, uint32_t slots, uint32_t slot_size)
{
    return data_offset(rings, slots) + (size_t)rings * slots * slot_size;
}

static relay_slot *slot_at(uint8_t *map, uint32_t slots, uint32_t ring, uint32_t i)
{
    return (relay_slot *)(map + sizeof(relay_head)) + (size_t)ring * slots + i;
}

static uint8_t *data_at(uint8_t *map, uint32_t rings, uint32_t slots, uint32_t slot_size,
                        uint32_t ring, uint32_t i)
{
    return map + data_offset(rings, slots) + ((size_t)ring * slots + i) * slot_size;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The bell is a futex in a shared file mapping: not FUTEX_PRIVATE. */
static void bell_wait(_Atomic uint32_t *bell, uint32_t seen, int ms)
{
    struct timespec t = tern_kit_span_ms(ms);
    syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAIT, seen, &t, NULL, 0);
}

static void bell_ring(_Atomic uint32_t *bell)
{
    atomic_fetch_add(bell, 1);
    syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* ---- the initiator's side ------------------------------------------------------ */

void shm_relay_tx_init(shm_relay_tx *tx)
{
    memset(tx, 0, sizeof *tx);
    tx->fd = -1;
    tx->pidfd = -1;
}

int shm_relay_tx_create(shm_relay_tx *tx, uint32_t rings, uint32_t slots, uint32_t slot_size,
                        char *err, size_t errlen)
{
    if (tx->map && atomic_load(&tx->on))
        return 0; /* in use: a describe after the connect changes nothing */
    shm_relay_tx_fini(tx); /* a second handshake: a fresh ring, both cursors at 0 */
    size_t size = file_size(rings, slots, slot_size);
    int fd = memfd_create("tern-shm-relay", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_IO, "shm: memfd_create for the relay: %s",
                             strerror(errno));
    struct stat st;
    void *m = MAP_FAILED;
    /* Sealed against shrinking: the target maps it and must never touch a
     * page past its end (SIGBUS there). */
    if (ftruncate(fd, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        fstat(fd, &st) != 0 ||
        (m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        int e = errno;
        close(fd);
        return tern_kit_errf(err, errlen, TERN_ERR_IO, "shm: relay ring of %zu bytes: %s", size,
                             strerror(e));
    }
    relay_head *h = m;
    h->rings = rings;
    h->slots = slots;
    h->slot_size = slot_size;
    atomic_store(&h->bell, 0);
    atomic_store(&h->asleep, 0);
    atomic_store(&h->gone, 0);
    atomic_thread_fence(memory_order_seq_cst);
    h->magic = RELAY_MAGIC;
    tx->fd = fd;
    tx->ino = (uint64_t)st.st_ino;
    tx->map = m;
    tx->mlen = size;
    tx->rings = rings;
    tx->slots = slots;
    tx->slot_size = slot_size;
    atomic_init(&tx->busy, 0);
    atomic_init(&tx->on, 0);
    return 0;
}

/* The target said it serves the ring: from now on large chunks take it. */
void shm_relay_tx_start(shm_relay_tx *tx, pid_t target)
{
    if (!tx->map)
        return;
    /* A pidfd turns readable when the target exits (a zombie too), which
     * kill(pid, 0) would not tell. */
    tx->pidfd = (int)syscall(SYS_pidfd_open, target, 0);
    atomic_store(&tx->on, 1);
}

void shm_relay_tx_fini(shm_relay_tx *tx)
{
    if (tx->map)
        munmap(tx->map, tx->mlen);
    if (tx->fd >= 0)
        close(tx->fd);
    if (tx->pidfd >= 0)
        close(tx->pidfd);
    shm_relay_tx_init(tx);
}

static int claim_ring(shm_relay_tx *tx)
{
    uint_fast64_t m = atomic_load(&tx->busy);
    for (;;) {
        uint_fast64_t all = tx->rings >= 64 ? ~0ull : (1ull << tx->rings) - 1;
        if ((m & all) == all) { /* more copiers than rings: wait for one */
            sched_yield();
            m = atomic_load(&tx->busy);
            continue;
        }
        int r = __builtin_ctzll(~(unsigned long long)m);
        if (atomic_compare_exchange_weak(&tx->busy, &m, m | (1ull << r)))
            return r;
    }
}

static int target_gone(const shm_relay_tx *tx)
{
    struct pollfd p = {tx->pidfd, POLLIN, 0};
    return tx->pidfd >= 0 && poll(&p, 1, 0) > 0;
}

/* Waits for the target to answer slot s; 0, or the reason it never will
 * (TERN_ERR_TIMEOUT: it may still, see take_back). */
static int wait_done(shm_relay_tx *tx, relay_slot *s, int64_t timeout_ms, char *msg,
                     size_t msglen)
{
    relay_head *h = (relay_head *)tx->map;
    uint64_t start = 0;
    for (unsigned spins = 1; atomic_load_explicit(&s->state, memory_order_acquire) != RELAY_DONE;
         spins++) {
        if (spins % 64) {
            cpu_relax();
            continue;
        }
        sched_yield();
        if (spins % 1024)
            continue;
        uint64_t now = tern_kit_now_ns();
        if (!start)
            start = now;
        if (target_gone(tx))
            return tern_kit_errf(msg, msglen, TERN_ERR_CLOSED,
                                 "shm: the target process exited during a relayed copy");
        if (atomic_load(&h->gone))
            return tern_kit_errf(msg, msglen, TERN_ERR_CLOSED,
                                 "shm: the target closed the endpoint during a relayed copy");
        if ((int64_t)((now - start) / 1000000) > timeout_ms)
            return tern_kit_errf(msg, msglen, TERN_ERR_TIMEOUT,
                                 "shm: the target's relay did not answer in %lld ms (is the "
                                 "process stopped? transports.shm.relay_timeout_ms)",
                                 (long long)timeout_ms);
    }
    return 0;
}

static void post(shm_relay_tx *tx, relay_slot *s, int op, uint64_t key, uint64_t addr,
                 uint64_t len)
{
    relay_head *h = (relay_head *)tx->map;
    s->op = (uint32_t)op;
    s->key = key;
    s->addr = addr;
    s->len = len;
    s->status = 0;
    atomic_store_explicit(&s->state, RELAY_POSTED, memory_order_release);
    /* Either the relay, about to sleep, sees this slot posted, or we see it
     * asleep (both sides store, then fence, then load). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&h->asleep, memory_order_relaxed))
        bell_ring(&h->bell);
}

/* After a timeout: withdraws the `pending` slots in flight (oldest first)
 * the target has not claimed.  1 when none is being copied now, so the
 * chunk may be copied again another way; 0 when one is. */
static int take_back(shm_relay_tx *tx, uint32_t r, uint32_t pending)
{
    int clean = 1;
    for (uint32_t k = pending; k > 0; k--) {
        relay_slot *s = slot_at(tx->map, tx->slots, r, (uint32_t)((tx->next[r] - k) % tx->slots));
        uint32_t want = RELAY_POSTED;
        if (!atomic_compare_exchange_strong(&s->state, &want, RELAY_FREE) && want == RELAY_SERVING)
            clean = 0;
    }
    return clean;
}

int shm_relay_copy(shm_relay_tx *tx, int op, uint8_t *local, uint64_t key, uint64_t remote,
                   uint64_t len, int64_t timeout_ms, char *msg, size_t msglen)
{
    int r = claim_ring(tx);
    uint32_t S = tx->slots, B = tx->slot_size;
    uint64_t posted = 0, done = 0;
    uint32_t pending = 0;
    int rc = 0;
    while (done < len) {
        if (rc == 0 && posted < len && pending < S) { /* fill and post the next slot */
            uint32_t i = (uint32_t)(tx->next[r] % S);
            uint64_t n = len - posted < B ? len - posted : B;
            if (op == TERN_OP_WRITE)
                memcpy(data_at(tx->map, tx->rings, S, B, (uint32_t)r, i), local + posted, n);
            post(tx, slot_at(tx->map, S, (uint32_t)r, i), op, key, remote + posted, n);
            tx->next[r]++;
            posted += n;
            pending++;
            continue;
        }
        if (pending == 0)
            break; /* failed: nothing left in flight */
        /* The oldest slot in flight: our own length says what to copy out. */
        uint32_t i = (uint32_t)((tx->next[r] - pending) % S);
        relay_slot *s = slot_at(tx->map, S, (uint32_t)r, i);
        uint64_t n = len - done < B ? len - done : B;
        int w = wait_done(tx, s, timeout_ms, msg, msglen);
        if (w) { /* the ring's cursors no longer agree: never used again */
            atomic_store(&tx->on, 0);
            if (w == TERN_ERR_TIMEOUT && take_back(tx, (uint32_t)r, pending))
                w = SHM_RELAY_AGAIN;
            else if (w == TERN_ERR_TIMEOUT)
                tern_kit_errf(msg, msglen, TERN_ERR_TIMEOUT, "shm: the target's relay stopped "
                              "in the middle of a copy for %lld ms (is the process stopped? "
                              "transports.shm.relay_timeout_ms)", (long long)timeout_ms);
            atomic_fetch_and(&tx->busy, ~(1ull << r));
            return w;
        }
        int st = s->status;
        if (st == 0 && rc == 0 && op == TERN_OP_READ)
            shm_copy_stream(local + done, data_at(tx->map, tx->rings, S, B, (uint32_t)r, i), n);
        if (st != 0 && rc == 0)
            rc = tern_kit_errf(msg, msglen, st == TERN_ERR_RANGE ? TERN_ERR_RANGE : TERN_ERR_REFUSED,
                               "shm: the target refused a relayed %s of 0x%llx+%llu (key %llu): "
                               "%s", op == TERN_OP_WRITE ? "write" : "read",
                               (unsigned long long)(remote + done), (unsigned long long)n,
                               (unsigned long long)key,
                               st == TERN_ERR_RANGE ? "not inside one of its registrations"
                                                    : "a malformed request");
        atomic_store_explicit(&s->state, RELAY_FREE, memory_order_release);
        pending--;
        done += n;
        if (rc && pending == 0)
            break;
    }
    atomic_fetch_and(&tx->busy, ~(1ull << r));
    return rc;
}

/* ---- the target's side --------------------------------------------------------- */

struct shm_relay_rx {
    shm_local *local;
    uint8_t *map;
    size_t mlen;
    uint32_t rings, slots, slot_size; /* read once, at attach */
    uint64_t cursor[SHM_RELAY_MAX_RINGS];
    atomic_uint_fast64_t *served; /* the context's count of bytes copied for peers */
    atomic_int stop;
    pthread_t thread;
};

/* One posted slot: claimed (or withdrawn by the initiator first: 0), its
 * fields read once, checked, copied, answered. */
static int serve(shm_relay_rx *rx, uint32_t ring, uint32_t i)
{
    relay_slot *s = slot_at(rx->map, rx->slots, ring, i);
    uint32_t want = RELAY_POSTED;
    if (!atomic_compare_exchange_strong(&s->state, &want, RELAY_SERVING))
        return 0;
    uint32_t op = s->op;
    uint64_t key = s->key, addr = s->addr, len = s->len;
    int st;
    if ((op != TERN_OP_READ && op != TERN_OP_WRITE) || len == 0 || len > rx->slot_size)
        st = TERN_ERR_INVAL;
    else
        st = shm_local_move(rx->local, key, addr, len,
                            data_at(rx->map, rx->rings, rx->slots, rx->slot_size, ring, i),
                            op == TERN_OP_WRITE);
    if (st == 0)
        atomic_fetch_add(rx->served, len);
    s->status = st;
    atomic_store_explicit(&s->state, RELAY_DONE, memory_order_release);
    return 1;
}

static int serve_all(shm_relay_rx *rx)
{
    int work = 0;
    for (uint32_t r = 0; r < rx->rings; r++)
        for (;;) {
            uint32_t i = (uint32_t)(rx->cursor[r] % rx->slots);
            relay_slot *s = slot_at(rx->map, rx->slots, r, i);
            if (atomic_load_explicit(&s->state, memory_order_acquire) != RELAY_POSTED ||
                !serve(rx, r, i))
                break;
            rx->cursor[r]++;
            work = 1;
        }
    return work;
}

static int any_posted(shm_relay_rx *rx)
{
    for (uint32_t r = 0; r < rx->rings; r++) {
        relay_slot *s = slot_at(rx->map, rx->slots, r, (uint32_t)(rx->cursor[r] % rx->slots));
        if (atomic_load(&s->state) == RELAY_POSTED)
            return 1;
    }
    return 0;
}

static void *relay_main(void *arg)
{
    shm_relay_rx *rx = arg;
    relay_head *h = (relay_head *)rx->map;
    uint64_t idle_since = tern_kit_now_ns();
    while (!atomic_load(&rx->stop)) {
        if (serve_all(rx)) {
            idle_since = tern_kit_now_ns();
            continue;
        }
        if (tern_kit_now_ns() - idle_since < RELAY_SPIN_NS) {
            sched_yield();
            continue;
        }
        uint32_t seen = atomic_load(&h->bell);
        atomic_store(&h->asleep, 1);
        if (!any_posted(rx) && !atomic_load(&rx->stop))
            bell_wait(&h->bell, seen, RELAY_NAP_MS);
        atomic_store(&h->asleep, 0);
        idle_since = tern_kit_now_ns();
    }
    atomic_store(&h->gone, 1);
    return NULL;
}

/* Maps /proc/PID/fd/FD when it is the inode published, sealed against
 * shrinking and as large as the geometry in its head says. */
static int rx_map(shm_relay_rx *rx, pid_t pid, int64_t fd, uint64_t ino, char *err,
                  size_t errlen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd/%" PRId64, (long)pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_IO, "cannot open %s: %s", path,
                             strerror(errno));
    struct stat st;
    int seals = fcntl(f, F_GET_SEALS);
    relay_head h = {0};
    int rc = 0;
    if (fstat(f, &st) != 0 || (uint64_t)st.st_ino != ino || seals < 0 ||
        !(seals & F_SEAL_SHRINK))
        rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "%s is not the sealed file published "
                           "(inode %llu)", path, (unsigned long long)ino);
    else if (pread(f, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != RELAY_MAGIC ||
             h.rings == 0 || h.rings > SHM_RELAY_MAX_RINGS || h.slots == 0 ||
             h.slots > SHM_RELAY_MAX_SLOTS || h.slot_size < 4096 ||
             h.slot_size > SHM_RELAY_MAX_SLOT_SIZE || h.slot_size % 4096 ||
             (uint64_t)st.st_size < file_size(h.rings, h.slots, h.slot_size))
        rc = tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL, "the relay ring %s has a bad head "
                           "(magic %llx, %u rings of %u slots of %u bytes) or is shorter than "
                           "that (%lld bytes)", path, (unsigned long long)h.magic, h.rings,
                           h.slots, h.slot_size, (long long)st.st_size);
    if (rc == 0) {
        rx->rings = h.rings;
        rx->slots = h.slots;
        rx->slot_size = h.slot_size;
        rx->mlen = file_size(h.rings, h.slots, h.slot_size);
        void *m = mmap(NULL, rx->mlen, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (m == MAP_FAILED)
            rc = tern_kit_errf(err, errlen, TERN_ERR_IO, "mmap of the relay ring %s: %s", path,
                               strerror(errno));
        else
            rx->map = m;
    }
    close(f);
    return rc;
}

int shm_relay_rx_start(shm_local *local, atomic_uint_fast64_t *served, pid_t pid, int64_t fd,
                       uint64_t ino, shm_relay_rx **out, char *err, size_t errlen)
{
    shm_relay_rx *rx = calloc(1, sizeof *rx);
    if (!rx)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "out of memory for a relay");
    rx->local = local;
    rx->served = served;
    atomic_init(&rx->stop, 0);
    int rc = rx_map(rx, pid, fd, ino, err, errlen);
    if (rc == 0 && pthread_create(&rx->thread, NULL, relay_main, rx) != 0)
        rc = tern_kit_errf(err, errlen, TERN_ERR_IO, "cannot start the relay thread");
    if (rc) {
        if (rx->map)
            munmap(rx->map, rx->mlen);
        free(rx);
        return rc;
    }
    *out = rx;
    return 0;
}

void shm_relay_rx_describe(const shm_relay_rx *rx, uint32_t *rings, uint32_t *slots,
                           uint32_t *slot_size)
{
    *rings = rx->rings;
    *slots = rx->slots;
    *slot_size = rx->slot_size;
}

/* After it returns the thread is gone and no byte moves through the ring. */
void shm_relay_rx_stop(shm_relay_rx *rx)
{
    if (!rx)
        return;
    relay_head *h = (relay_head *)rx->map;
    atomic_store(&rx->stop, 1);
    bell_ring(&h->bell);
    pthread_join(rx->thread, NULL);
    munmap(rx->map, rx->mlen);
    free(rx);
}
