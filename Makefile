# rollout — build, test, demo.
#
#   make demo    a local 3-replica cluster and 3 workers run examples/prompts.jsonl,
#                with the leader killed part-way (the README's first command); it
#                prints each replica's web dashboard address (DEMO_FLAGS=--pause
#                waits for Enter before and after the run)
#   make demo-train  the same cluster trains an MLP on the digits data set to >= 95%
#                held-out accuracy, the leader killed part-way
#   make test    the whole test suite (what CI runs)
#   make test-stress  the suite N times (N=3) beside HOGS=2 CPU hogs, naming each failure
#   make test-race  the packages with goroutines under the race detector
#   make bench   the benchmark of issue 11 against etcd and the bare log: one table,
#                bench/results.json (BENCH=throughput,failover runs a subset and
#                keeps the other stages' figures in the file, --merge; BENCH=liveness
#                is issue 29's 10,000 workers, ~12 min; BENCH_ARGS passes further
#                flags to rollout-bench); each stage records its date, commit and load, and
#                docs/BENCHMARKS.md's summary table is rewritten from the file (bench-docs)
#   make bench-docs  rewrite docs/BENCHMARKS.md's generated summary table (and bench/results.md)
#                from bench/results.json and bench/results-scale.json, running nothing
#   make bench-scale  the data plane at scale (issues 17, 41): SCALE_ITEMS (default 10,000,000)
#                prompts of SCALE_BYTES (default 32) through 4 mock workers; bench/results-scale.json
#                (SCALE_ITEMS=100000000 is the 100M run by hand: docs/BENCHMARKS.md)
#   make bench-go  the Go micro-benchmarks of the hot paths (fsm, raftnode, server, api/validate, batch, worker/mock)
#   make cross   cross-compile the binaries for linux and darwin, amd64 and arm64
#   make proto   regenerate the committed protobuf code with the pinned toolchain
#   make k8s-smoke   the chart on a real Kubernetes cluster (REGISTRY=..., STORE_URL=...)
#   make chart-test  the Helm chart offline (lint, template over a matrix, strict validation
#                against the Kubernetes API types, invariants), then chart = runtime on Docker
#   make chaos   the jepsen-lite partition harness (and chaos-federation)
#   make chaos-federation  jepsen-lite --scenario federation: two clusters, a parent handing runs to a peer
#   make tools-npm  the official openai npm package (pinned) into .tools/npm, for the SDK tests
#   make data    fetch the digits data set (training runs and their tests) into .data/
#   make exec-digits  PyTorch (Debian's python3-torch, installed when missing) trains the
#                model that examples/exec/digits_torch.py serves, into .data/
#   make ptx     recompile gpu/kernels/*.cu to the committed PTX (clang-19, installed when missing)
#   make bench-gpu  our GEMM kernels (FP32, TF32) against cuBLAS on a GPU (says "no GPU" and exits 0 elsewhere)
#   make image   the container images (rollout-coord, rollout-worker, rollout, rollout-s3),
#                built offline from deploy/docker/Dockerfile with binaries built here
#   make compose-test  the compose cluster of deploy/compose end to end (docs/DEPLOY.md)
#   make gpu-check  NVIDIA's ptxas and libcuda.so.1 (fetched, not installed) check the GPU path with
#                no GPU: no kernel spills on sm_80/86/89/90, docs/GPU.md's table, the loader

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOLS := $(CURDIR)/.tools

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTOC_VERSION_PREFIX      := libprotoc 3.21

BINARIES := rollout-coord rollout-worker rollout

.PHONY: exec-digits tools-torch tools-npm tools-docker image compose-test
.PHONY: all build cross demo demo-train test test-stress test-race test-short bench bench-docs bench-scale bench-go tools-bench proto tools-proto clean fuzz vet chaos chaos-federation test-chaos tools-chaos tools-browser data ptx tools-ptx tools-gpu bench-gpu tools-s3 gpu-check

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))

# The binaries build without cgo for every target into bin/cross/OS-ARCH;
# jepsen-lite builds too (elsewhere than Linux, as a stub that says it runs
# on Linux only); go vet checks every package, tests included, for darwin.
# No package of this module that imports testing may be linked into a binary.
CROSS_TARGETS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
CROSS_DIR     := $(BIN)/cross

