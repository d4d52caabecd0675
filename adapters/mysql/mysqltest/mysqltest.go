// Package mysqltest is the conformance harness of the MySQL adapter: each
// check gets a database of its own on a server testserver finds.
package mysqltest

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/mysql/testserver"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/spec"
)

// Target is the MySQL adapter's conformance target: each check gets its
// own database; the second handle is a separate connection pool, as a
// second worker process would have. With manualClock the suite shifts the
// database clock the stores read (a bound offset, 0 in production).
func Target(s *testserver.Server, manualClock bool) conformance.Target {
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
			if h.store, err = h.open(ctx); err != nil {
				s.DropDatabase(ctx, name)
				return nil, err
			}
			return h, nil
		},
	}
}

type harness struct {
	server  *testserver.Server
	db      string
	shift   atomic.Int64
	store   *mysql.Store
	handles []*mysql.Store
}

func (h *harness) open(ctx context.Context) (*mysql.Store, error) {
	return mysql.Open(ctx, mysql.Options{DSN: h.server.DSN(h.db), MaxOpenConns: 16, Logger: slog.New(slog.DiscardHandler),
		TimeShift: func() time.Duration { return time.Duration(h.shift.Load()) }})
}

func (h *harness) Store() spec.RunStateStore { return h.store }

func (h *harness) OpenHandle(ctx context.Context) (spec.RunStateStore, error) {
	s, err := h.open(ctx)
	if err == nil {
		h.handles = append(h.handles, s)
	}
	return s, err
}

func (h *harness) Advance(d time.Duration) { h.shift.Add(int64(d)) }

func (h *harness) Close(ctx context.Context) error {
	for _, s := range append(h.handles, h.store) {
		s.Close()
	}
	return h.server.DropDatabase(ctx, h.db)
}
