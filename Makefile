# Cardinal — run `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO            ?= go
BIN           := $(CURDIR)/bin
TOOLS         := $(CURDIR)/.cache/tools
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
BINARIES      := scheduler-extender webhook device-plugin kubectl-cardinal
# The Kubernetes minor (e.g. 1.36; empty: the newest supported) and Helm major (3 or 4; empty: 3) the
# tests and the demo run against: `make test CARDINAL_K8S_VERSION=1.35` (hack/testbed/build.sh --list).
CARDINAL_K8S_VERSION  ?=
CARDINAL_HELM_VERSION ?=
export CARDINAL_K8S_VERSION CARDINAL_HELM_VERSION
# Given as flags too: $(shell) does not see variables set on make's command line.
TESTBED_FLAGS := $(if $(CARDINAL_K8S_VERSION),--k8s $(CARDINAL_K8S_VERSION)) $(if $(CARDINAL_HELM_VERSION),--helm $(CARDINAL_HELM_VERSION))
# Tests that start real Kubernetes components find the pinned binaries here (see hack/testbed/build.sh).
export CARDINAL_TESTBED_BIN = $(shell bash hack/testbed/build.sh --print-dir $(TESTBED_FLAGS))
# The Kueue the end-to-end tests run beside Cardinal (its manager, CRDs and webhook manifests).
export CARDINAL_KUEUE_DIR = $(shell bash hack/testbed/build.sh --kueue --print-dir)
TEST_FLAGS    ?=
FUZZTIME      ?= 30s
# go-nvml's cgo code includes NVIDIA's nvml.h, which marks the functions it keeps for old drivers
# deprecated: every cold build of the device plugin printed a warning for each. Cardinal has no C code
# of its own, so this silences only that dependency's deprecation warnings (Go's default is -O2 -g).
CGO_CFLAGS    ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

##@ General
.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development
.PHONY: build
build: ## Build the binaries (the three components and the kubectl-cardinal plugin) into bin/ (the device plugin needs cgo: go-nvml dlopens libnvidia-ml at run time).
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/scheduler-extender ./cmd/webhook ./cmd/kubectl-cardinal
	CGO_ENABLED=1 $(GO) build -trimpath -o $(BIN)/ ./cmd/device-plugin

.PHONY: fmt
fmt: ## Format the Go code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (installs the pinned version into .cache/tools).
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS)/.gl $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS)/.gl/golangci-lint $@ && rmdir $(TOOLS)/.gl

##@ Demo
.PHONY: demo
demo: build testbed-bins ## Run Cardinal on a local 3-node cluster with simulated GPUs and print where the examples/ pods land (root; DEMO_KEEP=1 keeps it running).
	$(GO) run ./hack/demo --bin $(BIN)

##@ Testing
.PHONY: testbed-bins
testbed-bins: ## Build the pinned etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, helm and Kueue once (cached; CARDINAL_K8S_VERSION, CARDINAL_HELM_VERSION pick them).
	bash hack/testbed/build.sh $(TESTBED_FLAGS)
	bash hack/testbed/build.sh --kueue

.PHONY: prometheus
prometheus: ## Put Debian's prometheus binary in .cache/prometheus/ for the dashboard test (apt-get download, unpacked, nothing installed; once).
	bash hack/prometheus.sh >/dev/null

.PHONY: test
test: testbed-bins prometheus ## Run every test CI runs (unit, fuzz seed corpora, real-cluster integration and e2e).
	$(GO) vet ./...
	$(GO) test -race -count=1 $(TEST_FLAGS) ./pkg/... ./cmd/... ./bench/... ./hack/demo/... ./docs/...
	$(GO) test -count=1 -timeout 40m $(TEST_FLAGS) ./test/...

.PHONY: test-matrix
test-matrix: prometheus ## Run the real-cluster tests (./test/..., the demo) on every supported Kubernetes minor with Helm 3, and the chart tests with Helm 4 (MATRIX_K8S, MATRIX_HELM narrow it; hours on 2 cores).
	bash hack/test-matrix.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s).
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

##@ Benchmarks
BENCH_SIZE      ?= small
BENCH_S6_WINDOW ?=
BENCH_ONLY      ?=

