package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/spec"
)

// harness gives each check a fresh store; the second handle shares its
// data, as a second worker in the same process would.
type harness struct {
	store *memory.Store
	clock *conformance.ManualClock
}

func (h *harness) Store() spec.RunStateStore                              { return h.store }
func (h *harness) OpenHandle(context.Context) (spec.RunStateStore, error) { return h.store, nil }
func (h *harness) Advance(d time.Duration)                                { h.clock.Advance(d) }
func (h *harness) Close(context.Context) error                            { return h.store.Close() }

// Target returns the memory adapter's conformance target. With a manual
// clock the suite advances time; without, it sleeps through real TTLs.
func target(manualClock bool) conformance.Target {
	return conformance.Target{
		Name:         "memory",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock},
		NewHarness: func(context.Context) (conformance.Harness, error) {
			h := &harness{}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
				h.store = memory.New(memory.WithClock(h.clock))
			} else {
				h.store = memory.New()
			}
			return h, nil
		},
	}
}

func TestConformance(t *testing.T) { conformance.Run(t, target(true)) }

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the manual-clock run covers the same rules")
	}
	conformance.Run(t, target(false))
}
