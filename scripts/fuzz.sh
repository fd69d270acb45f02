#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx in a _test.go file) briefly, on top of its seed corpus (f.Add
# and testdata/fuzz/FuzzXxx). Usage: scripts/fuzz.sh [BUDGET] (default 20000x: executions per target).
# The budget is a count, not a duration: when a duration ends, Go 1.26's fuzz coordinator can report a
# bare "context deadline exceeded" failure with nothing found (golang/go#75804, fixed in Go 1.27); a
# count has no deadline to race. A duration (e.g. 10m) still works for a long run by hand.
# A failure leaves the crashing input in the package's testdata/fuzz directory, ready to commit.
# With KEEP=1, up to 20 of the inputs the fuzzer found interesting are copied into testdata/fuzz too, so
# the corpus grows in the repository rather than only in the local cache.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-20000x}"

targets=$(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sed -E 's#^\./##; s#/[^/]+_test\.go:func # #' | sort -u)
if [ -z "$targets" ]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi
while read -r dir name; do
  echo "fuzz.sh: $name in ./$dir for $fuzztime"
  if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir" 2>&1); then
    echo "$out" >&2
    echo "fuzz.sh: $name failed; the input is in ./$dir/testdata/fuzz/$name" >&2
    exit 1
  fi
  if [ "${KEEP:-}" = 1 ]; then
    cache="$(go env GOCACHE)/fuzz/$(go list "./$dir")/$name"
    if [ -d "$cache" ]; then
      mkdir -p "$dir/testdata/fuzz/$name"
      # shellcheck disable=SC2012
      ls -t "$cache" | head -20 | while read -r f; do cp "$cache/$f" "$dir/testdata/fuzz/$name/"; done
    fi
  fi
done <<<"$targets"
echo "fuzz.sh: $(wc -l <<<"$targets") targets passed"