.PHONY: bench replay links migplace gangs
# The four traces, then five blends of them, under frag-aware and BestFit, with CPU-only pods routed
# through Cardinal and not, 10 seeds each (about 25 minutes on 2 cores); REPLAY_FLAGS replaces it all.
REPLAY_TRACE_DIR := testdata/traces/alibaba-gpu-v2023
REPLAY_COMMON    := --policies frag-aware,bestfit --cpu-pods cardinal,least-allocated --seeds 42-51 $(REPLAY_EXTRA)
REPLAY_TRACES    := $(REPLAY_TRACE_DIR)/openb_pod_list_default.csv,$(REPLAY_TRACE_DIR)/openb_pod_list_gpushare100.csv,$(REPLAY_TRACE_DIR)/openb_pod_list_multigpu50.csv,$(REPLAY_TRACE_DIR)/openb_pod_list_gpuspec20.csv
REPLAY_BLENDS    := --blend 8=2,4=2,2=2 --blend cpu=3 --blend spec=0.5 --blend frac=3 --blend cpu=5,8=2
replay: ## Replay the Alibaba GPU trace through the decision core: traces and blends, both CPU-only protocols, with the published anchors (REPLAY_EXTRA adds flags, e.g. --scoring kube --format markdown; REPLAY_FLAGS runs those flags alone).
ifneq ($(REPLAY_FLAGS),)
	$(GO) run ./bench/replay $(REPLAY_FLAGS)
else
	$(GO) run ./bench/replay --pods $(REPLAY_TRACES) $(REPLAY_COMMON)
	$(GO) run ./bench/replay --pods $(REPLAY_TRACES) $(REPLAY_BLENDS) $(REPLAY_COMMON)
endif

links: ## Print S9's table: multi-card pods given all-NVLink cards, Cardinal vs card binpack vs kubelet-time picking (LINKS_FLAGS, e.g. --seeds 10).
	$(GO) run ./bench/links $(LINKS_FLAGS)

# The recorded run of bench/results/gangs-*.md (about 10 minutes on 2 cores); GANGS_FLAGS replaces it.
GANGS_FLAGS ?= --seeds 42-44 --gang-jobs 2000 --gang-nodes 200 --gang-load 1.2 --policies frag-aware --per-seed
gangs: ## Print the pod-group table: jobs completed, deadlocked, GPU-hours held by partly placed jobs, all-or-nothing vs per-pod placement of a seeded gang mix drawn from the Alibaba trace (GANGS_FLAGS).
	$(GO) run ./bench/replay --gangs $(GANGS_FLAGS)

migplace: ## Print the MIG placement table: requests served by frag-aware vs first-fit placement on A100-80GB cards (MIGPLACE_FLAGS, e.g. --seeds 10).
	$(GO) run ./bench/migplace $(MIGPLACE_FLAGS)

bench: testbed-bins ## Run the speed benchmarks S1-S6 and write bench/results/latest.md (BENCH_SIZE=tiny|small|full, BENCH_ONLY=S2,S3, BENCH_S6_WINDOW=5m).
	$(GO) run ./bench --size $(BENCH_SIZE) --out bench/results/latest.md --raw bench/results/latest-raw.txt \
	  $(if $(BENCH_ONLY),--only $(BENCH_ONLY)) $(if $(BENCH_S6_WINDOW),--s6-window $(BENCH_S6_WINDOW))

##@ Images and chart
IMAGE_REPOSITORY ?= ghcr.io/cardinal-gpu
IMAGE_TAG        ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGES_DIR       := $(BIN)/images

.PHONY: images
images: ## Build the three images as OCI tarballs in bin/images/ without a container engine (IMAGE_REPOSITORY, IMAGE_TAG).
	@mkdir -p $(IMAGES_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGES_DIR)/ ./cmd/scheduler-extender ./cmd/webhook
	CGO_ENABLED=1 $(GO) build -trimpath -tags netgo,osusergo -ldflags "-s -w" -o $(IMAGES_DIR)/ ./cmd/device-plugin
	cd hack/images && $(GO) run . --out $(IMAGES_DIR) --repository $(IMAGE_REPOSITORY) --tag $(IMAGE_TAG) \
	  --static scheduler-extender=$(IMAGES_DIR)/scheduler-extender --static webhook=$(IMAGES_DIR)/webhook \
	  --glibc device-plugin=$(IMAGES_DIR)/device-plugin

.PHONY: chart-lint
chart-lint: testbed-bins ## Run helm lint --strict on charts/cardinal (helm 3 renders for Kubernetes 1.34 without a cluster, helm 4 for 1.37).
	$(CARDINAL_TESTBED_BIN)/helm lint --strict charts/cardinal

.PHONY: chart-test
chart-test: testbed-bins ## Run the chart and image tests (render, install/upgrade/uninstall on a real apiserver).
	$(GO) test -count=1 $(TEST_FLAGS) ./test/chart/...

##@ Cleaning
.PHONY: clean
clean: ## Remove bin/ (the test-bed cache in .cache/ is kept; remove it by hand to rebuild).
	rm -rf $(BIN)
