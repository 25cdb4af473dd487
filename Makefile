# One way to do each thing; README.md and .ci/run use these targets. `make help` lists them.

GO       ?= go
BIN      := bin/connect
KAFKA_SH := resources/kafka.sh
# Bootstrap address of the broker that resources/kafka.sh starts (its port knob is KBR_KAFKA_PORT).
KBR_KAFKA_BROKERS ?= 127.0.0.1:$(or $(KBR_KAFKA_PORT),9092)
# How long `make fuzz` runs each fuzz test (a count: time-limited runs can fail spuriously on Go 1.26).
FUZZTIME ?= 100000x
# How long `make model` runs each state machine's model test.
MODELTIME ?= 30m
# How long `make mutate` runs each model walk per injected bug, and how many bugs it tests at once.
MUTATE_MODELTIME ?= 20s
MUTATE_JOBS ?= 3
# The version stamped into the binary: the git tag v* on (or before) HEAD, else the VERSION file.
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || cat VERSION)
DATE     ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -X main.version=$(VERSION) -X github.com/kbr/kafka_batched_ranges/plugin.Version=$(VERSION) -X main.dateBuilt=$(DATE)
# What `make release` builds (GOOS/GOARCH pairs), and where; SHA256SUM is `shasum -a 256` on macOS.
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST      ?= dist
SHA256SUM ?= sha256sum
# Example configs for `connect lint` (Benthos unit-test definitions are not configs).
EXAMPLES := $(filter-out %_benthos_test.yaml,$(wildcard config/examples/*.yaml))

# Steps run in the order written, also under `make -j`.
.NOTPARALLEL:
.DEFAULT_GOAL := help

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

version: ## Print the version make build stamps (git tag v*, else the VERSION file).
	@echo $(VERSION)

build: ## Build the connect binary into bin/connect, the version stamped (connect --version).
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/connect

release: ## Build static release archives for PLATFORMS into DIST (default dist/), with DIST/SHA256SUMS.
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; name=kafka_batched_ranges_$(VERSION)_$${os}_$${arch}; dir=$(DIST)/$$name; \
		echo "release: $$name.tar.gz"; \
		mkdir -p $$dir/examples; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $$dir/connect ./cmd/connect; \
		cp README.md LICENSE CHANGELOG.md $$dir/; cp config/examples/*.yaml $$dir/examples/; \
		tar -C $(DIST) -czf $(DIST)/$$name.tar.gz $$name; rm -rf $$dir; \
	done
	@cd $(DIST) && $(SHA256SUM) *.tar.gz > SHA256SUMS

generate: ## Regenerate docs/kafka_batched_ranges.md from the spec (go generate; a test fails when it is stale).
	$(GO) generate ./...

demo: ## Run the built-in demo (in-process broker, no Kafka needed).
	$(GO) run ./cmd/connect demo

kafka-up: ## Start the local Apache Kafka broker (idempotent; fetches the jars once).
	$(KAFKA_SH) start

kafka-down: ## Stop the local Apache Kafka broker started by kafka-up.
	$(KAFKA_SH) stop

kafka-cluster-up: ## Start a local 3-node KRaft cluster (ports 9192-9197; tests that need one start their own).
	$(KAFKA_SH) cluster-start

kafka-cluster-down: ## Stop the cluster started by kafka-cluster-up.
	$(KAFKA_SH) cluster-stop

kafka-wan-up: ## Start bench-wan's broker: its own home and ports (KBR_KAFKA_WAN_PORT, default 9492), advertising the port after the next (9494), where bench-wan's proxy listens.
	$(KAFKA_SH) wan-start

kafka-wan-down: ## Stop the broker started by kafka-wan-up (kafka.sh wan-reset also deletes its topics).
	$(KAFKA_SH) wan-stop

vet: ## go vet every package.
	$(GO) vet ./...

fmt-check: ## Fail if any Go file is not gofmt-formatted.
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

go-test: ## go test every package with -race against the broker at KBR_KAFKA_BROKERS.
	KBR_KAFKA_BROKERS=$(KBR_KAFKA_BROKERS) $(GO) test -race -count=1 -timeout 25m -parallel 8 ./...

lint-config: build ## connect lint and connect test on config/examples/.
	$(BIN) lint $(EXAMPLES)
	$(BIN) test ./config/examples/...

bench-smoke: build ## A tiny run of the benchmark, to keep it working (not a measurement; runs the peers only if installed).
	$(GO) run ./resources/bench -brokers $(KBR_KAFKA_BROKERS) -connect $(BIN) -records 2000 -size 100 -partitions 2 -rounds 1 -peers auto

test: kafka-up vet fmt-check go-test lint-config bench-smoke ## Run every check and test (starts the broker, leaves it running).

model: ## Run the state machines' model tests on random event sequences for MODELTIME each (default 30m).
	KBR_MODEL_TIME=$(MODELTIME) $(GO) test -count=1 -timeout 0 -v -run '^TestPartitionTableModelWalk$$' ./internal/engine
	KBR_MODEL_TIME=$(MODELTIME) $(GO) test -count=1 -timeout 0 -v -run '^TestCursorModelWalk$$' ./internal/cache

mutate: ## Inject each bug of resources/mutate/mutants.go into a scratch copy: which the model walks alone catch (MUTATE_MODELTIME each, default 20s) and which the package's tests catch (MUTATE_FLAGS: -run, -walks-only).
	$(GO) run ./resources/mutate -model-time $(MUTATE_MODELTIME) -jobs $(MUTATE_JOBS) $(MUTATE_FLAGS)

fuzz: ## Run each fuzz test in internal/ranges for FUZZTIME (default 100000x).
	@set -e; for f in $$($(GO) test -list '^Fuzz' ./internal/ranges | grep '^Fuzz'); do \
		echo "== $$f ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./internal/ranges; \
	done

BENCH_FLAGS ?=
bench: kafka-up build ## Benchmark the input against a plain franz-go consumer and the peers on the real broker (BENCH_FLAGS: -records -size -partitions -rounds).
	$(GO) run ./resources/bench -brokers $(KBR_KAFKA_BROKERS) -connect $(BIN) -peers install $(BENCH_FLAGS)

bench-handover: kafka-up build ## Issue 27's table: handovers (join, SIGTERM, SIGKILL) under classic cooperative_sticky and range and consumer, side by side (HANDOVER_FLAGS: -members -partitions -phase -kill-phase -protocols).
	$(GO) run ./resources/bench -mode handover -brokers $(KBR_KAFKA_BROKERS) -connect $(BIN) $(HANDOVER_FLAGS)

bench-keyorder: kafka-up build ## Issue 55's table: ordering partition, key and none on one partition of keyed records, a pipeline sleeping per record (KEYORDER_FLAGS: -records -keys -work -share-threads -rounds).
	$(GO) run ./resources/bench -mode keyorder -brokers $(KBR_KAFKA_BROKERS) -connect $(BIN) -records 4000 -size 100 -keys 64 -work 2ms -share-threads 8 -rounds 3 -max-range-records 1000 $(KEYORDER_FLAGS)

bench-deps: ## Install the benchmark's peers (kcat, python3-confluent-kafka) when missing (Debian, as root).
	@command -v kcat >/dev/null && /usr/bin/python3 -c 'import confluent_kafka' 2>/dev/null || \
		{ apt-get update && apt-get install -y kcat python3-confluent-kafka; }

TABLE_CASES ?= -partitions 1 -records 1000000 -size 1024;-partitions 8 -records 2000000 -size 1024;-partitions 8 -records 2000000 -size 100;-partitions 256 -records 1000000 -size 1024;-partitions 1000 -records 1000000 -size 1024
TABLE_FLAGS ?=
# The variants of bench-table: the raw consumer, the input in record mode, in archive mode and without per-record metadata (issue 54), and Benthos' ceiling.
TABLE_VARIANTS ?= baseline,input,input archive,input bare,ceiling
bench-table: kafka-up build ## The README's table: each case of TABLE_CASES, the input (record mode, archive mode, no metadata) against the raw consumer and the ceiling, medians of 5 (TABLE_FLAGS: -kfake, -cpus N; TABLE_VARIANTS).
	@echo '$(TABLE_CASES)' | tr ';' '\n' | while read -r c; do \
		$(GO) run ./resources/bench -brokers $(KBR_KAFKA_BROKERS) -connect $(BIN) -rounds 5 -variants '$(TABLE_VARIANTS)' -peers off $(TABLE_FLAGS) $$c </dev/null || exit 1; \
	done

# The broker of kafka-wan-up listens on KBR_KAFKA_WAN_PORT and advertises the port two above, the proxy's.
WAN_PORT  := $(or $(KBR_KAFKA_WAN_PORT),9492)
WAN_FLAGS ?=
bench-wan: kafka-wan-up build ## Issue 46's table: the input (defaults) against a tuned and a default franz-go consumer through a latency proxy, 1 and 8 partitions at 0, 10 and 50 ms and 1 partition at 100 ms, medians of 3 (WAN_FLAGS: -rtt 0,10ms,50ms -rtt100=false -partitions 1,8 -wan-records 1:400000,8:800000 -rounds N -variants 'input,tuned consumer' -input-extra 'FIELD: V' -wan-inputs 'FIELD: V;FIELD: V,FIELD: V').
	$(GO) run ./resources/bench -mode wan -connect $(BIN) -upstream 127.0.0.1:$(WAN_PORT) -proxy 127.0.0.1:$(shell echo $$(($(WAN_PORT) + 2))) $(WAN_FLAGS)

BENCH_CASES ?= -partitions 8 -records 2000000 -size 1024;-partitions 1 -records 2000000 -size 1024;-partitions 8 -records 10000000 -size 100;-partitions 256 -records 1000000 -size 1024;-partitions 1000 -records 1000000 -size 1024
BENCH_PEERS ?= baseline,input,kcat,python cached,python no cache,bento
bench-cases: kafka-up build bench-deps ## Issue 26's table: every case of BENCH_CASES, the input against the baseline and the peers, medians of 3 alternating rounds.
	@echo '$(BENCH_CASES)' | tr ';' '\n' | while read -r c; do \
		$(GO) run ./resources/bench -brokers $(KBR_KAFKA_BROKERS) -connect $(BIN) -rounds 3 -variants '$(BENCH_PEERS)' $$c </dev/null || exit 1; \
	done