cross:
	@set -e; for t in $(CROSS_TARGETS); do \
		os=$${t%/*}; arch=$${t#*/}; \
		echo "cross $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -o $(CROSS_DIR)/$$os-$$arch/ $(addprefix ./cmd/,$(BINARIES)) ./cmd/jepsen-lite; \
	done
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	@mod=$$($(GO) list -m); bad=$$($(GO) list -deps -f '{{if .Module}}{{if eq .Module.Path "'"$$mod"'"}}{{.ImportPath}}: {{join .Imports " "}}{{end}}{{end}}' $(addprefix ./cmd/,$(BINARIES)) ./cmd/jepsen-lite | grep -w testing || true); \
	if [ -n "$$bad" ]; then echo "cross: binaries link packages that import testing:"; echo "$$bad"; exit 1; fi
	@bad=$$($(GO) list -f '{{.ImportPath}}: {{join .Imports " "}}' ./... | grep -w 'gpu/cudatest' | grep -v '^[^:]*/gpu/cudatest:' || true); \
	if [ -n "$$bad" ]; then echo "cross: non-test code imports gpu/cudatest (test-only):"; echo "$$bad"; exit 1; fi

demo: build
	$(BIN)/rollout demo --bin $(BIN) --input examples/prompts.jsonl $(DEMO_FLAGS)

# A training run on the digits data set (make data) across a local 3-replica
# cluster and 3 workers (--backend gpu where a CUDA driver is present, else
# cpu), the leader SIGKILLed part-way; fails below 95% held-out accuracy.
demo-train: build data
	$(BIN)/rollout demo-train --bin $(BIN) --config examples/train.toml

# Two test packages run at a time (TEST_P=2): most of the suite waits on
# real processes, elections and timeouts (cmd/jepsen-lite uses a third of a
# core over its four minutes), so a second package fills the idle core
# without starving the first; every test is built to pass beside CPU hogs
# (make test-stress). Packages that build the binaries share them
# (internal/testbin). TEST_P=1 runs them one at a time, as before. Then
# the deploy tests: the compose cluster (make compose-test, which installs
# and starts Docker where it is missing) and the Helm chart (make
# chart-test: offline checks, then chart = runtime on the same images).
TEST_P ?= 2

test: tools-chaos tools-gpu tools-browser tools-s3 tools-npm data gpu-check exec-digits
	$(GO) vet ./...
	$(GO) test -count=1 -p $(TEST_P) -timeout 12m ./...
	$(MAKE) compose-test chart-test

# make test-stress: the suite N times (default 3) with HOGS CPU hogs beside
# it (default 2), as on a busy CI machine; every failed test and package is
# named per round (.ci/stress). RACE=1 runs the rounds under the race
# detector; PKGS=./fsm/... narrows them. make test-race: the packages with
# goroutines (fsm, raftnode, the server, the worker, the gateway) under -race.
N    ?= 3
HOGS ?= 2
RACE_PKGS := ./fsm/... ./raftnode/... ./server/... ./worker/... ./gateway/...

# The stress rounds run one package at a time by default (STRESS_P=1): two
# packages beside two CPU hogs starved a replica set past its election
# timeouts (TestRefusalMatrix/plaintext, TestGPUBackendOnTestDriver, once).
STRESS_P ?= 1

test-stress: tools-chaos tools-gpu tools-browser tools-s3 tools-npm data gpu-check exec-digits
	N=$(N) HOGS=$(HOGS) TEST_P=$(STRESS_P) .ci/stress

test-race:
	$(GO) test -race -count=1 -p 1 -timeout 30m $(RACE_PKGS)

test-short:
	$(GO) test -short -count=1 ./...

# make bench: rollout-bench (bench/cmd/rollout-bench) runs every stage on
# loopback with 3 replicas of the real binaries and prints one table; the
# etcd stage drives Debian's etcd-server (installed when missing) with
# bench/etcdledger, a Go module of its own so that etcd's client never
# enters this module. See docs/BENCHMARKS.md.
BENCH      ?=
BENCH_ARGS ?=

