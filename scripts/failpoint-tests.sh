#!/usr/bin/env bash
# Lists the tests that need kord's failure points: those in _test.go files
# built only with the kordfailpoints tag. One line per package:
#   ./dir Test1|Test2|...
# scripts/test.sh runs them on tagged binaries, and every other test on
# plain ones, so that each test runs once.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*_test.go' | while read -r f; do
	if head -1 "$f" | grep -qx '//go:build kordfailpoints'; then
		echo "$f"
	fi
done | sort | awk -F/ '{ d=$0; sub("/[^/]*$", "", d); print d, $0 }' |
	while read -r dir file; do
		# Package-level test functions: func TestX(t *testing.T).
		sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$file" | sed "s|^|./$dir |"
	done | awk '{ if ($1 != d) { if (d != "") print d, t; d = $1; t = $2 } else t = t "|" $2 } END { if (d != "") print d, t }'
