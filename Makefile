# rollout — build, test, demo.
#
#   make demo    a local 3-replica cluster and 3 workers run examples/prompts.jsonl,
#                with the leader killed part-way (the README's first command)
#   make test    the whole test suite (what CI runs)
#   make bench   benchmarks (ratios measured in one run)
#   make proto   regenerate the committed protobuf code with the pinned toolchain
#   make chaos   the jepsen-lite partition harness

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOLS := $(CURDIR)/.tools

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTOC_VERSION_PREFIX      := libprotoc 3.21

BINARIES := rollout-coord rollout-worker rollout

.PHONY: all build demo test test-short bench proto tools-proto clean fuzz vet

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))

demo: build
	$(BIN)/rollout demo --bin $(BIN) --input examples/prompts.jsonl

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 12m ./...

test-short:
	$(GO) test -short -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./fsm/ ./raftnode/ ./api/server/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzApply -fuzztime 30s ./fsm/
	$(GO) test -run '^$$' -fuzz FuzzRestore -fuzztime 30s ./fsm/

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

clean:
	rm -rf $(BIN)
