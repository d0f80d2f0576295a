#!/usr/bin/env bash
# scripts/fuzz.sh [BUILD_DIR]: build the libFuzzer targets (fuzz/, clang,
# ASan + UBSan) and run each one for FUZZ_SECONDS (default 60) on a copy of
# its seed corpus (fuzz/corpus/<target>/).  Every file under
# fuzz/regressions/<target>/ is replayed first (a past crash must stay
# fixed).  Prints executions and seconds per target; exits non-zero when a
# target crashed, leaked or timed out (the reproducer is kept in
# BUILD_DIR/fuzz-artifacts/<target>/).
#   FUZZ_SECONDS=60  FUZZ_TARGETS="hs_frame segment_desc"  FUZZ_JOBS=1
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${1:-${BUILD_FUZZ:-build-fuzz}}
SECS=${FUZZ_SECONDS:-60}
ALL="hs_frame hs_daemon handshake_desc segment_desc topology_json config_yaml tcp_request tcp_header auth_step signed_desc"
TARGETS=${FUZZ_TARGETS:-$ALL}

if ! command -v clang >/dev/null; then
    echo "fuzz: clang is not installed (apt-get install clang); cannot build the fuzz targets" >&2
    exit 2
fi
cmake -S "$SRC" -B "$BUILD" -DCMAKE_C_COMPILER=clang -DTERN_FUZZ=ON \
      -DTERN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target $(for t in $TARGETS; do echo "fuzz_$t"; done) \
      >/dev/null

# A leak found at exit is a failure; a handler that is slow is not a crash.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fail=0
summary=()
for t in $TARGETS; do
    bin=$BUILD/bin/fuzz_$t
    work=$BUILD/fuzz-corpus/$t
    art=$BUILD/fuzz-artifacts/$t
    mkdir -p "$work" "$art"
    seeds=$SRC/fuzz/corpus/$t
    if [ -d "$SRC/fuzz/regressions/$t" ] && ls "$SRC/fuzz/regressions/$t"/* >/dev/null 2>&1; then
        if ! "$bin" "$SRC/fuzz/regressions/$t"/* >"$art/regressions.log" 2>&1; then
            echo "fuzz: $t: a regression input fails again (see $art/regressions.log)" >&2
            fail=1
        fi
    fi
    log=$art/run.log
    start=$(date +%s.%N)
    set +e
    "$bin" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 -max_len=65536 \
           -print_final_stats=1 -artifact_prefix="$art/" "$work" "$seeds" >"$log" 2>&1
    rc=$?
    set -e
    end=$(date +%s.%N)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.0f", b-a}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    line=$(printf '%-15s %10s execs %5s s  %8s exec/s  cov %s  %s' "$t" "${execs:-?}" "$secs" \
           "$(awk -v e="${execs:-0}" -v s="$secs" 'BEGIN{if(s>0)printf "%.0f", e/s; else print "?"}')" \
           "${cov:-?}" "$([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc, see $log")")
    echo "$line"
    if [ $rc -ne 0 ]; then # what a CI log must show: the report and the reproducer
        grep -m1 -A12 -E '^==[0-9]+==ERROR|runtime error|^SUMMARY' "$log" | sed 's/^/    /' || true
        ls "$art" | grep -E '^(crash|leak|timeout|oom)-' | sed "s|^|    reproducer: $art/|" || true
        for r in "$art"/crash-* "$art"/leak-*; do
            [ -f "$r" ] && { printf '    input (base64): '; head -c 2048 "$r" | base64 -w0; echo; }
        done
    fi
    summary+=("$line")
    [ $rc -eq 0 ] || fail=1
done
echo "fuzz summary (${SECS}s per target, build $BUILD):"
printf '  %s\n' "${summary[@]}"
exit $fail
