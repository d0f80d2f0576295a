#!/usr/bin/env bash
# scripts/test-summary.sh BUILD_DIR: after ctest, one line per test with its
# Criterion synthesis (or, for script tests, its last line) and, under it,
# every case that skipped with its reason, then the Criterion totals.  CTest
# shows a test's output only when it fails; this makes the per-test counts
# and the skips visible on success too, and test_object_deps's line for each
# group it checked (core, each plugin, python, each tool: objects, circles)
# and test_core_deps's floors of core/ (files per floor).
set -eu
log="${1:-build}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || { echo "test-summary: no $log (run ctest first)" >&2; exit 1; }
awk '
  /^[0-9]+\/[0-9]+ Testing: / { name = $3; last = ""; syn = ""; skips = ""; groups = ""; next }
  /^object-deps: [^ ]+: /      { groups = groups sprintf("      %s\n", substr($0, 14)) }
  /^  floor [a-z]+ +[0-9]+ files/ { groups = groups sprintf("    %s\n", $0) }
  /^\[SKIP\] /                 { line = $0; sub(/^\[SKIP\] /, "", line); sk++
                                 skips = skips sprintf("      skipped: %s\n", line); next }
  /Synthesis: Tested:/        { syn = $0; sub(/^.*Synthesis: /, "", syn)
                                 split(syn, f, /[:|] */); t += f[2]; p += f[4]; fl += f[6]; c += f[8] }
  /^Test (Passed|Failed)/      { printf "  %-24s %-8s %s\n%s%s", name, ($2 == "Passed." ? "passed" : "FAILED"),
                                        syn != "" ? syn : last, skips, groups; next }
  /^(Output:|<end of output>|-+$|Test time|Test command|Directory|")/ { next }
  NF                           { last = $0 }
  END { printf "criterion: %d passed, %d failed, %d skipped\n", p, fl + c, sk }
' "$log"
