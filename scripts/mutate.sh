#!/usr/bin/env bash
# scripts/mutate.sh: do the tests fail when the code they guard is broken?
#
# Each mutation below is one small edit of the code: a Perl regex that must
# match exactly once in the tree's C sources (core/, transports/, include/,
# plugins/, tools/, python/src/; the file is found by searching, not by a
# fixed path) and the literal text that replaces the match.  For each one, a scratch copy of
# the tree is edited, rebuilt incrementally, and the test that should catch
# it is run; the test must FAIL.  Then the file is restored.
#
# Output, one line per mutation:
#   caught      the test failed against the mutated code (good)
#   SURVIVED    the test passed: it does not guard what it claims
#   NOT FOUND   the pattern matches nothing or more than one place: the code
#               changed under it; re-point the pattern (one table line)
#   BUILD FAIL  the mutated tree does not build
# The C sources searched are also python/src (the binding).  A test that is
# not a Criterion program (a Python file, a script) is named by its CTest
# name, with "-" as the Criterion filter.
# The exit status is non-zero unless every mutation was caught.
#
# Usage: scripts/mutate.sh [name ...]     (default: every mutation)
#   MUTATE_SET=quick     only the mutations tagged quick (a few minutes)
#   MUTATE_DIR=dir       scratch copy and build (default build-mutate/), kept
#                        between runs so rebuilds stay incremental
#   MUTATE_LIST=1        print the table and exit
#   JOBS=n               build parallelism (default 2)
#
#        scripts/mutate.sh --diff BASE
# Mutants generated on every line that `git diff BASE` adds or modifies in
# the C sources (operators swapped, boundaries shifted, constants and units
# changed, conditions negated, statements dropped, early returns), each
# built in the same scratch copy and run against the tests that
# scripts/mutate-map.txt names for its file.  A survivor is printed with
# its line; one no test can tell from the real code is listed, with the
# reason, in scripts/mutants-equivalent.txt.  Exit status 1 when any mutant
# survives.  scripts/mutate-diff.py does the work; docs/testing.md says how
# to run it and read it.
#   MUTATE_BUDGET_S=s    time for the whole run (default 900): when the
#                        mutants do not fit, a seeded sample is run
#   MUTATE_SEED=n        the sample's seed (default 1)
#   MUTATE_TIMEOUT_S=s   each test's limit (default 3x its baseline + 10 s,
#                        at least 30 s); a test past it kills the mutant
#
# The whole script is one { } group: bash parses it before running it, so
# editing this file (the table) while a run is going does not derail that run.
{
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(realpath -m -- "${MUTATE_DIR:-$ROOT/build-mutate}") # a relative one: from where it was started
SET=${MUTATE_SET:-all}
JOBS=${JOBS:-2}
SRC=$DIR/src
BLD=$DIR/build

# name | sets (comma list, - for none) | pattern (Perl regex, matches once) | replacement (literal) | ctest test | Criterion filter
# Keep each mutation on ONE line: when the code moves, re-point it here.
read -r -d '' TABLE <<'EOF'
# -- the ABI checks
# (one loader checks both kinds: the same edit must fail both tests)
abi-major-newer-accepted | quick | \(t->abi_major \K!=(?= k->abi_major\)) | < | test_loader | loader/newer_abi_major
meta-abi-major-newer-accepted | - | \(t->abi_major \K!=(?= k->abi_major\)) | < | test_metadata | plugin/every_abi_check_is_made
# -- handshake daemon: frame cap, deadline for slow clients
# (A length far over every limit is refused twice: by the header's cap and
# by its type's limit before anything is allocated; no single edit lets a
# 1 GiB frame through, so the mutation stands on the type's limit.)
hs-type-limit-ignored | quick | if \(\Kc->plen > tern_hs_request_limit\(first\)(?=\) \{) | 0 | test_hostile_control | hostile_control/request_limits_per_type
hs-slow-clients-never-expire | - | if \(\Kc->deadline_ms <= now(?=\)) | 0 | test_hostile | hostile/handshake_slowloris_one_byte_per_second
# -- endpoints: fail-over, simultaneous open.  (One connect per peer has two
# layers since the data path parks a peer's slices while one of them
# connects, and the endpoint code shares a connect per key: no single edit
# breaks it, so no mutation stands for it.)
failover-marks-wrong-device | quick | tern_xport_device_failed\(x, \Kcs->local_dev(?=\);) | !cs->local_dev | test_endpoint | endpoint/device_failure_fails_over
simultaneous-open-no-tiebreak | - | int refuse = \Kc && strcmp\(c->local_nic_path, p->hd->local_nic_path\) < 0; | 0; | test_endpoint | endpoint/simultaneous_open_ends_with_one_connection
simultaneous-open-no-replace | - | if \(rc == TERN_ERR_EXISTS && \K\(a->c->yielded \|\| a->c->replace\)(?=\) \{) | 0 | test_endpoint | endpoint/simultaneous_open_ends_with_one_connection
# -- tcp transport: socket options, the target's own range check
tcp-socket-options-ignored | - | void tcp_sock_tune\(tcp_ctx \*ctx, int fd\)\n\{\n\K(?=    int one = 1;) | return; | test_tcp_transport | tcp_transport/options_are_honoured
tcp-target-range-one-byte | quick | c->mr = q\.length \? tcp_mr_pin\(ctx, q\.addr, \Kq\.length(?=\) : NULL;) | 1 | test_tcp_integration | tcp_integration/unregistered_remote_addresses_refused
# tcp initiator: a failed poll() while a connect is under way is no finished connect
tcp-connect-failed-poll-ok | - | int n = ctx->sys\.poll\(&pf, 1, now < deadline \? \(int\)\(deadline - now\) : 0\);\n\s+if \(n \K>(?= 0\)\n\s+return 0;) | != | test_tcp_syscalls | tcp_syscalls/failed_poll_fails_the_connect
# -- range checks: the initiator's descriptor lookup ignores the length
range-initiator-ignores-length | - | return off <= b->length \K&& len <= b->length - off(?= \? b : NULL;) | && 1 | test_desc | segment/find_buffer_is_exact_and_overflow_safe
# -- descriptors: overlapping buffers accepted; a refusal without its message
desc-overlap-accepted | - | if \(\K(?=d->buffers\[i\]\.addr < d->buffers\[i - 1\]\.addr \+ d->buffers\[i - 1\]\.length\)) | 0 && | test_desc | segment/refusals_name_the_key
desc-refusal-without-message | - | return tern_errf\(err, \Kerrlen(?=, TERN_ERR_PROTOCOL, "invalid JSON at byte %zu: %s", used,) | 0 | test_desc | fuzz/mutated_descriptors_decode_or_refuse_cleanly
# -- batches: slicing, retries, late completions, failures reported as such
slice-tail-rule-dropped | - | remaining <= slice_size\K \+ TERN_TAIL_SLACK | + 0 | test_batch | batch/slicing_and_tail_rule
slice-crosses-remote-buffer | - | n = n < lrem \? n : lrem;\n    return \Kn < rrem \? n : rrem(?=;) | n | test_batch | batch/request_spans_adjacent_buffers
retries-none | - | if \(cs->attempt >= \Ke->cfg->retries(?=\)\n        return -1;) | 0 | test_endpoint | endpoint/connection_failure_rebuilds_endpoint
late-completion-counted | - | if \(\Ktern_req_active_locked\(q\)(?=\) \{\n        q->transferred) | 1 | test_datapath | datapath/timeout_and_free_refused_while_in_flight
failed-reported-completed | - | tern_req_fail_locked\(b, cs->idx, \KTERN_FAILED(?=, code,) | TERN_COMPLETED | test_faults | faults/peer_killed_at_a_random_point_100_times
# -- auth: any proof accepted
auth-any-proof-accepted | quick | return \KCRYPTO_memcmp\(a, b, n\) == 0(?=;) | 1 | test_auth | auth_exchange/wrong_client_proof_is_refused_by_the_daemon
# -- eviction: hits never set SIEVE's visited bit (it degrades to FIFO)
sieve-hits-not-visited | - | if \(!atomic_load_explicit\(&e->visited, memory_order_relaxed\)\)\n\s+atomic_store_explicit\(&e->visited, \K1(?=, memory_order_relaxed\);) | 0 | test_epstore | epstore/sieve_order
# -- healing: a failed peer's descriptor is fetched again
heal-no-refetch | - | if \(!\Kcs->refetch(?= && !cs->range\)) | 0 | test_heal | heal/target_restarted_same_name_ephemeral_data_port
# -- same-host transport: ranges checked against the peer's current table
shm-stale-registrations | - | int fresh = \Kr->seq == h\.seq(?=;) | 1 | test_shm_integration | shm_integration/buffer_unregistered_by_the_peer_is_never_written
# -- the shm relay: the target checks each request itself; a timed-out copier takes its slots back
shm-relay-range-unchecked | - | int ok = \Kcovers\(l->t->entries, l->t->head\.n, key, addr, len\)(?=;\n    if \(ok && to_local\)) | 1 | test_shm_transport | shm_transport/the_relay_checks_every_request_of_a_hostile_ring
shm-relay-slots-not-taken-back | - | if \(!\Katomic_compare_exchange_strong\(&s->state, &want, RELAY_FREE\)(?= && want == RELAY_SERVING\)) | 0 | test_shm_integration | shm_integration/a_stopped_target_is_reached_without_its_relay
# -- control plane: a passive endpoint only for the segment that asked
peer-check-skipped | - | else if \(\K(?=tern_peer_check_connection\(e, p\.x) | 0 && | test_hostile_control | hostile_control/hijack_efa_refused
# -- files the configuration names: opened without blocking
fileio-blocking-open | - | O_RDONLY \| \KO_NONBLOCK(?= \| O_NOCTTY) | 0 | test_config_files | files/config_file_fifo_devzero_dir_missing
# -- tcp target: a peer that stops sending is cut by the progress floor
tcp-no-progress-floor | - | if \(\K(?=ctx->opt_progress_min_rate && c->starved &&) | 0 && | test_tcp_hostile | tcp_hostile/trickled_write_blocks_neither_register_nor_other_peers
# -- etcd: members of a cluster that hold a request past the timeout are waited for (an election)
etcd-timeout-not-electing | - | \*electing \|= retry == 2 \|\| \K\(rc == TERN_ERR_TIMEOUT && s->nhosts > 1\)(?=;) | 0 | test_metadata | etcd/members_that_hold_requests_are_waited_for
# -- efa over libfabric shm: regions named per process, dead ones removed
efa-shm-default-name | - | if \(\Kefa_is_shm\(d\)(?=\) \{\n        efa_shm_sweep) | 0 | test_efa_transport | efa_transport/shm_regions_named_per_process_and_dead_ones_removed
efa-shm-sweep-live | - | pid == getpid\(\) \|\| \Kkill\(pid, 0\) == 0 \|\| errno != ESRCH(?=\)) | 0 | test_efa_transport | efa_transport/shm_regions_named_per_process_and_dead_ones_removed
efa-shm-large-writes-attach | - | int bounce = \Ks->opcode == TERN_OP_WRITE(?= && e->peer->has_b &&) | 0 | test_efa_integration | efa_integration/large_writes_never_attach_small_ones_do_provider_shm
efa-shm-zombie-alive | - | p->pidfd = \Kefa_pidfd_open\(p->pid\)(?=;) | -1 | test_efa_transport | efa_transport/peer_exited_unreaped_is_dead_shm
# -- a stalled peer: a timed-out slice is retried only when the daemon answers a probe
stall-no-probe | - | if \(\K(?=tern_segment_alive\(&e->segs, cs->seg, cs->failed_ns) | !0 ? 1 : | test_stall | stall/stopped_peer_fails_within_the_default_bound
# -- tern_engine_close wakes the threads blocked in the engine
close-no-wake | - | \Kpthread_cond_broadcast\(w->cond\);(?=\n        pthread_mutex_unlock\(w->lock\)) | (void)w; | test_stall | stall/close_wakes_notify_and_batch_waiters
# -- auth_secret_file: signed descriptors, name-bound proofs, no Mooncake wire
desc-mac-unchecked | - | if \(\K!tern_auth_equal\(want, got, sizeof want\)(?=\)) | 0 | test_auth_store | auth_store/store_descriptor_without_shm_refused
desc-fetch-unverified | - | if \(\Kmd->auth(?=\) \{\n        rc = tern_desc_verify) | 0 | test_auth_store | auth_store/store_other_engines_descriptor_refused_redis
desc-segment-unchecked | - | if \(\Kstrcmp\(seg, segment\) != 0(?=\)) | 0 | test_auth_store | auth_store/store_other_engines_descriptor_refused_redis
segment-desc-name-unchecked | - | if \(\Kstrcmp\(\(\*out\)->name, name\) != 0(?=\) \{) | 0 | test_auth_store | auth_store/shm_relayed_handshake_refused
tcp-target-name-unchecked | - | hello\[4\] != 2 \|\| \Kstrcmp\(asked, tcp_auth_self\(ctx\)\) != 0 | 0 | test_auth | auth_engine/data_port_without_proof_can_neither_read_nor_write
tcp-mooncake-wire-with-auth | - | strcmp\(wire, "mooncake"\) == 0 && \Kctx->auth(?=\)) | 0 | test_tcp_transport | tcp_auth_bind/mooncake_wire_refused_with_a_secret
shm-bind-names-ignored | - | \Kinitiator \? initiator : "", target \? target : ""(?=, msg) | "", "" | test_shm_transport | shm_transport/relayed_handshake_is_refused_by_the_initiator
desc-replay-accepted | - | t->cfg->auth_secret_file && \Kgen < s->desc_gen(?=\)) | 0 | test_auth_store | auth_store/store_older_signed_descriptor_refused
# -- budgets on every port: unproven handshake connections, listeners at the open-file limit, the HTTP store's limit
tcp-accept-spins-at-emfile | - | \Ktcp_io_mod\(io, 0\);(?= /\* the backlog) | ; | test_hostile | hostile/data_ports_at_the_open_file_limit_pause_and_recover
mooncake-accept-spins-at-emfile | - | paused = \Ksrv_accept_one\(s\) != 0(?=;) | (srv_accept_one(s), 0) | test_hostile | hostile/data_ports_at_the_open_file_limit_pause_and_recover
http-descriptor-64mib | - | #define HTTP_MAX_RESPONSE \KTERN_METASTORE_MAX_VALUE | (64u << 20) | test_metadata_http | http/descriptor_larger_than_the_handshake_limit_is_refused
hs-keeps-unproven-notify | - | if \(c->keep \K&& !keep_budget\(s, c\)(?=\)) | && 0 && !keep_budget(s, c) | test_hostile | hostile/kept_notify_connections_leave_room_for_metadata
memory-publish-waits-for-store | - | rc = later \? \Ktern_metadata_publish_async(?=\(e->md) | tern_metadata_publish | test_metadata_http | http/hanging_store_stalls_neither_register_nor_transfers
mooncake-no-progress-floor | - | if \(\Kbelow_floor\(g, t0, done\)(?=\)) | 0 && below_floor(g, t0, done) | test_hostile | hostile/mooncake_port_budgets_silent_and_trickled
mooncake-v1-read-unfenced | - | s->opcode == TERN_OP_READ && \Kep->wr_applied == ep->wr_sent(?=\)\)) | 1 | test_mooncake_tcp_v0.3.10 | -
efa-shm-one-rail | - | return c->shm_bounce_min \? \KEFA_SHM_RAILS(?= : EFA_SHM_ATTACH_RAILS;) | 1 | test_efa_transport | efa_transport/rails_default_per_provider
efa-rails-names-repeat | - | "%\.\*s\.r%u",\n\s+\(int\)sizeof d->dinfo\.name - 5, fi->domain_attr->name, \Krail(?=\);) | 1u | test_efa_integration | efa_integration/rails_spread_byte_exact_provider_shm
shm-unregister-no-drain | - | if \(\Krc == 0 && shm_drain_wait\(ctx, seq(?=,) | 0 && shm_drain_wait(ctx, seq | test_shm_integration | shm_integration/no_byte_lands_after_the_peer_unregistered
etcd-election-not-retried | - | if \(r\.status >= 500\)\n\s+\K\*retry = 2; | (void)0; | test_etcd_cluster | -
# (a race the test provokes for 10 s: caught in 9 of the 10 runs measured without ASan)
parked-verdict-across-transports | - | rc == TERN_ROUTE_SEG_CLOSED\K \|\| p->x != cs->x(?=\)) |  | test_datapath | datapath/slices_racing_a_fallback_all_complete
app-thread-moves-the-peer | - | if \(\Kwhere == TERN_HEAL_SEEN_WORKER(?=\) \{\n        if \(fall_back) | 1 | test_datapath | datapath/submit_does_not_wait_for_a_connect_in_flight
route-ignores-op-caps | - | if \(\Kx->ops->caps & TERN_CAP_OP\(op\)(?=\)) | 1 | test_datapath | datapath/transport_without_write_is_never_sent_a_write
caps-no-default-for-1.0 | - | t->caps \|= \KTERN_CAP_READ \| TERN_CAP_WRITE(?=;) | 0 | test_datapath | datapath/abi10_plugin_built_against_the_old_header_moves_data
multi-device-bit-ignored | - | if \(p->ndevices > 1 && \K!\(p->ops->caps & TERN_CAP_MULTI_DEVICE\)(?=\)) | 0 | test_loader | loader/several_devices_without_the_multi_device_bit_use_the_first
# payload_spin_us (transports/tcp/tcp_loop.c): a receiver with a large payload under way polls
tcp-receiver-sleeps-mid-payload | - | if \(\Katomic_load_explicit\(&w->expect_more, memory_order_relaxed\) &&\n\s+w->ctx->opt_spin_us > 0(?=\)) | 0 | test_tcp_transport | tcp_transport/a_receiver_of_a_large_payload_polls_instead_of_sleeping
# huge_pages (core/memory/pages.c): collapse must turn the pages already there into huge pages,
# and must leave the partial 2 MiB at the region's ends alone
collapse-not-called | - | if \(mode == TERN_HUGE_COLLAPSE && \Kmadvise\(p, n, MADV_COLLAPSE\) != 0(?=\)) | 0 | test_pages | pages/collapse_makes_registered_pages_huge_and_keeps_bytes
huge-advice-spills-past-the-region | - | uintptr_t hi = \(a \+ len\K\)(?= & ~\(HUGE_2M - 1\);) | + HUGE_2M - 1) | test_pages | pages/collapse_makes_registered_pages_huge_and_keeps_bytes
# -- the step after a call, the exact edge, the bounded recovery (tests/core/test_after.c)
# sync: a timed-out call returns only once its slice is back from the transport
sync-returns-before-its-slice | - | \n    \Kwait_slices\(b\);(?= /\* the memory) | (void)0; | test_after | sync/timed_out_returns_only_after_its_slice_came_back
# reset: not while a timed-out request's slice is held, nor a notification unsent
reset-ignores-held-slices | - | if \(busy \|\| \Kinflight > 0(?= \|\| notes\)) | 0 | test_after | reset/refused_while_a_timed_out_slice_is_held
reset-ignores-unsent-notification | - | inflight > 0 \|\| \Knotes(?=\) \{\n        pthread_mutex_unlock) | 0 | test_after | reset/refused_while_its_notification_waits_behind_another
# backoff: 20 ms doubling, capped at 500 ms, reset by a success (time bounds)
backoff-cap-is-a-floor | - | wait = wait \K>(?= TERN_BACKOFF_MAX_MS \?) | < | test_after | backoff/doubles_to_its_cap_and_a_success_resets_it
backoff-without-cap | - | wait = wait > TERN_BACKOFF_MAX_MS \? \KTERN_BACKOFF_MAX_MS(?= : wait;) | wait | test_after | backoff/doubles_to_its_cap_and_a_success_resets_it
backoff-kept-after-success | - | void tern_segment_ok\(tern_segment \*s\)\n\{\n    if \(\K(?=atomic_load_explicit\(&s->fails) | 0 && | test_after | backoff/doubles_to_its_cap_and_a_success_resets_it
# notifications: names of 255 bytes, messages of TERN_NOTIFY_MAX, a queue of TERN_NOTIFY_QUEUE
notify-name-256-sent | - | strlen\(msg\) > TERN_NOTIFY_MAX \|\| strlen\(name\) > \K255 | 256 | test_after | notify_edges/name_of_255_bytes_passes_256_is_refused
batch-notify-name-256-taken | - | strlen\(name\) > \K255(?= \|\| strlen\(msg\) > TERN_NOTIFY_MAX\)) | 256 | test_after | notify_edges/name_of_255_bytes_passes_256_is_refused
batch-notify-max-message-refused | - | \|\| strlen\(msg\) > \KTERN_NOTIFY_MAX(?=\)\n) | TERN_NOTIFY_MAX - 1 | test_after | notify_edges/message_of_exactly_the_limit_rides_on_a_batch
notify-queue-full-one-early | - | if \(q->count == \KTERN_NOTIFY_QUEUE(?=\) \{ /\* full) | TERN_NOTIFY_QUEUE - 1 | test_after | notify_edges/queue_takes_exactly_its_bound_then_refuses
# cut: a tail of exactly slice + 16 KiB stays one slice
tail-rule-edge-excluded | - | remaining \K<=(?= slice_size \+ TERN_TAIL_SLACK) | < | test_batch | batch/slicing_and_tail_rule
# GPU staging: a buffer holds a whole 64 KiB + 16 KiB slice
stage-buffer-without-tail | - | st->bufsize = \(size_t\)max \K\+ STAGE_TAIL | + 0 | test_gpu | gpu/gpu_to_host_byte_exact_through_staging
stage-full-buffer-refused | - | else if \(cs->s\.length \K>(?= st->bufsize\)) | >= | test_gpu | gpu/gpu_to_host_byte_exact_through_staging
# tcp data port: a connection whose proof was refused serves nothing after
tcp-refused-proof-still-served | - | c->state = S_CLOSING;\n        \Kreturn;(?=\n    \}\n    tcp_budget_prove) | (void)0; | test_auth | auth_engine/data_port_without_proof_can_neither_read_nor_write
# shm: the target's range check at its exact edges
shm-range-end-excluded | - | addr \+ len \K<=(?= e\[i\]\.addr \+ e\[i\]\.len\)) | < | test_shm_transport | shm_transport/range_edges_exact_in_one_byte_out
shm-range-one-past-end | - | addr \+ len <= e\[i\]\.addr \+ e\[i\]\.len\K(?=\)\n            return &e\[i\];) | + 1 | test_shm_transport | shm_transport/range_edges_exact_in_one_byte_out
shm-range-one-before-start | - | e\[i\]\.key == key && addr \K(?=>= e\[i\]\.addr) | + 1 | test_shm_transport | shm_transport/range_edges_exact_in_one_byte_out
# Python binding: every timeout class (python/tests/test_timeouts.py; "-": no Criterion filter)
py-none-means-no-wait | - | if \(!timeout \|\| timeout == Py_None\) \{\n        \*ms = \K-1(?=;) | 0 | python_timeouts | -
py-seconds-read-as-ms | - | \*ms = \(int\)\(s \* \K1000\.0(?= \+ 0\.5\);) | 1.0 | python_timeouts | -
py-notify-recv-none-no-wait | - | if \(ms \K== 0(?=\) \{\n        rc = tern_notify_recv\() | <= 0 | python_timeouts | -
py-sync-none-times-out | - | r->timeout_ms = ms < 0 \? \K0(?= : \(ms == 0) | 1 | python_timeouts | -
py-sync-zero-never-times-out | - | r->timeout_ms = ms < 0 \? 0 : \(ms == 0 \? \K1(?= : ) | 0 | python_timeouts | -
# NIC pairs (core/peer/spread.c): the pick weighs load and rate, a stall needs the others' progress, a paused pair sits out
spread-ignores-in-flight | quick | double t = \(double\)\(\Katomic_load\(&q->inflight\) \+ (?=len\) / rate;) | 0 + | test_spread | spread/equal_pairs_share_evenly
spread-ignores-rate | - | double rate = \(double\)\(r \? \Kr(?= : best_rate) | 1 | test_spread | spread/faster_pair_gets_more
stall-without-others-moving | - | if \(\K!others(?=\)\n            continue; /\* the whole peer is silent) | 0 | test_spread | spread/silent_peer_is_not_a_stalled_pair
paused-pair-still-picked | - | if \(strict && \(\Katomic_load\(&q->paused_until_ns\) > now(?= \|\|) | now == 0 | test_spread | spread/stall_pause_and_probation
probation-without-limit | - | \(atomic_load\(&q->probation\) && \Katomic_load\(&q->inflight\) > 0(?=\)\)\)) | 0 | test_spread | spread/stall_pause_and_probation
# What a transport publishes (core/desc/segment_desc.c): "publish.<key>" reaches the top level, not over the descriptor's own keys
publish-not-lifted | - | if \(\K!\*top \|\| (?=!publishable\(top, val\)) | 1 || | test_mooncake_compat | mooncake_desc/tern_publishes_what_mooncake_reads
publish-over-own-keys | - | if \(!\*top \|\| \K!publishable\(top, val\)(?= \|\|) | 0 | test_mooncake_compat | mooncake_desc/tern_publishes_what_mooncake_reads
publish-unreadable-lifted | - | if \(\Kcore_owned_key\(key\)(?=\)\n        return 0;\n    if \(strcmp) | 0 | test_mooncake_compat | mooncake_desc/unreadable_publish_is_left_out
received-publish-kept | - | \Kdrop_publish_keys\(copy\);(?=\n        t->addr) | (void)copy; | test_mooncake_compat | mooncake_desc/received_publish_keys_are_dropped
# a peer's shared file mapped (transports/shm/shm_map.c): the registration's file offset
shm-map-offset-lost | - | e->foff = b\.off \K\+ \(e->addr - b\.start\)(?=;) | + 0 | test_shm_integration | shm_integration/shared_file_memory_mapped_byte_exact
# efa devices (transports/efa/efa_fabric.c): the loopback domain stays out when there are others
efa-loopback-kept | - | if \(!c->iface\[0\] && \Kothers(?= && efa_is_loopback\(i\)\)) | 0 | test_lab_multinic | -
# the handshake daemon's other addresses (core/control/server.c, core/peer/addrbook.c)
hs-one-address-only | - | if \(\Ks->opt\.every_address(?=\)\n        listen_on_others) | 0 | test_lab_handshake_addrs | -
hs-book-forgets | - | if \(e && \Ke->n(?=\) \{\n        if \(e->best) | 0 | test_desc | segment/address_book_order
EOF

die() { echo "mutate: $*" >&2; exit 2; }

table() { printf '%s\n' "$TABLE" | grep -v '^[[:space:]]*\(#\|$\)'; }

# field N of a table line (fields are separated by " | ")
field() { printf '%s\n' "$1" | awk -F ' [|] ' -v n="$2" '{ gsub(/^[ \t]+|[ \t]+$/, "", $n); print $n }'; }

check_table() {
    local line n
    while IFS= read -r line; do
        n=$(printf '%s\n' "$line" | awk -F ' [|] ' '{ print NF }')
        [ "$n" -eq 6 ] || die "table line has $n fields, not 6: $line"
    done < <(table)
}

if [ "${MUTATE_LIST:-0}" = 1 ]; then
    table | awk -F ' [|] ' '{ printf "%-34s %-6s %s %s\n", $1, $2, $5, $6 }'
    exit 0
fi
check_table

# ---- the scratch copy -------------------------------------------------------------
# The working tree as git sees it (tracked and untracked, not ignored).  A
# file whose content is unchanged since the last run keeps its timestamp, so
# the scratch build only rebuilds what changed; a changed file (edited in the
# tree, or left mutated by an interrupted run) is copied with a fresh one, so
# it is always rebuilt whatever the timestamps of the tree say.
sync_tree() {
    local stage=$DIR/stage f
    rm -rf "$stage" && mkdir -p "$stage" "$SRC" "$BLD" || die "cannot create $DIR"
    (cd "$ROOT" && git ls-files -co --exclude-standard -z |
        tar --null -T - -cf - 2>/dev/null) | tar -C "$stage" -xf - || die "copying the tree failed"
    (cd "$SRC" && find . \( -type f -o -type l \) -print0) | while IFS= read -r -d '' f; do
        [ -e "$stage/$f" ] || [ -L "$stage/$f" ] || rm -f "$SRC/$f"
    done
    (cd "$stage" && find . \( -type f -o -type l \) -print0) | while IFS= read -r -d '' f; do
        if [ -L "$stage/$f" ] || ! cmp -s "$stage/$f" "$SRC/$f"; then
            mkdir -p "$(dirname "$SRC/$f")" && rm -f "$SRC/$f" && cp -P "$stage/$f" "$SRC/$f" &&
                { [ -L "$SRC/$f" ] || touch "$SRC/$f"; } || die "copying $f failed"
        fi
    done
    rm -rf "$stage"
}

# ---- --diff BASE: mutants of a change ---------------------------------------------
if [ "${1:-}" = --diff ]; then
    [ $# -eq 2 ] || die "usage: scripts/mutate.sh --diff BASE"
    git -C "$ROOT" rev-parse --verify -q "$2^{commit}" >/dev/null || die "--diff: $2 is no commit"
    PY=/usr/bin/python3
    [ -x "$PY" ] || PY=python3
    mkdir -p "$DIR" || die "cannot create $DIR"
    sync_tree
    DIR=$DIR SRC=$SRC BLD=$BLD JOBS=$JOBS "$PY" "$ROOT/scripts/mutate-diff.py" run "$ROOT" "$2"
    exit $?
fi

# What a run needs built: every target except the test programs, plus the
# test programs named (a core change then relinks those, not all of them;
# a CTest name that is no target, such as python_timeouts, adds nothing).
# The runtime pieces (transport and metadata plugins, peer programs) are
# targets of their own, so they are in.
targets() {
    local all t
    all=$(cmake --build "$BLD" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
    printf '%s\n' "$all" |
        grep -vE '^(all|clean|depend|edit_cache|install.*|list_install_components|rebuild_cache|test)$' |
        grep -vE '^test_|_vm_|\.(o|i|s)$'
    # a test that is not a program of its own (python_*) builds nothing more
    for t in "$@"; do
        printf '%s\n' "$all" | grep -qx -- "$t" && printf '%s\n' "$t"
    done
    return 0
}

# build [test program ...]: configure once per run (a scratch build kept
# from an older tree lists targets that may be gone), then build
# incrementally.
CONFIGURED=0
build() {
    if [ ! -f "$BLD/CMakeCache.txt" ] || [ "$CONFIGURED" = 0 ]; then
        cmake -S "$SRC" -B "$BLD" -DTERN_WERROR=OFF >"$DIR/cmake.log" 2>&1 || return 1
        CONFIGURED=1
    fi
    local t
    t=$(targets "$@" | sort -u | tr '\n' ' ')
    [ -n "$t" ] || return 1
    # shellcheck disable=SC2086 # one word per target
    cmake --build "$BLD" -j "$JOBS" --target $t >"$DIR/build.log" 2>&1
}

# Run the test that should catch a mutation; returns its exit status.
run_test() {
    local t=$1 filter=$2 log=$3
    if [ -n "$filter" ] && [ -x "$BLD/bin/$t" ]; then
        (cd "$BLD/tests" && timeout 600 "$BLD/bin/$t" --jobs 1 --filter "$filter") >"$log" 2>&1
    else
        (cd "$BLD" && timeout 900 ctest -R "^$t\$" --output-on-failure) >"$log" 2>&1
    fi
}

# The one C source the pattern matches in, and how often; prints "file count"
# for every file with a match.
locate() {
    (cd "$SRC" && find core transports include plugins tools python/src -name '*.[ch]' -print0 2>/dev/null |
        MP="$1" xargs -0 perl -0777 -ne '
            BEGIN { $p = $ENV{MP} }
            my $n = () = /$p/g;
            print "$ARGV $n\n" if $n;')
}

apply() {
    local file=$1 pat=$2 rep=$3
    MP="$pat" MR="$rep" perl -0777 -i -pe 'BEGIN { $p = $ENV{MP}; $r = $ENV{MR} } s/$p/$r/' \
        "$SRC/$file"
}

selected() {
    local name=$1 sets=$2
    if [ ${#WANT[@]} -gt 0 ]; then
        local w
        for w in "${WANT[@]}"; do [ "$w" = "$name" ] && return 0; done
        return 1
    fi
    [ "$SET" = all ] && return 0
    case ",$sets," in *",$SET,"*) return 0 ;; esac
    return 1
}

WANT=("$@")
if [ ${#WANT[@]} -gt 0 ]; then
    for w in "${WANT[@]}"; do
        table | awk -F ' [|] ' -v w="$w" '{ gsub(/[ \t]+$/, "", $1) } $1 == w { f = 1 } END { exit !f }' ||
            die "no mutation named $w (MUTATE_LIST=1 lists them)"
    done
fi

mkdir -p "$DIR" || die "cannot create $DIR"
sync_tree
echo "mutate: scratch tree $SRC, build $BLD (set: ${WANT[*]:-$SET})"
TESTS=()
while IFS= read -r line; do
    selected "$(field "$line" 1)" "$(field "$line" 2)" && TESTS+=("$(field "$line" 5)")
done < <(table)
build "${TESTS[@]}" || die "the unmutated tree does not build: see $DIR/build.log"

# Baseline: every test used must pass on the real code, or "caught" means nothing.
declare -A BASE=()
while IFS= read -r line; do
    name=$(field "$line" 1); sets=$(field "$line" 2)
    selected "$name" "$sets" || continue
    t=$(field "$line" 5); f=$(field "$line" 6); [ "$f" = - ] && f=
    [ -n "${BASE[$t/$f]:-}" ] && continue
    if run_test "$t" "$f" "$DIR/base.log"; then
        if [ -n "$f" ] && ! grep -q 'Tested: [1-9]' "$DIR/base.log"; then
            die "$t --filter '$f' runs no test (renamed?): re-point the table line"
        fi
        BASE[$t/$f]=ok
    else
        echo "mutate: $t ${f:+--filter $f} fails on the unmutated tree:" >&2
        tail -n 30 "$DIR/base.log" >&2
        exit 2
    fi
done < <(table)

caught=0; bad=0; total=0; started=$(date +%s)
while IFS= read -r line; do
    name=$(field "$line" 1); sets=$(field "$line" 2); pat=$(field "$line" 3)
    rep=$(field "$line" 4); t=$(field "$line" 5); f=$(field "$line" 6); [ "$f" = - ] && f=
    selected "$name" "$sets" || continue
    total=$((total + 1))
    where=$(locate "$pat")
    nfiles=$(printf '%s' "$where" | grep -c . || true)
    if [ "$nfiles" -ne 1 ] || [ "$(printf '%s' "$where" | awk '{ print $2 }')" != 1 ]; then
        printf '%-10s %-34s pattern matches %s\n' "NOT FOUND" "$name" \
            "$( [ -n "$where" ] && printf '%s' "$where" | tr '\n' ';' || echo nothing)"
        bad=$((bad + 1))
        continue
    fi
    file=$(printf '%s' "$where" | awk '{ print $1 }')
    cp -p "$SRC/$file" "$DIR/orig"
    apply "$file" "$pat" "$rep"
    t0=$(date +%s)
    if cmp -s "$DIR/orig" "$SRC/$file"; then
        printf '%-10s %-34s %s: the substitution changed nothing\n' "NOT FOUND" "$name" "$file"
        bad=$((bad + 1))
    elif ! build "$t"; then
        printf '%-10s %-34s %s (see %s)\n' "BUILD FAIL" "$name" "$file" "$DIR/build-$name.log"
        cp "$DIR/build.log" "$DIR/build-$name.log"
        bad=$((bad + 1))
    elif run_test "$t" "$f" "$DIR/run-$name.log"; then
        printf '%-10s %-34s %s: %s %s passed (%ss)\n' "SURVIVED" "$name" "$file" "$t" "$f" \
            $(( $(date +%s) - t0 ))
        bad=$((bad + 1))
    else
        printf '%-10s %-34s %s: %s %s failed (%ss)\n' "caught" "$name" "$file" "$t" "$f" \
            $(( $(date +%s) - t0 ))
        caught=$((caught + 1))
    fi
    cp "$DIR/orig" "$SRC/$file" && touch "$SRC/$file"
done < <(table)

build "${TESTS[@]}" || echo "mutate: rebuilding the restored tree failed (see $DIR/build.log)" >&2
echo "mutate: $caught of $total caught in $(( $(date +%s) - started ))s"
[ "$bad" -eq 0 ] && [ "$total" -gt 0 ]
exit $?
}
