package memory

import (
	"context"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
)

// The kit's own claim-next serves every driver without a NextClaimer (the
// filestore example is one). It runs here on the memory driver with its
// NextClaimer hidden, against every rule, the concurrent ones included.
func TestConformanceWithTheKitsClaimNext(t *testing.T) {
	conformance.Run(t, conformance.Target{
		Name:         "memory through the kit's claim-next",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			clock := conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			s, err := Open(ctx, Options{Clock: clock})
			if err != nil {
				return nil, err
			}
			// Embedding the interfaces promotes their methods alone: the
			// Driver's and what it keeps (driver.Keeper).
			withoutClaimNext := struct {
				driver.Driver
				driver.Keeper
			}{s.data, s.data}
			return &kitHarness{store: driver.Wrap(withoutClaimNext), memory: s, clock: clock}, nil
		},
	})
}

type kitHarness struct {
	store  runstate.Store
	memory *Store
	clock  *conformance.ManualClock
}

func (h *kitHarness) Store() runstate.RunStateStore                              { return h.store }
func (h *kitHarness) OpenHandle(context.Context) (runstate.RunStateStore, error) { return h.store, nil }
func (h *kitHarness) Advance(d time.Duration)                                    { h.clock.Advance(d) }
func (h *kitHarness) Close(context.Context) error                                { return h.memory.Close() }
