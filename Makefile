# runstate — see README.md for the two commands a newcomer needs.
GO ?= go

.PHONY: run test lint bench conformance crash proto plugins

# The main job: run the bundled example workflow on the default (Badger) store.
run:
	$(GO) run ./cmd/demo-runner run examples/workflows/hello.yaml

# Every test, with the race detector (the suite runs concurrent workers).
test:
	$(GO) test -race -count=1 ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd examples/filestore && $(GO) vet ./...

# Benchmarks, each adapter side by side with its hand-written baseline.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Certify the in-memory reference store against every rule of docs/spec.md.
conformance:
	$(GO) run ./cmd/conformance-runner

# The Badger crash test with 200 SIGKILLs instead of the 20 of the regular suite.
crash:
	RUNSTATE_CRASH_KILLS=200 $(GO) test -count=1 -run TestCrash -v ./adapters/badger/

# Regenerates plugin/proto from runstate.proto with pinned generators
# (protoc from Debian's protobuf-compiler 3.21.12).
PROTOC_GEN_GO_VERSION      = v1.36.12
PROTOC_GEN_GO_GRPC_VERSION = v1.5.1
proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH="$(CURDIR)/bin:$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative plugin/proto/runstate.proto

# Plugin binaries of the reference adapters, in bin/.
plugins:
	$(GO) build -o bin/ ./cmd/runstate-plugin-memory ./cmd/runstate-plugin-badger ./cmd/runstate-plugin-mysql
