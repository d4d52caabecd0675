# runstate — see README.md for the two commands a newcomer needs.
GO ?= go

.PHONY: run test lint bench conformance crash

# The main job: certify the in-memory reference store against every rule of docs/spec.md.
run:
	$(GO) run ./cmd/conformance-runner

# Every test, with the race detector (the suite runs concurrent workers).
test:
	$(GO) test -race -count=1 ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# Benchmarks, each adapter side by side with its hand-written baseline.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

conformance: run

# The Badger crash test with 200 SIGKILLs instead of the 20 of the regular suite.
crash:
	RUNSTATE_CRASH_KILLS=200 $(GO) test -count=1 -run TestCrash -v ./adapters/badger/
