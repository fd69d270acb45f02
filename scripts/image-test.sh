#!/usr/bin/env bash
# Builds both container images from the Dockerfile with podman (or docker) and runs them: the ticketd
# image's version, a lease on the embedded store, then `ticketd serve` with its healthcheck and a lease
# over HTTP, as uid 65532; then the shortener beside it, on a Redis of this machine, with its
# healthcheck and a link. It also checks that neither image holds a shell. Not part of scripts/test.sh:
# it needs a container engine and redis-server, and takes a few minutes.
#
# The images are FROM scratch: only the build stage's image (GO_IMAGE) is pulled, where it can be. Where
# it cannot (no registry in reach), it makes a local stand-in and builds on it: a Debian root made with
# mmdebstrap plus the Go toolchain of this machine.
#
#   scripts/image-test.sh              # podman when installed, else docker
#   ENGINE=docker scripts/image-test.sh
#   STANDINS=1 scripts/image-test.sh   # use the stand-in without trying to pull (kept for the next run;
#                                      # REMAKE_STANDINS=1 makes it again)
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${ENGINE:-}
if [ -z "$engine" ]; then
  if command -v podman >/dev/null 2>&1; then engine=podman; elif command -v docker >/dev/null 2>&1; then engine=docker; fi
fi
if [ -z "$engine" ]; then
  echo "image-test: no podman or docker; install one (apt-get install podman)" >&2
  exit 1