bench: build tools-bench tools-s3
	cd bench/etcdledger && $(GO) build -o $(BIN)/etcdledger .
	$(GO) build -o $(BIN)/ ./bench/cmd/rollout-bench
	$(BIN)/rollout-bench --bin $(BIN) --out bench/results.json --markdown bench/results.md $(BENCH_DOCS) $(if $(BENCH),--only $(BENCH) --merge) $(BENCH_ARGS)

# make bench-docs: docs/BENCHMARKS.md's summary table (between its BEGIN and
# END GENERATED markers) is generated from the results files, never edited
# by hand; make test fails, naming the row, when it differs from them
# (TestBenchmarksSummaryMatchesResults). make bench and make bench-scale
# rewrite it after writing their file.
BENCH_DOCS := --docs docs/BENCHMARKS.md --docs-also bench/results-scale.json

bench-docs:
	$(GO) build -o $(BIN)/ ./bench/cmd/rollout-bench
	$(BIN)/rollout-bench --render bench/results.json --markdown bench/results.md $(BENCH_DOCS)

tools-bench:
	@if [ -z "$(BENCH)" ] || echo ",$(BENCH)," | grep -q ',etcd,'; then \
		if ! command -v etcd >/dev/null; then \
			echo "tools-bench: installing etcd-server"; \
			{ apt-get update -qq && apt-get install -y -qq --no-install-recommends etcd-server; } || \
				echo "tools-bench: could not install etcd-server: the etcd stage will fail (BENCH= without etcd skips it)"; \
		fi; \
	fi

# make bench-scale: rollout-bench's scale-e2e stage (not in plain make bench):
# SCALE_ITEMS prompts of SCALE_BYTES bytes (default 32: tiny items, issue 41's
# 250,000 items/s target; SCALE_BYTES=1024 is issue 17's run). It needs
# about 1.1 x (3 x SCALE_BYTES + 178) bytes of disk per item plus 2 GiB under
# $$TMPDIR (the input, its copy in the stage's file store, the result
# objects, the data directories; results are streamed into the verifier,
# never written as one file), checks that first and refuses, naming both
# figures, when the disk has less. After the first tenth the stage predicts
# the replicas' memory for the whole run and stops with an error when the
# machine has less (see docs/BENCHMARKS.md). SCALE_ITEMS=1000000 for a
# shorter run; SCALE_ITEMS=100000000 is the 100M run (about 32 GB of disk).
SCALE_ITEMS ?= 10000000
SCALE_BYTES ?= 32

bench-scale: build
	$(GO) build -o $(BIN)/ ./bench/cmd/rollout-bench
	$(BIN)/rollout-bench --bin $(BIN) --only scale-e2e --scale-e2e-items $(SCALE_ITEMS) --scale-e2e-bytes $(SCALE_BYTES) --out bench/results-scale.json --markdown bench/results-scale.md $(BENCH_ARGS)
	$(MAKE) bench-docs

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./fsm/ ./raftnode/ ./server/ ./api/validate/ ./batch/ ./worker/mock/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzApply -fuzztime 30s ./fsm/
	$(GO) test -run '^$$' -fuzz FuzzRestore -fuzztime 30s ./fsm/
	$(GO) test -run '^$$' -fuzz FuzzParseLine -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzParseRunConfig -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzParseRequest -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzCanonicalJSON -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzParseSamplingJSON -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzSamplingJSONRoundTrip -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzParseOpenAIResult -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzMergeResult -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzOutputLine -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzObjectCheckersAgree -fuzztime 30s ./batch/
	$(GO) test -run '^$$' -fuzz FuzzCheckRequest -fuzztime 30s ./api/validate/
	$(GO) test -run '^$$' -fuzz FuzzJSONObject -fuzztime 30s ./api/validate/
	$(GO) test -run '^$$' -fuzz FuzzFromProto -fuzztime 30s ./api/validate/
	$(GO) test -run '^$$' -fuzz FuzzCheckRangesRequest -fuzztime 30s ./api/validate/
	$(GO) test -run '^$$' -fuzz FuzzCheckRangeReport -fuzztime 30s ./api/validate/
	$(GO) test -run '^$$' -fuzz FuzzDecodeRangeResults -fuzztime 30s ./store/
	$(GO) test -run '^$$' -fuzz FuzzReadChunkLines -fuzztime 30s ./store/
	$(GO) test -run '^$$' -fuzz FuzzCheckRangeChunk -fuzztime 30s ./store/
	$(GO) test -run '^$$' -fuzz FuzzAWSParse -fuzztime 30s ./worker/hint/
	$(GO) test -run '^$$' -fuzz FuzzGCPRead -fuzztime 30s ./worker/hint/
	$(GO) test -run '^$$' -fuzz FuzzCompletionOf -fuzztime 30s ./worker/openai/
	$(GO) test -run '^$$' -fuzz FuzzServerMessage -fuzztime 30s ./worker/openai/
	$(GO) test -run '^$$' -fuzz FuzzParseRetryAfter -fuzztime 30s ./worker/openai/
	$(GO) test -run '^$$' -fuzz FuzzParseConfig -fuzztime 30s ./batch/train/
	$(GO) test -run '^$$' -fuzz FuzzDecodeResult -fuzztime 30s ./batch/train/
	$(GO) test -run '^$$' -fuzz FuzzStepsFromResults -fuzztime 30s ./batch/train/
	$(GO) test -run '^$$' -fuzz FuzzDecodePayload -fuzztime 30s ./batch/train/
	$(GO) test -run '^$$' -fuzz FuzzParseAnswer -fuzztime 30s ./worker/exec/

