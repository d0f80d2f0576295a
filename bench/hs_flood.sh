#!/usr/bin/env bash
# bench/hs_flood.sh [BUILD_DIR]: a legitimate peer's Metadata fetch rate and
# 1 MiB WRITE+READ rate beside a handshake daemon flooded with 400 KB
# Connection frames (200 in flight at once, from one attacking thread), as
# ratios to the unattacked rates measured in the same run (windows that
# alternate between no attack and the attack), plus the process's RSS
# before, during and after.  Two attacks: bursts of 200 parallel frames
# every 100 ms (the test asserts >= 50% for both operations), and 200
# connections reopened back to back (reported only).  Runs
# test_hostile_control's flood cases REPEAT times (default 3); all on
# loopback.  Ratios are what count: on a shared 2-core machine the attacker
# and the daemon compete for the same CPUs.
set -euo pipefail

BUILD=${1:-build}
BIN="$BUILD/bin/test_hostile_control"
REPEAT=${REPEAT:-3}
[ -x "$BIN" ] || { echo "hs_flood: $BIN not found (build first)" >&2; exit 1; }

for i in $(seq "$REPEAT"); do
  "$BIN" --jobs 1 --verbose --filter 'hostile_control/connection_flood*' 2>&1 |
    grep -E 'flood \(|FAIL' | sed -e 's/^\[----\] //' -e "s/^/run $i: /"
done
