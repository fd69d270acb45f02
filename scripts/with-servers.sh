#!/usr/bin/env bash
# Runs a command with a throwaway MariaDB ticket pair (auto_increment_increment=2, offsets 1 and 2,
# innodb_flush_log_at_trx_commit=1) and a throwaway Redis (AOF, appendfsync always) on free loopback
# ports, their addresses exported as TICKETD_TEST_MYSQL_A, TICKETD_TEST_MYSQL_B and TICKETD_TEST_REDIS.
# With TICKETD_TEST_WITH_GALERA=1 it also starts a 3-node MariaDB Galera cluster (TICKETD_TEST_GALERA,
# the nodes' DSNs). The servers are stopped by pid when the command ends, also when it fails.
#
#   scripts/with-servers.sh go test -run '^$' -bench . ./allocator/mysql/
set -euo pipefail
cd "$(dirname "$0")/.."

if (($# == 0)); then
  echo "usage: scripts/with-servers.sh COMMAND [ARGS...]" >&2
  exit 2
fi

need_pkg=()
command -v mariadbd >/dev/null 2>&1 || need_pkg+=(mariadb-server)
command -v mariadb-install-db >/dev/null 2>&1 || need_pkg+=(mariadb-server)
command -v redis-server >/dev/null 2>&1 || need_pkg+=(redis-server)
# Galera clusters (the tests start their own): the replication library, and rsync for state transfers.
[ -e /usr/lib/galera/libgalera_smm.so ] || need_pkg+=(galera-4)
command -v rsync >/dev/null 2>&1 || need_pkg+=(rsync)
if ((${#need_pkg[@]})); then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "with-servers: installing ${need_pkg[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkg[@]}" >/dev/null
  else
    echo "with-servers: missing ${need_pkg[*]}; install them (apt-get install ${need_pkg[*]})" >&2
    exit 1
  fi
fi

tmp=$(mktemp -d /tmp/tkd.XXXXXX) # short: MariaDB sockets live here
cleanup() {
  status=$?
  if [ -s "$tmp/env" ]; then
    # shellcheck disable=SC1091
    . "$tmp/env"
    # shellcheck disable=SC2086
    "$tmp/testservers" down $TICKETD_TEST_PIDS || kill -9 $TICKETD_TEST_PIDS 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$tmp/testservers" ./internal/cmd/testservers
galera=()
[ "${TICKETD_TEST_WITH_GALERA:-}" = 1 ] && galera=(--galera)
"$tmp/testservers" up --dir "$tmp" "${galera[@]}" >"$tmp/env"
# shellcheck disable=SC1091
. "$tmp/env"
export TICKETD_TEST_REQUIRE=1 # the servers are up: a test that cannot reach them fails, never skips

"$@"