# The Helm chart deploy/helm/rollout (docs/DEPLOY.md). chart-test-offline:
# helm's own lint (strict) and template engine over replicas 1, 3, 5 x TLS from
# Secrets or cert-manager x optional parts, every object decoded strictly into
# the k8s.io/api types of a pinned version, and the chart's invariants
# (deploy/helm/charttest, a module of its own: the main module gains no helm or
# Kubernetes dependency). chart-test adds chart = runtime: the rendered
# arguments run in the images of `make image` on a Docker network that
# imitates the StatefulSet's DNS names.
.PHONY: chart-test chart-test-offline
chart-test-offline:
	cd deploy/helm/charttest && $(GO) vet -tags chartruntime ./... && $(GO) test -count=1 ./...

# make k8s-smoke: the chart on a real Kubernetes cluster (REGISTRY and
# STORE_URL required; see deploy/helm/k8s-smoke.sh). Not part of make test:
# no API server can run here.
.PHONY: k8s-smoke
k8s-smoke:
	bash deploy/helm/k8s-smoke.sh

chart-test: chart-test-offline image
	cd deploy/helm/charttest && CHART_IMAGE_TAG=$(IMAGE_VERSION) $(GO) test -tags chartruntime -count=1 -v -timeout 10m \
		-run 'TestChartRuntime|TestChartFlagsExist' ./...

vet:
	$(GO) vet ./...

# The pinned proto toolchain: protoc from Debian's protobuf-compiler (3.21),
# the Go plugins built from the module proxy at fixed versions.
tools-proto:
	@if ! protoc --version 2>/dev/null | grep -q '$(PROTOC_VERSION_PREFIX)'; then \
		echo "installing protobuf-compiler"; \
		apt-get update -qq && apt-get install -y -qq protobuf-compiler; \
	fi
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

proto: tools-proto
	PATH=$(TOOLS):$$PATH protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		api/rollout/v1/rollout.proto
	PATH=$(TOOLS):$$PATH protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		fsm/fsmpb/fsm.proto

# jepsen-lite. `make chaos` runs every nemesis and the hostile client
# (--nemesis all,hostile) for CHAOS_DURATION against the real binaries and
# writes the report (summary.md, history.jsonl, logs/) to CHAOS_OUT; it exits
# non-zero on a violation. As root every process gets its
# own network namespace (which needs iproute2 and nftables or iptables:
# tools-chaos installs them); otherwise jepsen-lite falls back to a user-space
# proxy per link and says so in the report. `make test-chaos` runs the short
# variant and the bug self-tests that `make test` runs too.
CHAOS_DURATION ?= 180s
CHAOS_SEED     ?= 1
CHAOS_OUT      ?= $(BIN)/chaos-report

tools-chaos:
	@if [ "$$(id -u)" != 0 ]; then \
		echo "tools-chaos: not root: jepsen-lite will use its user-space proxy instead of network namespaces"; \
	elif ! command -v ip >/dev/null || ! { command -v nft >/dev/null || command -v iptables >/dev/null; }; then \
		echo "tools-chaos: installing iproute2 and nftables"; \
		{ apt-get update -qq && apt-get install -y -qq iproute2 nftables; } || \
			echo "tools-chaos: could not install them: jepsen-lite will use its user-space proxy"; \
	fi

