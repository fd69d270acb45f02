#!/usr/bin/env bash
# Builds the container image from the Dockerfile with podman (or docker) and runs it: a lease on the
# embedded store, then `ticketd serve` with its healthcheck and a lease over HTTP. Not part of
# scripts/test.sh: it needs a container engine, and takes a few minutes.
#
# The base images are pulled where they can be. Where they cannot (no registry in reach), it makes local
# stand-ins and builds on them: for GO_IMAGE a Debian root made with mmdebstrap plus the Go toolchain
# of this machine, for RUNTIME_IMAGE an empty image with the nonroot user (uid 65532) of distroless.
#
#   scripts/image-test.sh              # podman when installed, else docker
#   ENGINE=docker scripts/image-test.sh
#   STANDINS=1 scripts/image-test.sh   # use the stand-ins without trying to pull (kept for the next run;
#                                      # REMAKE_STANDINS=1 makes them again)
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
runtime_image=$(sed -n 's/^ARG RUNTIME_IMAGE=//p' Dockerfile)
tmp=$(mktemp -d)
container=""
eng=("$engine")
cleanup() {
  [ -n "$container" ] && "${eng[@]}" rm -f "$container" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# standin_go makes a Go build image from Debian's packages and this machine's Go toolchain, trusting the
# certificate authorities this machine trusts (a proxy in between may sign with its own).
standin_go() {
  local goroot
  goroot=$(go env GOROOT)
  if [ -n "${REMAKE_STANDINS:-}" ] || ! "$engine" image exists localhost/ticketd-go-standin-base 2>/dev/null; then
    command -v mmdebstrap >/dev/null 2>&1 || { echo "image-test: the stand-ins need mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
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

# standin_runtime makes an image with nothing but the nonroot user of distroless (uid 65532).
standin_runtime() {
  echo "image-test: making localhost/ticketd-runtime-standin (scratch, with the nonroot user)" >&2
  mkdir -p "$tmp/runtime/etc"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$tmp/runtime/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$tmp/runtime/etc/group"
  printf 'FROM scratch\nCOPY etc /etc\n' >"$tmp/runtime/Containerfile"
  "$engine" build -q -f "$tmp/runtime/Containerfile" -t localhost/ticketd-runtime-standin "$tmp/runtime" >/dev/null
  runtime_image=localhost/ticketd-runtime-standin
}

if [ "${STANDINS:-}" = 1 ] || ! "$engine" pull -q "$go_image" >/dev/null 2>&1; then
  standin_go
fi
if [ "${STANDINS:-}" = 1 ] || ! "$engine" pull -q "$runtime_image" >/dev/null 2>&1; then
  standin_runtime
fi

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
start=$(date +%s)
"${eng[@]}" build "${format[@]}" "${run_opts[@]}" --network host --build-arg GO_IMAGE="$go_image" --build-arg RUNTIME_IMAGE="$runtime_image" \
  --build-arg VERSION="$version" --build-arg COMMIT="$commit" --build-arg DIRTY="$dirty" -t "$tag" .
echo "image-test: built $tag in $(($(date +%s) - start))s on $go_image and $runtime_image" >&2

echo "image-test: ticketd version in the image" >&2
got=$("${eng[@]}" run --rm --no-healthcheck "${run_opts[@]}" "$tag" version)
echo "$got"
case "$got" in *"commit $commit"*) ;; *) echo "image-test: the image does not report commit $commit" >&2; exit 1 ;; esac

echo "image-test: a lease on the embedded store" >&2
out=$("${eng[@]}" run --rm --no-healthcheck "${run_opts[@]}" "$tag" lease demo -n 3)
echo "$out"
[ "$out" = '{"namespace":"demo","start":"1","step":1,"size":3,"last":"3","expires_at":null,"server":"embedded"}' ] ||
  { echo "image-test: unexpected lease" >&2; exit 1; }

echo "image-test: serve and its healthcheck" >&2
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
container=$(TICKETD_ADMIN_TOKEN=$token "${eng[@]}" run -d "${run_opts[@]}" -e TICKETD_ADMIN_TOKEN -p 127.0.0.1::8080 "$tag")
healthy=""
for _ in $(seq 1 30); do
  if "${eng[@]}" exec "$container" /ticketd healthcheck --url http://127.0.0.1:8080/healthz; then
    healthy=yes
    break
  fi
  sleep 1
done
[ -n "$healthy" ] || { "$engine" logs "$container" >&2; echo "image-test: the healthcheck never passed" >&2; exit 1; }
if [ "$engine" = podman ]; then
  "${eng[@]}" healthcheck run "$container" && echo "image-test: podman healthcheck run: healthy" >&2
else
  echo "image-test: $("$engine" inspect --format '{{json .Config.Healthcheck.Test}}' "$container")" >&2
fi
port=$("$engine" port "$container" 8080/tcp | head -1 | sed 's/.*://')
block=$(printf 'Authorization: Bearer %s\n' "$token" | curl -sS -H @- -X POST "http://127.0.0.1:$port/v1/namespaces/demo/blocks" -d '{"size":10}')
echo "$block"
case "$block" in '{"namespace":"demo","start":"1",'*) ;; *) echo "image-test: unexpected block over HTTP" >&2; exit 1 ;; esac
echo "image-test: passed ($engine)" >&2
