package badger_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/badger/badgertest"
	"github.com/runstate/runstate/conformance"
)

func TestConformance(t *testing.T) { conformance.Run(t, badgertest.Target(t.TempDir(), true)) }

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the manual-clock run covers the same rules")
	}
	conformance.Run(t, conformance.Repeated(badgertest.Target(t.TempDir(), false)))
}
