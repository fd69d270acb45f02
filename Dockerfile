# syntax=docker/dockerfile:1
# Two images from one build: `ticketd` (the default target) and `shortener` (the example service).
#   docker build -t ticketd .
#   docker build --target shortener -t ticketd-shortener .

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binaries: no libc in the final image. /out/data becomes the embedded store's directory.
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/ticketd ./cmd/ticketd && \
    go build -trimpath -ldflags="-s -w" -o /out/shortener ./examples/shortener && \
    mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot AS shortener
COPY --from=build /out/shortener /shortener
COPY --from=build /out/ticketd /ticketd
USER nonroot:nonroot
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/ticketd", "healthcheck", "--url", "http://127.0.0.1:8081/healthz"]
ENTRYPOINT ["/shortener"]
CMD ["--listen", "0.0.0.0:8081"]

FROM gcr.io/distroless/static-debian12:nonroot AS ticketd
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
