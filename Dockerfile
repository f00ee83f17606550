# kvrouter image: a cgo build (libzmq) in the Go image, then a slim Debian
# runtime with only the binary and libzmq5, running as a non-root user.
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libzmq3-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/kvrouter ./cmd/kvrouter

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libzmq5 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/kvrouter /usr/local/bin/kvrouter
USER 65532:65532
# 9002: ext_proc gRPC; 9090: admin (/healthz, /readyz, /metrics, /debug/pprof/).
EXPOSE 9002 9090
ENTRYPOINT ["/usr/local/bin/kvrouter"]
CMD ["serve"]