chaos: tools-chaos tools-s3
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES)) ./cmd/jepsen-lite
	$(BIN)/jepsen-lite --bin $(BIN) --duration $(CHAOS_DURATION) --nemesis all,hostile --seed $(CHAOS_SEED) --items 1500 --out $(CHAOS_OUT)
	$(MAKE) chaos-federation

# make chaos-federation: the federation scenario (docs/CHAOS.md) on its own
# (a parent cluster and a peer cluster, 6 replicas; about two minutes),
# its report in FED_CHAOS_OUT. make chaos runs it after the chaos scenario.
FED_CHAOS_DURATION ?= 60s
FED_CHAOS_OUT      ?= $(BIN)/chaos-federation-report

chaos-federation: tools-chaos
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES)) ./cmd/jepsen-lite
	$(BIN)/jepsen-lite --bin $(BIN) --scenario federation --duration $(FED_CHAOS_DURATION) --seed $(CHAOS_SEED) --items 300 --out $(FED_CHAOS_OUT)

test-chaos: tools-chaos tools-s3
	$(GO) test -count=1 -timeout 10m -v -run 'TestChaos|TestStaleLeader' ./cmd/jepsen-lite/ ./jepsen-lite/runner/

# A real S3-compatible server for the store's tests (store/s3test starts it
# on loopback): versitygw, built into .tools/ with go install. Tests skip,
# saying why, where it is missing.
VERSITYGW_VERSION := v1.8.0

tools-s3: $(TOOLS)/versitygw

$(TOOLS)/versitygw:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

# The digits data set (training runs, batch/train, gpu/mlp and worker/train
# tests): scikit-learn's digits.csv.gz taken from Debian's python3-sklearn
# package with apt-get download and dpkg -x in a temporary directory (nothing
# is installed; the package index is refreshed only when the download
# fails), keeping only that file in $(DATA_DIR) (git-ignored).
DATA_DIR := $(CURDIR)/.data
DIGITS   := $(DATA_DIR)/digits.csv.gz

data: $(DIGITS)

$(DIGITS):
	@mkdir -p $(DATA_DIR)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; chmod 755 "$$tmp"; cd "$$tmp"; \
	if ! apt-get download python3-sklearn; then \
		apt-get update -qq && apt-get download python3-sklearn; \
	fi; \
	dpkg -x python3-sklearn_*.deb x; \
	f=$$(find x -path '*/sklearn/datasets/data/digits.csv.gz' | head -n 1); \
	if [ -z "$$f" ]; then echo "data: python3-sklearn has no sklearn/datasets/data/digits.csv.gz"; exit 1; fi; \
	cp "$$f" "$@.tmp" && mv "$@.tmp" "$@"
	@echo "data: $(DIGITS)"

# The exec backend's PyTorch example (examples/exec/digits_torch.py): PyTorch
# comes from Debian's python3-torch and imports under /usr/bin/python3 (a
# python3 earlier on PATH may not see Debian's packages); tools-torch
# installs it when missing. exec-digits trains the example's model on the
# digits data set into $(TORCH_MODEL) (TorchScript) and writes the held-out
# images as a rollout input file, $(TORCH_INPUTS). Where PyTorch cannot be
# installed both say so and succeed, and the example's test skips saying why
# (under CI=true it fails).
TORCH_PYTHON := /usr/bin/python3
TORCH_MODEL  := $(DATA_DIR)/digits_torch.pt
TORCH_INPUTS := $(DATA_DIR)/digits_heldout.jsonl

tools-torch:
	@if ! $(TORCH_PYTHON) -c 'import torch' 2>/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "tools-torch: installing python3-torch"; \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch; } || \
				echo "tools-torch: could not install python3-torch: the PyTorch example's test will skip (and fail under CI=true)"; \
		else \
			echo "tools-torch: not root and no PyTorch under $(TORCH_PYTHON): the PyTorch example's test will skip (and fail under CI=true)"; \
		fi; \
	fi

