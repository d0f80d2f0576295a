#!/bin/sh
# The README's C example is examples/kv_prefill.c verbatim, and it
# compiles as written against the headers and the built library.
#   usage: test_readme_example.sh <source dir> <build dir>
set -eu
src=$1
build=$2
tmp=$(mktemp -d /tmp/tern-readme-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_readme_example: FAIL: $*" >&2; exit 1; }
awk '/^```c$/ {inside=1; next} /^```$/ && inside {exit} inside {print}' "$src/README.md" \
    >"$tmp/readme.c"
[ -s "$tmp/readme.c" ] || fail "no \`\`\`c block in README.md"
diff -u "$src/examples/kv_prefill.c" "$tmp/readme.c" >&2 ||
    fail "README.md's C block differs from examples/kv_prefill.c"
lib=$(dirname "$(find "$build" -name 'libtern.so' | head -n 1)")
cc -std=c11 -Wall -Wextra -Werror -I"$src/include" "$tmp/readme.c" -L"$lib" -ltern \
    -o "$tmp/readme" || fail "README.md's C block does not compile"
echo "test_readme_example: ok: README.md's example is examples/kv_prefill.c and compiles"
