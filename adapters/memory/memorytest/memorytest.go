// Package memorytest is the conformance harness of the memory adapter,
// shared by its tests and cmd/conformance-runner, and the store tests of
// other packages open.
package memorytest

import (
	"context"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
)

// Open opens a memory store that reads clock (nil: the system clock) and
// closes it when tb ends.
func Open(tb testing.TB, clock runstate.Clock) *memory.Store {
	tb.Helper()
	s, err := memory.Open(context.Background(), memory.Options{Clock: clock})
	if err != nil {
		tb.Fatalf("open memory store: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Target returns the memory adapter's conformance target. With a manual
// clock the suite advances time; with the system clock it sleeps through
// real lease TTLs, as it must for out-of-process stores. It declares leases,
// which memory.Store implements (CAP-001); a second handle, the same store
// (CAP-002); and, with manualClock, the clock the store reads (CAP-003).
func Target(manualClock bool) conformance.Target {
	return conformance.Target{
		Name:         "memory",
		StoreVersion: "builtin",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			h := &harness{}
			var opts memory.Options
			if manualClock {
				h.clock = conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
				opts.Clock = h.clock
			}
			var err error
			h.store, err = memory.Open(ctx, opts)
			return h, err
		},
	}
}

// harness gives each check a fresh store; the second handle shares its
// data, as a second worker in the same process would.
type harness struct {
	store *memory.Store
	clock *conformance.ManualClock
}

func (h *harness) Store() runstate.RunStateStore                              { return h.store }
func (h *harness) OpenHandle(context.Context) (runstate.RunStateStore, error) { return h.store, nil }
func (h *harness) Advance(d time.Duration)                                    { h.clock.Advance(d) }
func (h *harness) Close(context.Context) error                                { return h.store.Close() }

// WithoutNextPages returns h with its store's listing broken: ListRuns
// never offers a next page, so that every rule or measurement that reads
// past a first page fails on it. For the tests of what a broken store gets.
func WithoutNextPages(h conformance.Harness) conformance.Harness { return noNextPagesHarness{h} }

type noNextPagesHarness struct{ conformance.Harness }

func (h noNextPagesHarness) Store() runstate.RunStateStore { return noNextPages{h.Harness.Store()} }

// noNextPages is a store whose ListRuns never offers a next page.
type noNextPages struct{ runstate.RunStateStore }

func (s noNextPages) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	page, err := s.RunStateStore.ListRuns(ctx, p)
	page.NextCursor = ""
	return page, err
}
