package memory_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
	"github.com/runstate/runstate/internal/testsupport/watchtest"
)

func TestConformance(t *testing.T) { conformance.Run(t, memorytest.Target(true)) }

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the manual-clock run covers the same rules")
	}
	conformance.Run(t, conformance.Repeated(memorytest.Target(false)))
}

// A parked run coming due wakes the watchers of runnable runs, as a write
// would: workers need not poll for timers.
func TestADueRunWakesTheWatchers(t *testing.T) {
	watchtest.DueRunsWakeWatchers(t, memorytest.Open(t, nil))
}

// Timers coming due at one instant are claimed as the queue would take
// them, by workers racing for them, without a failed claim.
func TestTimersDueTogetherAreClaimedInOrder(t *testing.T) {
	benchutil.DueTogether(t, memorytest.Open(t, nil), 200, 4)
}
