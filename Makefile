# runstate — see README.md for the two commands a newcomer needs.
GO ?= go

.PHONY: run test check lint buf protocheck stress bench bench-river perf-report conformance crash soak fuzz mutation proto plugins gateway

# The main job: run the bundled example workflow on the default (Badger) store.
run:
	$(GO) run ./cmd/demo-runner run examples/workflows/hello.yaml

# Every test, as three go test commands side by side (internal/cmd/testrun
# merges their output), because one command builds every package one way
# and the race detector sees only the test binary's own process
# (docs/testing.md, "The race detector"):
# - under -race, every test whose code under test runs in the test's
#   process with concurrency of its own: the units, and each store's
#   in-process suite on the controlled clock;
# - without it, the packages whose tests drive other processes (plugin and
#   gateway processes, earlier releases, the Node.js plugin, the guide's
#   module) or a store whose code has no goroutine or lock of its own
#   (MySQL's and etcd's: the server does the concurrency), NORACE_PKGS;
# - and without it, the suites that run code the race pass runs again, on
#   a real clock, across restarts, failovers or a member's loss, through a
#   plugin process, or as a fleet of worker processes under chaos
#   (NORACE_TESTS, in NORACE_TEST_PKGS, skipped by the race pass).
# gotestsum prints each test as it ends, and the failures again at the
# end; then go test's closing line of every package follows, and the
# report of what ran where and what it cost (internal/cmd/testreport),
# which, under CI=true, fails the run when a proof of
# docs/testing/baseline.json is lost.
# Packages are named longest first, so that they start first: go test
# runs them in the order given.
NORACE_PKGS := ./cmd/conformance-runner ./internal/compat ./adapters/etcd ./adapters/mysql ./cmd/runstate-gateway ./gateway/gatewaytest
NORACE_TESTS := RealClock|AcrossRestarts|AcrossFailovers|OverTwentyFailovers|UnderChaos|^TestConformanceMemoryPlugin$$|^TestConformanceMySQLPlugin$$|PluginServesItsStore$$
NORACE_TEST_PKGS := ./cmd/demo-runner ./adapters/postgres ./plugin ./adapters/badger ./adapters/memory
RACE_FIRST := ./conformance ./cmd/demo-runner ./adapters/postgres ./plugin ./adapters/badger ./gateway
# Each package's binary may run 40 minutes: a guard against a hang, not a
# budget.
TEST_TIMEOUT ?= 40m
TESTJSON ?= $(or $(TMPDIR),/tmp)/runstate-test-$(shell id -u).json
# What each package's process tree spent, for the report's CPU columns
# (internal/cmd/testcpu, go test's -exec), and the report itself.
TESTCPU ?= $(or $(TMPDIR),/tmp)/runstate-test-cpu-$(shell id -u).jsonl
TESTREPORT ?= $(or $(TMPDIR),/tmp)/runstate-test-report-$(shell id -u).md
TEST_BASELINE := docs/testing/baseline.json
# Each test binary, and every process it starts, runs one P (GOMAXPROCS):
# make test runs several packages at once, each with processes of its
# own, so they share the cores anyway, and the Go scheduler's idle Ps
# spin looking for work on cores the others need (Badger's suite under
# the race detector: 13.3 CPU s with one P, 17.4 with two). The builds
# those processes run take every core again (internal/testsupport/gocmd).
# make stress and make check keep the default.
TEST_GOMAXPROCS ?= 1
GOTEST = $(GO) test -json -exec 'env GOMAXPROCS=$(TEST_GOMAXPROCS) $(CURDIR)/bin/testcpu' -count=1 -timeout $(TEST_TIMEOUT)
test:
	@$(GO) build -o bin/ ./internal/cmd/testcpu ./internal/cmd/testrun || exit 1; rm -f $(TESTCPU); \
	race_pkgs=$$($(GO) list $(RACE_FIRST) ./... | awk '!seen[$$0]++' | grep -vxF "$$($(GO) list $(NORACE_PKGS))"); \
	status=0; RUNSTATE_RULE_COVERAGE=1 RUNSTATE_TEST_CPU=$(TESTCPU) $(GO) tool gotestsum --format testname --jsonfile $(TESTJSON) --raw-command -- bin/testrun \
		"$(GOTEST) -race -p 4 -skip '$(NORACE_TESTS)' $$(echo $$race_pkgs)" \
		"$(GOTEST) -p 2 -run '$(NORACE_TESTS)' $(NORACE_TEST_PKGS)" \
		"$(GOTEST) -p 3 $(NORACE_PKGS)" || status=$$?; \
	echo; echo "go test, per package:"; \
	sed -n 's/^{.*"Action":"output".*"Output":"\(\(ok\|FAIL\|?\) *\\t[^"]*\)\\n"}$$/\1/p' $(TESTJSON) | sed 's/\\t/\t/g'; \
	$(GO) run ./internal/cmd/testreport -json $(TESTJSON) -cpu $(TESTCPU) -baseline $(TEST_BASELINE) $(if $(filter true,$(CI)),-strict) > $(TESTREPORT) || status=$$?; \
	echo "what ran against which store, and what each package and test cost: $(TESTREPORT)"; \
	exit $$status