fi
tag=ticketd-image-test
go_image=$(sed -n 's/^ARG GO_IMAGE=//p' Dockerfile)
tmp=$(mktemp -d)
container=""
shortener=""
redis_pid=""
eng=("$engine")
cleanup() {
  [ -n "$shortener" ] && "${eng[@]}" rm -f "$shortener" >/dev/null 2>&1 || true
  [ -n "$container" ] && "${eng[@]}" rm -f "$container" >/dev/null 2>&1 || true
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# standin_go makes a Go build image from Debian's packages and this machine's Go toolchain, trusting the
# certificate authorities this machine trusts (a proxy in between may sign with its own).
standin_go() {
  local goroot
  goroot=$(go env GOROOT)
  if [ -n "${REMAKE_STANDINS:-}" ] || ! "$engine" image exists localhost/ticketd-go-standin-base 2>/dev/null; then
    command -v mmdebstrap >/dev/null 2>&1 || { echo "image-test: the stand-in needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
    echo "image-test: making localhost/ticketd-go-standin from Debian bookworm and $goroot" >&2
    mmdebstrap --quiet --variant=minbase --include=ca-certificates,git \
      --customize-hook="mkdir -p \"\$1/usr/local\" && cp -a $goroot \"\$1/usr/local/go\"" \
      bookworm "$tmp/go-root.tar"
    "$engine" import --change 'ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV GOTOOLCHAIN=local' "$tmp/go-root.tar" localhost/ticketd-go-standin-base >/dev/null
  fi
  mkdir -p "$tmp/go"
  cp /etc/ssl/certs/ca-certificates.crt "$tmp/go/"
  printf 'FROM localhost/ticketd-go-standin-base\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n' >"$tmp/go/Containerfile"
  "$engine" build -q -f "$tmp/go/Containerfile" -t localhost/ticketd-go-standin "$tmp/go" >/dev/null
  go_image=localhost/ticketd-go-standin
}

if [ "${STANDINS:-}" = 1 ] || ! "$engine" pull -q "$go_image" >/dev/null 2>&1; then
  standin_go
fi
command -v redis-server >/dev/null 2>&1 || { echo "image-test: the shortener needs redis-server (apt-get install redis-server)" >&2; exit 1; }

# Containers here run with lower rlimits than the host's (an engine in a container may not raise them),
# and with runc where crun refuses the host's cgroups (v1 with a v2 hierarchy beside it).
run_opts=()
if [ "$engine" = podman ]; then
  run_opts=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
  if ! podman run --rm "${run_opts[@]}" "$go_image" go version >/dev/null 2>"$tmp/probe.err"; then
    if command -v runc >/dev/null 2>&1 && podman --runtime runc run --rm "${run_opts[@]}" "$go_image" go version >/dev/null 2>&1; then
      echo "image-test: crun cannot run containers here ($(tail -1 "$tmp/probe.err")); using runc" >&2
      eng=(podman --runtime runc)
    else
      echo "image-test: podman cannot run a container here: $(tail -1 "$tmp/probe.err") (apt-get install runc may help)" >&2
      exit 1
    fi
  fi
fi

version=$(git describe --tags 2>/dev/null || echo "(devel)")
commit=$(git rev-parse HEAD 2>/dev/null || echo "")
dirty=false
[ -n "$(git status --porcelain 2>/dev/null)" ] && dirty=true
format=()
[ "$engine" = podman ] && format=(--format docker) # OCI images drop HEALTHCHECK
build=("${eng[@]}" build "${format[@]}" "${run_opts[@]}" --network host --build-arg GO_IMAGE="$go_image"
  --build-arg VERSION="$version" --build-arg COMMIT="$commit" --build-arg DIRTY="$dirty")
start=$(date +%s)
"${build[@]}" -t "$tag" .
"${build[@]}" --target shortener -t "$tag-shortener" . # the build stage comes from the cache
echo "image-test: built $tag and $tag-shortener in $(($(date +%s) - start))s on $go_image" >&2

# Each image: the user 65532:65532, the files the Dockerfile puts in and nothing else (no shell).
for image in "$tag" "$tag-shortener"; do
  user=$("$engine" image inspect --format '{{.Config.User}}' "$image")
  [ "$user" = 65532:65532 ] || { echo "image-test: $image runs as '$user', want 65532:65532" >&2; exit 1; }
  ctr=$("${eng[@]}" create "$image")
  "${eng[@]}" export "$ctr" >"$tmp/fs.tar"
  "${eng[@]}" rm "$ctr" >/dev/null
  files=$(tar -tf "$tmp/fs.tar" | sed 's|^\./||; s|/$||' | grep -v '^$' | sort)
  case "$image" in *-shortener) want='shortener ticketd' ;; *) want='data ticketd' ;; esac
  want=$(printf '%s\n' etc etc/group etc/passwd etc/ssl etc/ssl/certs etc/ssl/certs/ca-certificates.crt $want | sort)
  # The engine adds the mount points of a container (/dev, /proc, /sys, /etc/hosts, ...), empty.
  extra=$(comm -23 <(printf '%s\n' "$files") <(printf '%s\n' "$want") | grep -Ev '^(dev|proc|sys|run)(/|$)|^etc/(hosts|hostname|resolv\.conf|mtab)$' || true)
  missing=$(comm -13 <(printf '%s\n' "$files") <(printf '%s\n' "$want"))
  if [ -n "$extra" ] || [ -n "$missing" ]; then
    echo "image-test: $image holds more or less than it should; more: ${extra:-none}; missing: ${missing:-none}" >&2
    exit 1
  fi
  passwd=$(tar -xOf "$tmp/fs.tar" --wildcards '*etc/passwd')
  grep -qx 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' <<<"$passwd" ||
    { echo "image-test: $image's /etc/passwd has no user nonroot of uid 65532: $passwd" >&2; exit 1; }
  if "${eng[@]}" run --rm --no-healthcheck --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1; then
    echo "image-test: $image runs /bin/sh" >&2
    exit 1
  fi
  echo "image-test: $image runs as 65532:65532 and holds $(printf '%s' "$files" | grep -cv '^$') entries, no shell" >&2
done

echo "image-test: ticketd version in the image" >&2
got=$("${eng[@]}" run --rm --no-healthcheck "${run_opts[@]}" "$tag" version)
echo "$got"
case "$got" in *"commit $commit"*) ;; *) echo "image-test: the image does not report commit $commit" >&2; exit 1 ;; esac

echo "image-test: a lease on the embedded store" >&2
out=$("${eng[@]}" run --rm --no-healthcheck "${run_opts[@]}" "$tag" lease demo -n 3)
echo "$out"
[ "$out" = '{"namespace":"demo","start":"1","step":1,"size":3,"last":"3","expires_at":null,"server":"embedded"}' ] ||
  { echo "image-test: unexpected lease" >&2; exit 1; }

