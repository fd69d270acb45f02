#!/usr/bin/env bash
# The whole test suite on real servers: formatting, vet, and every test with the race detector, against
# the throwaway MariaDB pair and Redis that scripts/with-servers.sh starts and stops.
# Extra arguments go to `go test` (e.g. scripts/test.sh -run TestParity).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TICKETD_TEST_PIDS:-}" ]; then
  exec scripts/with-servers.sh "$0" "$@"
fi

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed on: $unformatted" >&2
  exit 1
fi
go vet ./...
# Files for people to look at (such as the status page's screenshot) land here, not in a temp dir.
export TICKETD_ARTIFACTS="${TICKETD_ARTIFACTS:-$PWD/test-artifacts}"
mkdir -p "$TICKETD_ARTIFACTS"
go test -race -count=1 -timeout 45m "$@" ./...
# Every fuzz target, briefly, on top of its kept corpus (testdata/fuzz).
if (($# == 0)); then
  scripts/fuzz.sh "${TICKETD_FUZZTIME:-10s}"
fi
# The chaos run, short form: ≥1M IDs through two replicas while servers are killed and the network
# misbehaves; it exits non-zero on any duplicate or parity violation.
if (($# == 0)); then
  go run ./cmd/ticketd chaos --duration "${TICKETD_CHAOS_DURATION:-60s}" --min-ids 1000000
fi