exec-digits: data tools-torch
	@if $(TORCH_PYTHON) -c 'import torch' 2>/dev/null; then \
		$(TORCH_PYTHON) examples/exec/digits_train.py --data $(DIGITS) --model $(TORCH_MODEL) --inputs $(TORCH_INPUTS); \
	else \
		echo "exec-digits: no PyTorch under $(TORCH_PYTHON): the model was not trained"; \
	fi

# GPU kernels. `make ptx` compiles the CUDA C under gpu/kernels to PTX for
# sm_80 with Debian's clang-19 (no CUDA toolkit); the PTX is committed and
# embedded, and a test checks that it matches a fresh compile wherever
# clang-19 is installed. tools-gpu installs g++, which the tests use to build
# the test CUDA driver (gpu/cudatest) from the same sources.
CLANG_CUDA  ?= clang-19
PTX_FLAGS   := -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O2 -S
PTX_MODULES := gemm ops

tools-ptx:
	@if ! command -v $(CLANG_CUDA) >/dev/null; then \
		echo "installing clang-19"; \
		apt-get update -qq && apt-get install -y -qq clang-19; \
	fi

ptx: tools-ptx
	cd gpu/kernels && for m in $(PTX_MODULES); do $(CLANG_CUDA) $(PTX_FLAGS) -o $$m.ptx $$m.cu || exit 1; done

# bench-gpu: our GEMM kernel against cuBLAS on the GPU (gpu/benchgpu); on a
# machine without one it prints "no GPU" and the reason (GPU_REQUIRE=1 makes
# that a failure).
bench-gpu:
	$(GO) run ./gpu/benchgpu $(BENCH_GPU_FLAGS)

tools-gpu:
	@if ! command -v g++ >/dev/null; then \
		echo "installing g++ (for the test CUDA driver)"; \
		apt-get update -qq && apt-get install -y -qq g++; \
	fi

# gpu-check (run by make test): NVIDIA's own tools on the GPU path, with no
# GPU (docs/GPU.md). gpu/gpucheck/fetch-nvidia.sh downloads Debian's non-free
# nvidia-cuda-toolkit, libcuda1 and libnvidia-ptxjitcompiler1 through a
# private apt configuration (the system's is only read) and unpacks ptxas
# and libcuda.so.1 into NVIDIA_CACHE, installing nothing. Then gpu/gpucheck
# assembles every kernel for sm_80, sm_86, sm_89 and sm_90, fails on any
# spill, stack frame or shared memory over the limit, and writes the
# registers/shared memory/occupancy table into docs/GPU.md (under CI=true
# it only checks that table: a stale one fails); and the loader's tests
# run against the real libcuda.so.1. Where the download cannot happen it
# says why and skips; under CI=true that is a failure.
NVIDIA_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rollout-nvidia

gpu-check: tools-gpu
	@set -e; \
	if ! bash gpu/gpucheck/fetch-nvidia.sh "$(NVIDIA_CACHE)"; then \
		if [ "$(CI)" = true ]; then echo "gpu-check: could not fetch NVIDIA's ptxas and libcuda.so.1 (reason above), and CI=true: failing"; exit 1; fi; \
		echo "gpu-check: SKIPPED: could not fetch NVIDIA's ptxas and libcuda.so.1 (reason above)"; exit 0; \
	fi; \
	$(GO) run ./gpu/gpucheck -ptxas "$(NVIDIA_CACHE)/bin/ptxas" -doc docs/GPU.md $(if $(filter true,$(CI)),,-write); \
	GPU_CHECK_REQUIRE=1 ROLLOUT_PTXAS="$(NVIDIA_CACHE)/bin/ptxas" ROLLOUT_NVIDIA_LIBCUDA="$(NVIDIA_CACHE)/lib/libcuda.so.1" \
		$(GO) test -count=1 -run 'TestNVIDIADriverLibrary|TestNoDriver|TestCommittedPTXAssemblesWithoutSpills|TestAssembleReportsPTXASErrors|TestDocTableIsFresh' ./gpu/cuda/ ./gpu/ptxas/ ./gpu/gpucheck/

