// Package mysqltest is the conformance harness of the MySQL adapter: each
// check gets a database of its own on a server testserver finds.
package mysqltest

import (
	"context"
	"log/slog"
	"time"

	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/spec"
)

// Target is the MySQL adapter's conformance target: each check gets its
// own database; the second handle is a separate connection pool, as a
// second worker process would have. With manualClock the suite moves the
// stores' clock itself (Options.Clock, bound as the database's time);
// without, the database server's clock decides, as in production. It
// declares leases, which mysql.Store implements (CAP-001); a second handle
// on the same database (CAP-002); and, with manualClock, the clock every
// handle binds as the database's time (CAP-003).
func Target(s *scratch.Server, manualClock bool) conformance.Target {
	return conformance.Target{
		Name:         "mysql",
		StoreVersion: "mysql/" + s.Source,
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			name, err := s.CreateDatabase(ctx)
			if err != nil {
				return nil, err
			}
			h := &harness{server: s, db: name}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Now())
			}
			if h.store, err = h.open(ctx); err != nil {
				s.DropDatabase(ctx, name)
				return nil, err
			}
			return h, nil
		},
	}
}

type harness struct {
	server  *scratch.Server
	db      string
	clock   *conformance.ManualClock // shared by every handle
	store   *mysql.Store
	handles []*mysql.Store
}

func (h *harness) open(ctx context.Context) (*mysql.Store, error) {
	return mysql.Open(ctx, mysql.Options{DSN: h.server.DSN(h.db), MaxOpenConns: 16, Logger: slog.New(slog.DiscardHandler),
		Clock: h.storeClock()})
}

// storeClock is the manual clock, or nil (the database's) without one.
func (h *harness) storeClock() spec.Clock {
	if h.clock == nil {
		return nil
	}
	return h.clock
}

func (h *harness) Store() spec.RunStateStore { return h.store }

func (h *harness) OpenHandle(ctx context.Context) (spec.RunStateStore, error) {
	s, err := h.open(ctx)
	if err == nil {
		h.handles = append(h.handles, s)
	}
	return s, err
}

func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }

func (h *harness) Close(ctx context.Context) error {
	for _, s := range append(h.handles, h.store) {
		s.Close()
	}
	return h.server.DropDatabase(ctx, h.db)
}
