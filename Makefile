# kvrouter — see README.md for what each target does and costs.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO                    ?= go
VERSION               ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT         := $(shell $(GO) env GOPATH)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
LDFLAGS               := -s -w -X main.version=$(VERSION)
IMAGE                 ?= kvrouter:$(VERSION)
export GOLANGCI_LINT_VERSION

.PHONY: help run test test-go fuzz-short fuzz test-e2e bench bench-e2e soak soak-ha load sim lint fmt vet build image deps

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

run: ## the local demo: 3 simulated vLLM pods + kvrouter, a scripted workload, then keeps serving (Ctrl-C stops)
	test/deps.sh system oracle
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kvrouter ./cmd/kvrouter
	$(GO) build -o bin/kvrouter-demo ./cmd/kvrouter-demo
	./bin/kvrouter-demo --kvrouter ./bin/kvrouter

test: deps vet lint test-go fuzz-short ## everything CI checks: deps, vet, lint, race tests, short fuzz runs
	@echo "make test: all checks passed"

test-go:
	KVROUTER_REQUIRE_APISERVER=1 KVROUTER_REQUIRE_TOXIPROXY=1 KVROUTER_REQUIRE_HELM=1 KVROUTER_REQUIRE_PROMETHEUS=1 $(GO) test -race -count=1 ./...
	KVROUTER_REDIS_SERVER=valkey-server $(GO) test -race -count=1 ./kvindex/redisindex/
	cd test/sim && $(GO) test -race -count=1 ./...

fuzz-short:
	FUZZTIME=10s test/fuzz.sh

fuzz: deps ## every fuzz target for 5 minutes each (FUZZTIME=... to change)
	FUZZ_KEEP=1 FUZZTIME=$${FUZZTIME:-5m} test/fuzz.sh

test-e2e: deps ## the end-to-end tests (TestE2E*) with the slow ones make test skips: kvrouter and API-server restarts, heavy hostile requests
	KVROUTER_E2E=1 $(GO) test -race -count=1 -timeout 30m -run 'E2E' ./test/...

bench: ## benchmarks with allocations, one run per benchmark
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd test/sim && $(GO) test -run '^$$' -bench . -benchmem ./...

load: deps build ## kvrouter under load through the Envoy-faithful client: 8k chat at 100/s, 500-token max rate
	$(GO) run ./test/cmd/kvrouter-load -kind chat -tokens 8000 -rates 100 -stage 20s
	$(GO) run ./test/cmd/kvrouter-load -kind completion -tokens 500 -rates 0 -workers 8 -stage 20s

bench-e2e: deps build ## decisions at rising rates: 500/8k/32k/100k-token chats, 8 and 64 pods, 10M index entries; then the event subscriber on one core
	$(GO) run ./test/cmd/kvrouter-load -kind chat -tokens 500,8000,32000,100000 -pods 8,64 -fill 10000000 -stage 5s -markdown
	$(GO) run ./test/cmd/kvevents-bench -rate 60000 -count 600000
	$(GO) run ./test/cmd/kvevents-bench -rate 100000 -count 1000000

soak: deps build ## 10 minutes: 100 pods churning their caches + 50 requests/s; index exact, RSS bounded, no growth, no errors
	$(GO) run ./test/cmd/kvrouter-load -soak $${SOAK:-10m} -pods 100 -rates 50

soak-ha: deps build ## 30 minutes: 2 replicas sharing Redis, 60 pods churning behind toxiproxy, 50 requests/s, a toxic a minute, one replica restarted
	$(GO) run ./test/cmd/kvrouter-load -soak-ha $${SOAK:-30m} -pods 60 -rates 50

sim: ## fleet simulator (module test/sim): every routing policy on the Mooncake traces and the llm-d workloads; report and PNG/SVG plots in results/sim
	traces=$$(realpath -m "$${TRACES:-testdata/traces}") && cd test/sim && $(GO) run ./cmd/fleetsim -traces "$$traces" -out $(CURDIR)/results/sim

lint: deps-lint ## golangci-lint (pinned version): gofumpt formatting and the import rules of docs/architecture.md
	$(GOLANGCI_LINT) run ./...
	cd test/sim && $(GOLANGCI_LINT) run ./...

fmt: deps-lint ## rewrite sources with gofumpt
	$(GOLANGCI_LINT) fmt ./...
	cd test/sim && $(GOLANGCI_LINT) fmt ./...

vet:
	$(GO) vet ./...
	cd test/sim && $(GO) vet ./...

build: ## build bin/kvrouter (cgo: needs libzmq)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kvrouter ./cmd/kvrouter

image: ## container image (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

deps: ## install system packages, npm oracles, golangci-lint, kube-apiserver, toxiproxy-server, helm and Prometheus (no-op when present)
	test/deps.sh system oracle lint kube toxiproxy helm prometheus

deps-lint:
	test/deps.sh lint