# The official openai npm package, pinned, for the tests that drive an
# OpenAI-compatible HTTP server with the real SDK (cmd/e2e/npmsdk runs
# their .mjs scripts with node): installed with npm into $(NPM_DIR) (git-ignored)
# when its package.json does not say $(OPENAI_NPM_VERSION); Debian's nodejs and
# npm are installed first where node or npm is missing. Present, it costs a
# grep. The tests fail, naming this target, where the package is missing.
# (7.55.0 asks for node >= 22 in its engines field and runs on Debian's node 20;
# npm's warning about it is silenced with --loglevel=error.)
OPENAI_NPM_VERSION := 7.55.0
NPM_DIR            := $(TOOLS)/npm

tools-npm:
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
		if [ "$$(id -u)" != 0 ]; then echo "tools-npm: node or npm is missing and this is not root: install Node.js (>= 18) with npm"; exit 1; fi; \
		echo "tools-npm: installing nodejs and npm"; \
		apt-get update -qq && apt-get install -y -qq nodejs npm; \
	fi
	@if ! grep -qs '"version": "$(OPENAI_NPM_VERSION)"' $(NPM_DIR)/node_modules/openai/package.json; then \
		echo "tools-npm: installing openai@$(OPENAI_NPM_VERSION) into $(NPM_DIR)"; \
		mkdir -p $(NPM_DIR) && printf '{"private": true}\n' > $(NPM_DIR)/package.json && rm -f $(NPM_DIR)/package-lock.json && \
		npm install --prefix $(NPM_DIR) --no-audit --no-fund --save-exact --loglevel=error openai@$(OPENAI_NPM_VERSION); \
	fi

# The dashboard's browser test (cmd/e2e/dashboard TestDashboardBrowser) drives
# Debian's headless Chromium; it skips, saying why, where Chromium is
# missing, except under CI=true, where it fails.
tools-browser:
	@if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "tools-browser: installing chromium"; \
			{ apt-get update -qq && apt-get install -y -qq chromium; } || \
				echo "tools-browser: could not install chromium: the dashboard's browser test will skip (and fail under CI=true)"; \
		else \
			echo "tools-browser: not root and no chromium: the dashboard's browser test will skip (and fail under CI=true)"; \
		fi; \
	fi

clean:
	rm -rf $(BIN)

# Containers (docs/DEPLOY.md). tools-docker installs Debian's docker.io and
# docker-compose (v1) where they are missing and starts dockerd in the
# background (log: bin/dockerd.log) where no daemon answers: the images and
# the compose test need one. `make image` builds the images from
# deploy/docker/Dockerfile offline (deploy/docker/image.sh: the binaries and
# a static versitygw built here, a base image holding this host's C library,
# no registry asked for anything) as NAME:$(IMAGE_VERSION) and NAME:latest,
# and prints their sizes. `make compose-test` brings up deploy/compose and
# runs its end-to-end test (go test -tags compose ./deploy/compose/).
DOCKER        ?= /usr/bin/docker
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

tools-docker:
	@if [ ! -x $(DOCKER) ] || ! command -v docker-compose >/dev/null; then \
		if [ "$$(id -u)" != 0 ]; then echo "tools-docker: $(DOCKER) or docker-compose is missing and this is not root: install docker.io and docker-compose"; exit 1; fi; \
		echo "tools-docker: installing docker.io and docker-compose"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose; \
	fi
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then echo "tools-docker: no Docker daemon answers and this is not root: start dockerd"; exit 1; fi; \
		echo "tools-docker: starting dockerd (log: $(BIN)/dockerd.log)"; \
		mkdir -p $(BIN); nohup dockerd >$(BIN)/dockerd.log 2>&1 & \
		for i in $$(seq 1 60); do $(DOCKER) info >/dev/null 2>&1 && break; sleep 1; done; \
		$(DOCKER) info >/dev/null 2>&1 || { echo "tools-docker: dockerd did not answer within 60 s:"; tail -n 20 $(BIN)/dockerd.log; exit 1; }; \
	fi

image: tools-docker
	GO=$(GO) DOCKER=$(DOCKER) VERSION=$(IMAGE_VERSION) VERSITYGW_VERSION=$(VERSITYGW_VERSION) OUT=$(BIN)/image bash deploy/docker/image.sh

compose-test: image tools-npm
	ROLLOUT_IMAGE_TAG=$(IMAGE_VERSION) DOCKER=$(DOCKER) $(GO) test -tags compose -count=1 -v -timeout 15m ./deploy/compose/
