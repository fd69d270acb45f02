#!/usr/bin/env bash
# The whole test suite on real servers: formatting, vet, tidy modules, and every test with the race
# detector, against the throwaway MariaDB pair and Redis that scripts/with-servers.sh starts and stops;
# then the simulation's fixed budget, every fuzz target briefly and a 60 s chaos run. It takes 12 to 20
# minutes on 2 cores.
# Extra arguments go to `go test` (e.g. scripts/test.sh -run TestParity).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TICKETD_TEST_PIDS:-}" ]; then
  # What the go test stage needs beyond the servers (with-servers.sh installs those): the status page's
  # test loads it in headless Chromium, and the alert rules are checked with promtool (Debian's
  # prometheus package).
  need_pkg=()
  command -v chromium >/dev/null 2>&1 || need_pkg+=(chromium)
  command -v promtool >/dev/null 2>&1 || need_pkg+=(prometheus)
  if ((${#need_pkg[@]})); then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "test.sh: installing ${need_pkg[*]}" >&2
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkg[@]}" >/dev/null
    else
      echo "test.sh: missing ${need_pkg[*]}; install them (apt-get install ${need_pkg[*]})" >&2
      exit 1
    fi
  fi
  exec scripts/with-servers.sh "$0" "$@"
fi

# The modules: the server at the root, the SDK, the policies they share, and the laboratory.
modules=(. client internal/backoff internal/hedge bench chaos cmd/ticketd-bench)
# each runs "$@" in every module, and fails if it fails in any.
each() {
  local rc=0 m
  for m in "${modules[@]}"; do
    (cd "$m" && "$@") || { echo "test.sh: in $m: $*" >&2; rc=1; }
  done
  return $rc
}

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
stage vet each go vet ./...
stage "go mod tidy" each go mod tidy -diff
# go.work builds every module with the versions all of them select together: a laboratory module that
# requires a newer version of a dependency the server's packages use would change what the server's
# tests run against (and what it is built with outside the workspace would go untested).
same_versions() {
  local f='{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}' alone together
  alone=$(GOWORK=off go list -deps -test -f "$f" ./... | grep -v '^github.com/ticketd/ticketd' | sort -u)
  together=$(go list -deps -test -f "$f" ./... | grep -v '^github.com/ticketd/ticketd' | sort -u)
  if [ "$alone" != "$together" ]; then
    echo "test.sh: in the workspace, the server's packages build with other versions than its go.mod selects:" >&2
    diff <(echo "$alone") <(echo "$together") >&2
    return 1
  fi
}
stage "same versions in the workspace" same_versions
# Files for people to look at (such as the status page's screenshot) land here, not in a temp dir.
export TICKETD_ARTIFACTS="${TICKETD_ARTIFACTS:-$PWD/test-artifacts}"
mkdir -p "$TICKETD_ARTIFACTS"
stage "go test" each go test -race -count=1 -timeout 45m "$@" ./...
if (($# == 0)); then
  # The deterministic simulation's fixed budget of schedules, and each guard switched off in turn, without
  # the race detector (it slows the simulated servers forty times; under it the package checks only its
  # parallel exploration). It prints the schedules explored.
  stage simulation go test -count=1 -v -run '^TestSimulation' ./allocator/sim/
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
