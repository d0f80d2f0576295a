/* tests/support/integration_common.h: the harness shared by the two-process
 * tests (the transports' integration tests, the hostile control-plane
 * tests, shm fallback, the API across processes); integration_common.c
 * holds the code, compiled into each program that includes this.
 *
 * The target engine runs in a helper program (tests/support/helpers/<x>_peer.c,
 * built on tests/support/helpers/peer_common.h) that maps GUARD | A | B | GUARD,
 * prints  READY <server name> <addr A> <len A> <addr B> <len B>  and answers
 * CHECK / EXIT on stdin.  This process is the initiator: it starts and
 * stops the peer, registers local buffers and runs single requests.
 *
 * What differs per transport stays in the test file: the engine YAML, the
 * peer program's path and arguments, and the byte pattern of fill()
 * (define IT_FILL_MUL / IT_FILL_SHIFT before including to change it).
 * Include after <criterion/criterion.h> with _GNU_SOURCE defined. */
#ifndef TERN_TESTS_INTEGRATION_COMMON_H
#define TERN_TESTS_INTEGRATION_COMMON_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tern/tern.h"

#ifndef IT_FILL_MUL
#define IT_FILL_MUL 2246822519u
#endif
#ifndef IT_FILL_SHIFT
#define IT_FILL_SHIFT 11
#endif

/* A target process and what it announced in its READY line. */
typedef struct it_peer {
    pid_t pid;
    FILE *in, *out;
    char name[128];
    uint64_t a, la, b, lb;
} it_peer;

/* The byte pattern a test file writes: byte i of seed s is
 * ((i * mul) >> shift) ^ s. */
typedef struct it_pattern {
    uint32_t mul;
    unsigned shift;
} it_pattern;

/* This file's pattern (IT_FILL_MUL, IT_FILL_SHIFT). */
#define IT_PATTERN ((it_pattern){IT_FILL_MUL, IT_FILL_SHIFT})

uint64_t now_ms(void);

/* Runs argv (argv[0] is the program) with its stdin and stdout on pipes to
 * p->in and p->out; does not wait for anything. */
void peer_spawn(it_peer *p, char *const argv[]);
/* peer_spawn, then waits for the READY line and fills in what it says. */
void peer_startv(it_peer *p, char *const argv[]);
/* Runs  path [arg]  (arg may be NULL) and waits for its READY line. */
void peer_start(it_peer *p, const char *path, const char *arg);
/* The next line from the target, waiting up to tmo_ms for it. */
void peer_line(it_peer *p, char *line, size_t len, int tmo_ms);
/* Sends a command, returns the answer line in line (10 s at most). */
void peer_ask(it_peer *p, const char *cmd, char *line, size_t len);
void peer_check_canaries(it_peer *p);
/* Closes the target's stdin (EOF: it exits), waits up to 10 s for it to
 * exit (SIGKILL after that); returns its exit status, -1 if killed. */
int peer_reap(it_peer *p);
/* The same; returns the signal that ended the target, 0 if it exited. */
int peer_reap_signal(it_peer *p);
/* EXIT, then peer_reap. */
void peer_stop(it_peer *p);

/* len bytes mapped and registered with e. */
uint8_t *local_buf(tern_engine *e, size_t len);
void it_fill(it_pattern pat, uint8_t *p, size_t n, unsigned seed);

static inline void fill(uint8_t *p, size_t n, unsigned seed)
{
    it_fill(IT_PATTERN, p, n, seed);
}

/* Opens the peer's segment and checks the transport the core chose. */
tern_segment_id open_expect(tern_engine *e, const it_peer *p, const char *transport);

/* One request, waited for; returns its final status (msg gets its error). */
tern_status one(tern_engine *e, tern_segment_id seg, int op, void *local, uint64_t remote,
                uint64_t len, char *msg, size_t msglen);

/* WRITE n bytes of src at remote, READ them back into dst and compare;
 * what (may be NULL) names the request in the message if they differ. */
void write_read_back(tern_engine *e, tern_segment_id seg, uint8_t *src, uint8_t *dst,
                     uint64_t remote, uint64_t n, const char *what);

/* After a target died mid-batch: every request ended COMPLETED or FAILED,
 * each failure says why.  Returns how many FAILED. */
size_t count_failed(tern_batch *b, size_t n);

/* After the target of batch b (n requests) was killed: waits up to wait_ms
 * until no request is pending, then count_failed.  *waited_ms is how long
 * the wait took. */
size_t wait_after_kill(tern_batch *b, size_t n, int wait_ms, uint64_t *waited_ms);

/* Submits n WRITEs of len bytes from src to the peer's A, SIGKILLs the peer
 * delay_us later, wait_after_kill (30 s), and frees the batch (at once:
 * a request ends only when no transport holds a slice of it).  Returns how
 * many FAILED; the caller reaps the peer. */
size_t it_kill_mid_batch(tern_engine *e, tern_segment_id seg, it_peer *p, uint8_t *src,
                         uint64_t len, size_t n, unsigned delay_us, uint64_t *waited_ms);

/* n WRITEs of the same len bytes from src to remote in seg (caller frees):
 * the batch a test kills its target under. */
tern_request *same_writes(tern_segment_id seg, void *src, uint64_t remote, uint64_t len,
                          size_t n);

/* The data-path cases every transport's integration test runs.  A label
 * other than "" (the transport list, say) starts each failure message. */

/* For each size: fill src (seed seed0 + i), WRITE it into the peer's A,
 * READ it back into dst, compare, and check the READ wrote nothing past
 * its end.  Size i lands at A + 4096 i (sizes from 32 MiB on at A), 3 bytes
 * further for odd i; src and dst hold the largest size plus one byte. */
void it_write_read_sizes(tern_engine *e, tern_segment_id seg, const it_peer *p, uint8_t *src,
                         uint8_t *dst, const uint64_t *sizes, size_t nsizes, unsigned seed0,
                         it_pattern pat, const char *label);

/* fill src (seed), WRITE span bytes of it across the end of A and the start
 * of B (in_a bytes in A), READ them back into dst, compare; then the
 * target's canaries. */
void it_span_both_buffers(tern_engine *e, tern_segment_id seg, it_peer *p, uint8_t *src,
                          uint8_t *dst, uint64_t span, uint64_t in_a, unsigned seed,
                          it_pattern pat);

/* READs and WRITEs outside the peer's registered buffers (its guards,
 * straddling either end, an overflowing range, a low address) are refused
 * with a reason, a refused READ leaves buf (1 MiB, registered) alone, and
 * the target's canaries hold. */
void it_refuse_outside_buffers(tern_engine *e, tern_segment_id seg, it_peer *p, uint8_t *buf,
                               const char *label);

#endif
