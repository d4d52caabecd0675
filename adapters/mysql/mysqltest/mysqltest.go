// Package mysqltest is the conformance harness of the MySQL adapter: each
// check gets a database of its own on a server testserver finds.
package mysqltest

import (
	"context"
	"log/slog"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/spec"
)

// Target is the MySQL adapter's conformance target: each check gets its
// own database; the second handle is a separate connection pool, as a
// second worker process would have. With manualClock the suite moves the
// stores' clock itself (Options.Clock, bound as the database's time);
// without, the database server's clock decides, as in production. It
// declares leases, which mysql.Store implements (CAP-001); a second handle
// on the same database (CAP-002); with manualClock, the clock every handle
// binds as the database's time (CAP-003); and the faults of a
// faultproxy.Proxy that every handle connects through (FAULT-*).
func Target(s *scratch.Server, manualClock bool) conformance.Target {
	return target(s, manualClock, nil)
}

// TargetRestarting is Target on a server of the test's own that the
// harness may also kill and start again (the restart fault, FAULT-002).
// Never give it a server that other tests use.
func TargetRestarting(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	t := target(s, manualClock, r)
	t.Name = "mysql (private server)"
	t.Capabilities.Faults = faultproxy.FaultsWithRestarts
	return t
}

func target(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	return conformance.Target{
		Name:         "mysql",
		StoreVersion: "mysql/" + s.Source,
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock, Faults: faultproxy.Faults},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			name, err := s.CreateDatabase(ctx)
			if err != nil {
				return nil, err
			}
			h := &harness{server: s, db: name}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Now())
			}
			if h.dsn, h.proxy, err = throughProxy(s.DSN(name)); err != nil {
				s.DropDatabase(ctx, name)
				return nil, err
			}
			h.faults = h.proxy
			if r != nil {
				h.faults = h.proxy.WithRestarts(r)
			}
			if h.store, err = h.open(ctx); err != nil {
				h.proxy.Close()
				s.DropDatabase(ctx, name)
				return nil, err
			}
			return h, nil
		},
	}
}

// throughProxy starts a proxy to dsn's server and returns dsn pointed at it.
func throughProxy(dsn string) (string, *faultproxy.Proxy, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", nil, err
	}
	p, err := faultproxy.Start(cfg.Addr)
	if err != nil {
		return "", nil, err
	}
	cfg.Addr = p.Addr()
	return cfg.FormatDSN(), p, nil
}

type harness struct {
	server  *scratch.Server
	db      string
	dsn     string // through proxy
	proxy   *faultproxy.Proxy
	faults  conformance.FaultInjector // the proxy, and restarts where declared
	clock   *conformance.ManualClock  // shared by every handle
	store   *mysql.Store
	handles []*mysql.Store
}

func (h *harness) open(ctx context.Context) (*mysql.Store, error) {
	return mysql.Open(ctx, mysql.Options{DSN: h.dsn, MaxOpenConns: 16, Logger: slog.New(slog.DiscardHandler),
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

func (h *harness) StartFault(ctx context.Context, p conformance.FaultParams) error {
	return h.faults.StartFault(ctx, p)
}

func (h *harness) EndFault(ctx context.Context) error { return h.faults.EndFault(ctx) }

func (h *harness) Close(ctx context.Context) error {
	h.faults.EndFault(ctx)
	for _, s := range append(h.handles, h.store) {
		s.Close()
	}
	h.proxy.Close()
	return h.server.DropDatabase(ctx, h.db)
}