# The inner loop, before every commit (CONTRIBUTING.md): gofmt and go vet,
# then under the race detector the units of every package that runs in
# the test's process, the memory store's whole suite, and PostgreSQL's on
# the controlled clock. What sleeps through leases, starts processes and
# clusters, or kills them is make test's (docs/testing.md).
CHECK_PKGS := . ./driver ./conformance ./worker ./protocol ./tracker ./stores ./otelstore ./gateway \
	./adapters/memory ./adapters/badger ./adapters/internal/... ./internal/access ./internal/redact \
	./internal/procfs ./internal/rulecov ./internal/cmd/testreport ./internal/cmd/testrun ./docs
CHECK_SKIP := $(NORACE_TESTS)|^TestEveryMutantIsCaughtByItsRule$$|^TestSimulatedFaultsPassTheFaultRules$$
check: lint
	$(GO) test -race -short -count=1 -skip '$(CHECK_SKIP)' $(CHECK_PKGS)
	$(GO) test -race -count=1 -run '^TestConformance$$' ./adapters/postgres

# The flake hunt: the time-sensitive tests (chaos, real clocks, plugin and
# gateway processes, etcd and failover suites), each run N times under the
# race detector with a CPU burner on every core, and each one's failure
# rate. N defaults to as many runs as fit in 3 minutes per test; PKGS
# (comma-separated) and RUN (a regular expression) narrow the tests.
# Run it on the packages a change touches before handing the change in.
stress:
	$(GO) run ./internal/cmd/stress $(if $(KEEP),-keep) $(if $(N),-n $(N)) $(if $(PKGS),-pkgs '$(PKGS)') $(if $(RUN),-run '$(RUN)')

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd examples/filestore && $(GO) vet ./...

# buf, pinned, in bin/: the npm registry's @bufbuild/buf ships it prebuilt
# for each platform (tools/buf/package-lock.json pins it), which takes
# seconds where building it from source took minutes. .ci/run installs it
# before the tests, whose TestTheProtoPassesBufLintAndBreaking fails under
# CI=true without it.
BUF_VERSION = 1.75.0
buf:
	@[ "$$(bin/buf --version 2>/dev/null)" = "$(BUF_VERSION)" ] || { \
		(cd tools/buf && npm ci --no-audit --no-fund --loglevel=error) && mkdir -p bin && \
		ln -sf "$$(ls -d $(CURDIR)/tools/buf/node_modules/@bufbuild/buf-*/bin/buf | head -n 1)" bin/buf && \
		[ "$$(bin/buf --version)" = "$(BUF_VERSION)" ] || { echo "bin/buf is not buf $(BUF_VERSION): make tools/buf/package.json pin it"; exit 1; }; }

# The wire protocol's proto: buf lint (protocol/pb/buf.yaml) and buf
# breaking against the previous minor version's proto in protocol/testdata
# (docs/protocol.md, "Checking the proto"), as the test does.
protocheck: buf
	$(GO) test -count=1 -run '^TestTheProtoPassesBufLintAndBreaking$$' -v ./protocol

# Every benchmark of docs/performance.md, each beside its baseline measured
# in the same run: the adapters against hand-written transactions (MySQL
# also through a latency proxy, as across a network), the plugin boundary
# against plain grpc-go between processes, and the scale benchmarks among a
# million finished runs (RUNSTATE_SCALE_RUNS=100000 for a quicker pass).
# MySQL benchmarks use the server the tests use. About 25 minutes here.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 120m ./...

# runstate beside River on the same PostgreSQL, alternating the two, in a
# module of its own (benchmarks/river) so that runstate's go.mod never
# depends on River. RUNSTATE_POSTGRES_DSN names the server (default: the
# tests' postgres@127.0.0.1:5432/test); each run makes a fresh database.
# See docs/performance.md, "Beside River".
bench-river:
	cd benchmarks/river && $(GO) test -run '^$$' -bench . -count 3 -timeout 60m

