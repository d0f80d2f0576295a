#!/bin/sh
# The reference table of configuration keys in docs/configuration.md is the
# output of `tern-info --schema-markdown` (generated from the key table in
# core/config/schema.c).  Fails, with the difference, when they disagree:
# regenerate the block between the BEGIN/END markers with that command.
#   usage: test_config_doc.sh <source dir> <build dir>
set -eu
doc=$1/docs/configuration.md
info=$2/bin/tern-info
tmp=$(mktemp -d /tmp/tern-cfgdoc-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
grep -q '^<!-- BEGIN tern-info --schema-markdown -->$' "$doc" ||
    { echo "test_config_doc: FAIL: no BEGIN marker in $doc" >&2; exit 1; }
sed -n '/^<!-- BEGIN tern-info --schema-markdown -->$/,/^<!-- END tern-info --schema-markdown -->$/p' \
    "$doc" | sed '1d;$d' >"$tmp/committed.md"
"$info" --schema-markdown >"$tmp/generated.md"
[ -s "$tmp/generated.md" ] || { echo "test_config_doc: FAIL: no output" >&2; exit 1; }
if ! diff -u "$tmp/committed.md" "$tmp/generated.md"; then
    echo "test_config_doc: FAIL: $doc differs from tern-info --schema-markdown" >&2
    exit 1
fi
echo "test_config_doc: ok: $(grep -c '^| `' "$tmp/generated.md") keys match"
