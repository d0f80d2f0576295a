#!/usr/bin/env bash
# scripts/memcheck.sh [BUILD_DIR]: the integration tests under valgrind
# memcheck.  Builds BUILD_DIR (default build-memcheck) without sanitizers
# and without -march=native (valgrind does not know every new instruction),
# then runs each test binary with
#   --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99
# and --trace-children=yes (Criterion runs every test in a child process,
# whose exit code it ignores: the per-process logs are what counts).  Helper
# peers and servers the tests start (tern-test-*, redis-server, etcd) are not
# traced; --max-threads=4096 (the tcp data port runs a thread per
# connection: test_hostile opens 1,000).  Prints errors and definitely-lost bytes per test; exits non-zero
# on any error, any definite leak or any failing test.
#   MEMCHECK_TESTS="test_handshake test_batch"  TERN_FAULT_ROUNDS=20 (faults)
#   TERN_HOSTILE_IDLE=200 (idle connections per port in test_hostile)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-memcheck}
TESTS=${MEMCHECK_TESTS:-"test_handshake test_desc test_config test_engine test_endpoint test_batch test_tcp_transport test_tcp_integration test_hostile test_auth test_faults"}
command -v valgrind >/dev/null || { echo "memcheck: valgrind is not installed" >&2; exit 2; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTERN_SANITIZE=OFF \
      -DCMAKE_C_FLAGS="-O1 -g -fno-omit-frame-pointer" >/dev/null || exit 2
cmake --build "$BUILD" -j "$(nproc)" >/dev/null || { echo "memcheck: build failed" >&2; exit 2; }
logs=$BUILD/memcheck-logs
rm -rf "$logs"
mkdir -p "$logs"
export TERN_FAULT_ROUNDS=${TERN_FAULT_ROUNDS:-20}
# 1,000 server threads run too slowly under valgrind for the peers' io timeout.
export TERN_HOSTILE_IDLE=${TERN_HOSTILE_IDLE:-200}
# VmRSS bounds are not meaningful under valgrind (shadow memory): tests skip them visibly.
export TERN_MEMCHECK=1
total_err=0 total_fail=0
printf '%-22s %6s %8s %8s %12s %8s\n' test result procs errors "def.lost B" seconds
for t in $TESTS; do
    bin=$BUILD/bin/$t
    if [ ! -x "$bin" ]; then
        printf '%-22s %6s (not built here: skipped)\n' "$t" skip
        continue
    fi
    start=$(date +%s)
    valgrind -q --trace-children=yes \
        --trace-children-skip='*/tern-test-*,*redis-server*,*etcd*,/bin/*,/usr/bin/*' \
        --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
        --error-exitcode=99 --child-silent-after-fork=no --num-callers=30 --max-threads=4096 \
        --log-file="$logs/$t.%p.log" "$bin" --jobs 1 >"$logs/$t.out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    procs=$(ls "$logs/$t".*.log 2>/dev/null | wc -l)
    errs=$(cat "$logs/$t".*.log 2>/dev/null | sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' |
           awk '{s+=$1} END{print s+0}')
    lost=$(cat "$logs/$t".*.log 2>/dev/null | sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' |
           tr -d , | awk '{s+=$1} END{print s+0}')
    failed=$(grep -c '^\[FAIL\]\|Crashing: [1-9]' "$logs/$t.out")
    res=ok
    if [ "$rc" -ne 0 ] || [ "$errs" -ne 0 ] || [ "$lost" -ne 0 ] || [ "$failed" -ne 0 ]; then
        res=FAIL
        total_fail=$((total_fail + 1))
    fi
    total_err=$((total_err + errs))
    printf '%-22s %6s %8s %8s %12s %8s\n' "$t" "$res" "$procs" "$errs" "$lost" "$secs"
done
echo "memcheck: $total_err error(s) in total; $total_fail test binar(y/ies) failed; logs in $logs"
[ "$total_fail" -eq 0 ]
