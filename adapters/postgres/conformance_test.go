package postgres_test

import (
	"testing"

	"github.com/runstate/runstate/adapters/postgres/pgtest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, pgtest.Target(sqltest.Postgres.Find(t), true))
}

func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real lease TTLs; the shifted-clock run covers the same rules")
	}
	conformance.Run(t, conformance.Repeated(pgtest.Target(sqltest.Postgres.Find(t), false)))
}

// The FAULT rules with restarts, on a server of this test's own: the
// harness kills it (SIGKILL to the postmaster and its backends) and starts
// it again on its data directory.
func TestConformanceAcrossRestarts(t *testing.T) {
	private := sqltest.Postgres.StartPrivate(t)
	conformance.Run(t, pgtest.TargetRestarting(private.Scratch, true, private), "FAULT")
}
