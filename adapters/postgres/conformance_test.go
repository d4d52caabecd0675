package postgres_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/postgres/pgtest"
	"github.com/runstate/runstate/adapters/postgres/testserver"
	"github.com/runstate/runstate/conformance"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, pgtest.Target(testserver.Find(t), true))
}

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the shifted-clock run covers the same rules")
	}
	conformance.Run(t, pgtest.Target(testserver.Find(t), false))
}
