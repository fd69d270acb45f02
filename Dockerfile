# syntax=docker/dockerfile:1
# Two images from one build: `ticketd` (the default target) and `shortener` (the example service).
#   docker build -t ticketd .
#   docker build --target shortener -t ticketd-shortener .
# podman and buildah keep the HEALTHCHECKs only in Docker's format: podman build --format docker ….
#
# The base images are arguments, for a registry of your own or local stand-ins (scripts/image-test.sh):
# GO_IMAGE has Go 1.26 on PATH; RUNTIME_IMAGE is the distroless static image, or any image with a
# user nonroot of uid 65532. VERSION, COMMIT and DIRTY (true or false) are what `ticketd version`
# reports: the build has no repository to read them from.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

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
# Static binaries: no libc in the final image. /out/data becomes the embedded store's directory.
ENV CGO_ENABLED=0
RUN v=github.com/ticketd/ticketd/internal/version && \
    flags="-s -w -X $v.version=${VERSION} -X $v.commit=${COMMIT} -X $v.modified=${DIRTY}" && \
    go build -trimpath -ldflags="$flags" -o /out/ticketd ./cmd/ticketd && \
    go build -trimpath -ldflags="-s -w" -o /out/shortener ./examples/shortener && \
    mkdir /out/data

FROM ${RUNTIME_IMAGE} AS shortener
COPY --from=build /out/shortener /shortener
COPY --from=build /out/ticketd /ticketd
USER nonroot:nonroot
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/ticketd", "healthcheck", "--url", "http://127.0.0.1:8081/healthz"]
ENTRYPOINT ["/shortener"]
CMD ["--listen", "0.0.0.0:8081"]

FROM ${RUNTIME_IMAGE} AS ticketd
COPY --from=build /out/ticketd /ticketd
# The embedded store, when no ticket server is configured, lives here (mount a volume). Owned by nonroot
# (uid 65532) explicitly, not by however WORKDIR creates it; a named volume mounted on it starts with
# that owner.
COPY --from=build --chown=65532:65532 /out/data /data
USER nonroot:nonroot
WORKDIR /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/ticketd", "healthcheck", "--url", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/ticketd"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--data-dir", "/data"]
