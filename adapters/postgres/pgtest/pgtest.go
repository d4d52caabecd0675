// Package pgtest is the conformance harness of the PostgreSQL adapter:
// each check gets a schema of its own in a database sqltest.Postgres finds.
package pgtest

import (
	"context"
	"log/slog"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/sqltarget"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
)

// Target is the PostgreSQL adapter's conformance target
// (sqltarget.Target): each check gets a schema of its own in s's database,
// and every handle a pool of its own that announces runnable runs. With
// manualClock the suite moves the stores' clock (Options.Clock); without,
// the server's clock decides. A server reached over TCP without
// name-checked TLS has the faults of a proxy (FAULT-*); another is
// reached directly, without faults.
func Target(s *scratch.Server, manualClock bool) conformance.Target {
	return sqltarget.Target(engine(s), manualClock, nil)
}

// TargetRestarting is Target on a PostgreSQL server of the test's own
// (sqltest.Postgres.StartPrivate); r may kill its postmaster and backends and
// start it again (FAULT-002). Never give it a shared server.
func TargetRestarting(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	return sqltarget.Target(engine(s), manualClock, r)
}

// TargetFailingOver is Target on a primary with a standby of the test's
// own (sqltest.StartPostgresPair), which failover kills and promotes
// (FAULT-009…012); s's DSN names both servers. It declares no other fault.
func TargetFailingOver(s *scratch.Server, manualClock bool, failover conformance.FaultInjector) conformance.Target {
	return sqltarget.TargetFailingOver(engine(s), manualClock, failover)
}

func engine(s *scratch.Server) sqltarget.Engine {
	return sqltarget.Engine{Name: "postgres", Source: s.Source, ProxyAddr: s.ProxyAddr,
		NewCheck: func(context.Context) (sqltarget.Check, error) { return schema{s, s.NewSchemaName()}, nil }}
}

// schema is a check's schema: the first handle creates it and drops it
// when closed.
type schema struct {
	server *scratch.Server
	name   string
}

func (c schema) DSN(via string) (string, error) {
	if via == "" {
		return c.server.DSN(), nil
	}
	return c.server.DSNVia(via)
}

func (c schema) Open(ctx context.Context, dsn string, clock runstate.Clock, first bool) (sqltarget.Store, error) {
	// Announcing runnable runs is on, so that every rule holds with the
	// statement it adds to writes.
	return postgres.Open(ctx, postgres.Options{DSN: dsn, Schema: c.name, ScratchSchema: first, MaxOpenConns: 8,
		NotifyRunnable: true, NotifyRuns: true, Logger: slog.New(slog.DiscardHandler), Clock: clock})
}

// Drop finishes what the first handle's Close began: it dropped the
// schema, within the 2 s a plugin host allows a plugin to stop, which a
// loaded machine may take more than for DDL; then the harness drops it,
// within its own close's time.
func (c schema) Drop(ctx context.Context, firstClosed error) error {
	if firstClosed == nil {
		return nil
	}
	return c.server.DropSchema(ctx, c.name)
}
