# kafka_batched_ranges connect: Benthos' pure and io components with the kafka_batched_ranges input.
#
#   docker build -t kafka-batched-ranges .                      # version from the VERSION file
#   docker build --build-arg VERSION=v0.2.0 -t kafka-batched-ranges .
#   docker run --rm kafka-batched-ranges                        # connect demo (in-process broker)
#   docker run --rm -e KAFKA_BROKERS=kafka:9092 -e KAFKA_TOPIC=events -e OUT_DIR=/tmp/out \
#     kafka-batched-ranges run /etc/kafka_batched_ranges/examples/backfill.yaml
#
# Stage 1 builds a static binary (no cgo) with the version stamped; stage 2 holds only the binary,
# the CA certificates and the examples, and runs as the unprivileged user nonroot (65532).

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN v="${VERSION:-$(cat VERSION)}" && \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${v} -X github.com/kbr/kafka_batched_ranges/plugin.Version=${v} -X main.dateBuilt=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
      -o /out/connect ./cmd/connect

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/connect /usr/local/bin/connect
COPY config/examples/ /etc/kafka_batched_ranges/examples/
COPY LICENSE /usr/share/doc/kafka_batched_ranges/LICENSE
USER nonroot:nonroot
# Benthos' HTTP server: /metrics (Prometheus), /ping, /ready, /version.
EXPOSE 4195
ENTRYPOINT ["/usr/local/bin/connect"]
CMD ["demo"]
