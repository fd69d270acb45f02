# syntax=docker/dockerfile:1
# Two images from one build: `ticketd` (the default target) and `shortener` (the example service).
#   docker build -t ticketd .
#   docker build --target shortener -t ticketd-shortener .
# podman and buildah keep the HEALTHCHECKs only in Docker's format: podman build --format docker ….
#
# The images are FROM scratch: the static binaries and the few files the build stage makes for them
# (the user nonroot, uid and gid 65532; the certificate authorities; the data directory), no shell and
# nothing else, and no runtime base image to pull or to pin.
#
# GO_IMAGE, the build stage's image, is pinned by digest: the same bytes on every build. It is an
# argument for a registry of your own or a local stand-in (scripts/image-test.sh): any image with Go
# 1.26 on PATH and /etc/ssl/certs/ca-certificates.crt. The name is written in full (docker.io/library/)
# because podman and buildah resolve no short name without a search registry. The digest is that of
# golang:1.26.8-bookworm (its multi-platform index: one digest for every platform). To move to a newer
# Go 1.26, read the tag's digest and put it here:
#   crane digest golang:1.26-bookworm
#   docker buildx imagetools inspect golang:1.26-bookworm   (the Digest: line)
# VERSION, COMMIT and DIRTY (true or false) are what `ticketd version` reports: the build has no
# repository to read them from.
ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d

FROM ${GO_IMAGE} AS build
ARG VERSION=
ARG COMMIT=
ARG DIRTY=
WORKDIR /src
# The server module and the modules it replaces by their directories (go.work is for a clone).
ENV GOWORK=off
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum client/
COPY internal/backoff/go.mod internal/backoff/
COPY internal/hedge/go.mod internal/hedge/
RUN go mod download
COPY . .
# Static binaries: no libc in the final image.
ENV CGO_ENABLED=0
RUN v=github.com/ticketd/ticketd/internal/version && \
    flags="-s -w -X $v.version=${VERSION} -X $v.commit=${COMMIT} -X $v.modified=${DIRTY}" && \
    go build -trimpath -ldflags="$flags" -o /out/ticketd ./cmd/ticketd && \
    go build -trimpath -ldflags="-s -w" -o /out/shortener ./examples/shortener
# /out/root is the images' file system besides the binaries: the user and group nonroot (65532) for
# whoever reads names (ps, ls), with no home and no login shell; the certificate authorities, for TLS to
# the ticket servers, Redis and ticketd. /out/data becomes the embedded store's directory.
RUN mkdir -p /out/root/etc/ssl/certs /out/data && \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >/out/root/etc/passwd && \
    printf 'root:x:0:\nnonroot:x:65532:\n' >/out/root/etc/group && \
    cp /etc/ssl/certs/ca-certificates.crt /out/root/etc/ssl/certs/ca-certificates.crt && \
    chmod 0644 /out/root/etc/passwd /out/root/etc/group /out/root/etc/ssl/certs/ca-certificates.crt

FROM scratch AS runtime
COPY --from=build /out/root/ /

FROM runtime AS shortener
COPY --from=build /out/shortener /shortener
COPY --from=build /out/ticketd /ticketd
USER 65532:65532
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/ticketd", "healthcheck", "--url", "http://127.0.0.1:8081/healthz"]
ENTRYPOINT ["/shortener"]
CMD ["--listen", "0.0.0.0:8081"]

FROM runtime AS ticketd
COPY --from=build /out/ticketd /ticketd
# The embedded store, when no ticket server is configured, lives here (mount a volume). Owned by nonroot
# (uid 65532) explicitly, not by however WORKDIR creates it; a named volume mounted on it starts with
# that owner.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
WORKDIR /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/ticketd", "healthcheck", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/ticketd"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--data-dir", "/data"]