# The portable benchmark (conformance-runner bench) of the Badger plugin,
# the MySQL, PostgreSQL and etcd stores and a store behind the gateway, each beside the memory
# and Badger reference stores: JSON, Markdown and a chart per target, in
# PERF_DIR. MYSQL_DSN names a server where scratch databases may be made,
# POSTGRES_DSN a database where scratch schemas may be.
PERF_DIR  ?= docs/perf
MYSQL_DSN ?= root@tcp(127.0.0.1:3306)/
POSTGRES_DSN ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable
# ETCD_ENDPOINTS names an etcd cluster where scratch key prefixes may be made.
ETCD_ENDPOINTS ?= 127.0.0.1:2379
perf-report: plugins gateway
	mkdir -p $(PERF_DIR)
	$(GO) build -o bin/ ./cmd/conformance-runner
	bin/conformance-runner bench --plugin bin/runstate-plugin-badger --config 'dir={{tempdir}}' --format json \
		--markdown $(PERF_DIR)/badger-plugin.md --chart $(PERF_DIR)/badger-plugin.svg > $(PERF_DIR)/badger-plugin.json
	bin/conformance-runner bench --adapter mysql --config 'dsn=$(MYSQL_DSN)' --format json \
		--markdown $(PERF_DIR)/mysql.md --chart $(PERF_DIR)/mysql.svg > $(PERF_DIR)/mysql.json
	bin/conformance-runner bench --adapter postgres --config 'dsn=$(POSTGRES_DSN)' --format json \
		--markdown $(PERF_DIR)/postgres.md --chart $(PERF_DIR)/postgres.svg > $(PERF_DIR)/postgres.json
	bin/conformance-runner bench --adapter etcd --config 'endpoints=$(ETCD_ENDPOINTS)' --format json \
		--markdown $(PERF_DIR)/etcd.md --chart $(PERF_DIR)/etcd.svg > $(PERF_DIR)/etcd.json
	bin/conformance-runner bench --gateway bin/runstate-gateway --config 'store=badger:{{tempdir}}/s' --format json \
		--markdown $(PERF_DIR)/gateway-badger.md --chart $(PERF_DIR)/gateway-badger.svg > $(PERF_DIR)/gateway-badger.json

# Certify the in-memory reference store against every rule of docs/spec.md.
conformance:
	$(GO) run ./cmd/conformance-runner

# The Badger crash test with 200 SIGKILLs instead of the 20 of the regular suite.
crash:
	RUNSTATE_CRASH_KILLS=200 $(GO) test -count=1 -run TestCrash -v ./adapters/badger/

# The many-workers chaos test for 10 minutes with 8 workers per store
# (MySQL, MySQL through its plugin, and Badger shared through the socket of
# whichever worker holds it), instead of the regular suite's
# 20 seconds with 4; then the stalled-worker tests for 40 and 20 rounds.
soak:
	RUNSTATE_SOAK=10m $(GO) test -count=1 -timeout 40m -run TestManyWorkersShareOneStoreUnderChaos -v ./cmd/demo-runner/
	RUNSTATE_STALL_ROUNDS=40 $(GO) test -count=1 -timeout 30m -run TestAStalled -v ./cmd/demo-runner/

# Each fuzz target for FUZZTIME, a duration (30s) or a count of inputs
# (20000x, as CI runs it) as go test's -fuzztime takes it (the saved corpora in testdata/fuzz run with
# every plain `go test` too). A failing input is saved under testdata/fuzz.
FUZZTIME ?= 30s
FUZZ_TARGETS = driver:FuzzPrepareCreate driver:FuzzApplyUpdate driver:FuzzCursors \
	protocol:FuzzCreateOverTheWire protocol:FuzzUpdateOverTheWire \
	protocol:FuzzSnapshotOverTheWire protocol:FuzzErrorOverTheWire
# The fuzzing engine sometimes ends a run with "context deadline exceeded"
# and no failing input (its coordinator missing its own deadline on a
# loaded machine): such a run is repeated once; any other failure stops.
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
		status=0; out=$$($(GO) test -run '^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) ./$$pkg 2>&1) || status=$$?; \
		echo "$$out"; \
		if [ $$status -ne 0 ] && echo "$$out" | grep -qx '    context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
			echo "fuzz $$name: the fuzzing engine missed its own deadline, with no failing input; once more"; \
			$(GO) test -run '^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) ./$$pkg; \
		elif [ $$status -ne 0 ]; then exit $$status; fi; \
	done

# Mutation testing of the contract (the root package runstate), the kit every store is built
# on (driver) and the reference store (adapters/memory) with a pinned gremlins: prints each package's test
# efficacy, the share of mutants the tests kill.
GREMLINS_VERSION = v0.6.0
mutation:
	GOBIN=$(CURDIR)/bin $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	GOFLAGS=-count=1 bin/gremlins unleash --timeout-coefficient 10 .
	GOFLAGS=-count=1 bin/gremlins unleash --timeout-coefficient 10 ./driver
	GOFLAGS=-count=1 bin/gremlins unleash --timeout-coefficient 10 ./adapters/memory

# Regenerates protocol/pb from runstate.proto with pinned generators
# (protoc from Debian's protobuf-compiler 3.21.12).
PROTOC_GEN_GO_VERSION      = v1.36.12
PROTOC_GEN_GO_GRPC_VERSION = v1.5.1
proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH="$(CURDIR)/bin:$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative protocol/pb/runstate.proto

# Plugin binaries of the reference adapters, in bin/.
plugins:
	$(GO) build -o bin/ ./cmd/runstate-plugin-memory ./cmd/runstate-plugin-badger ./cmd/runstate-plugin-mysql ./cmd/runstate-plugin-postgres ./cmd/runstate-plugin-etcd

# The gateway binary, in bin/.
gateway:
	$(GO) build -o bin/ ./cmd/runstate-gateway