# healthy waits until the image's healthcheck command passes in a container.
healthy() {
  local ctr=$1 url=$2
  for _ in $(seq 1 30); do
    "${eng[@]}" exec "$ctr" /ticketd healthcheck --url "$url" && return 0
    sleep 1
  done
  "$engine" logs "$ctr" >&2
  echo "image-test: the healthcheck of $ctr never passed" >&2
  return 1
}

echo "image-test: serve and its healthcheck" >&2
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
# The shortener shares this container's network (ticketd on its 127.0.0.1:8080), so its port is
# published here too.
container=$(TICKETD_ADMIN_TOKEN=$token "${eng[@]}" run -d "${run_opts[@]}" -e TICKETD_ADMIN_TOKEN -p 127.0.0.1::8080 -p 127.0.0.1::8081 "$tag")
healthy "$container" http://127.0.0.1:8080/healthz
if [ "$engine" = podman ]; then
  "${eng[@]}" healthcheck run "$container" && echo "image-test: podman healthcheck run: healthy" >&2
else
  echo "image-test: $("$engine" inspect --format '{{json .Config.Healthcheck.Test}}' "$container")" >&2
fi
# Who serves: podman names the user from the image's /etc/passwd (nonroot, checked above to be 65532).
if [ "$engine" = podman ]; then
  uid=$("${eng[@]}" top "$container" user | sed -n 2p | tr -d ' ')
else
  uid=$("$engine" top "$container" -o uid | sed -n 2p | tr -d ' ')
fi
case "$uid" in 65532 | nonroot) echo "image-test: ticketd serve runs as $uid (uid 65532)" >&2 ;; *) echo "image-test: ticketd serve runs as '$uid', want uid 65532" >&2; exit 1 ;; esac
port=$("$engine" port "$container" 8080/tcp | head -1 | sed 's/.*://')
block=$(printf 'Authorization: Bearer %s\n' "$token" | curl -sS -H @- -X POST "http://127.0.0.1:$port/v1/namespaces/demo/blocks" -d '{"size":10}')
echo "$block"
case "$block" in '{"namespace":"demo","start":"1",'*) ;; *) echo "image-test: unexpected block over HTTP" >&2; exit 1 ;; esac

# The shortener, hardened as Compose runs it, on a Redis of this machine that it reaches by a Unix
# socket (no port), and on ticketd above, whose admin token leases its IDs.
echo "image-test: the shortener and its healthcheck" >&2
mkdir -m 0755 "$tmp/redis"
redis-server --port 0 --unixsocket "$tmp/redis/redis.sock" --unixsocketperm 777 --save '' --appendonly no \
  --dir "$tmp/redis" >"$tmp/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 50); do [ -S "$tmp/redis/redis.sock" ] && break; sleep 0.1; done
create_token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
scramble_key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
shortener=$(SHORTENER_TOKEN=$token SHORTENER_CREATE_TOKEN=$create_token SHORTENER_SCRAMBLE_KEY=$scramble_key \
  "${eng[@]}" run -d "${run_opts[@]}" --read-only --cap-drop ALL --security-opt no-new-privileges \
  --network "container:$container" -v "$tmp/redis:/redis" \
  -e SHORTENER_TOKEN -e SHORTENER_CREATE_TOKEN -e SHORTENER_SCRAMBLE_KEY -e SHORTENER_REDIS=unix:///redis/redis.sock \
  "$tag-shortener" --listen 0.0.0.0:8081 --ticketd http://127.0.0.1:8080 --base-url http://localhost:8081)
healthy "$shortener" http://127.0.0.1:8081/healthz
if [ "$engine" = podman ]; then
  "${eng[@]}" healthcheck run "$shortener" && echo "image-test: podman healthcheck run (shortener): healthy" >&2
fi
sport=$("$engine" port "$container" 8081/tcp | head -1 | sed 's/.*://')
link=$(printf 'Authorization: Bearer %s\n' "$create_token" | curl -sS -H @- -H 'Content-Type: application/json' \
  -X POST "http://127.0.0.1:$sport/api/links" -d '{"url":"https://example.com/image-test"}')
echo "$link"
case "$link" in *'"short_url":"http://localhost:8081/'*) ;; *) echo "image-test: unexpected link" >&2; "$engine" logs "$shortener" >&2; exit 1 ;; esac
echo "image-test: passed ($engine)" >&2
