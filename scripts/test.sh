#!/usr/bin/env bash
# The whole test suite on real servers: formatting, vet, and every test with the race detector, against
# the throwaway MariaDB pair and Redis that scripts/with-servers.sh starts and stops.
# Extra arguments go to `go test` (e.g. scripts/test.sh -run TestParity).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TICKETD_TEST_PIDS:-}" ]; then
  exec scripts/with-servers.sh "$0" "$@"
fi

# Every stage runs, also after one fails: a failing test must not hide a failing fuzz target or a
# duplicate in the chaos run. The script fails at the end, naming the stages that failed.
failed=()
stage() {
  local name=$1
  shift
  echo "test.sh: $name" >&2
  if ! "$@"; then
    failed+=("$name")
  fi
}

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed on: $unformatted" >&2
  failed+=(gofmt)
fi
stage vet go vet ./...
# Files for people to look at (such as the status page's screenshot) land here, not in a temp dir.
export TICKETD_ARTIFACTS="${TICKETD_ARTIFACTS:-$PWD/test-artifacts}"
mkdir -p "$TICKETD_ARTIFACTS"
stage "go test" go test -race -count=1 -timeout 45m "$@" ./...
if (($# == 0)); then
  # Every fuzz target, briefly, on top of its kept corpus (testdata/fuzz).
  stage fuzz scripts/fuzz.sh "${TICKETD_FUZZTIME:-20000x}"
  # The chaos run, short form: ≥1M IDs through two replicas while servers are killed, restored and
  # reconfigured and the network misbehaves; it exits non-zero on any duplicate or parity violation,
  # and when a restored server is not fenced.
  stage chaos go run ./cmd/ticketd-bench chaos --duration "${TICKETD_CHAOS_DURATION:-60s}" --min-ids 1000000
fi
if ((${#failed[@]})); then
  echo "test.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: every stage passed" >&2
