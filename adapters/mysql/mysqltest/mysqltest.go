// Package mysqltest is the conformance harness of the MySQL adapter: each
// check gets a database of its own on a server testserver finds.
package mysqltest

import (
	"context"
	"log/slog"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/mysql"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
)

// Target is the MySQL adapter's conformance target: each check gets its
// own database; the second handle is a separate connection pool, as a
// second worker process would have. With manualClock the suite moves the
// stores' clock itself (Options.Clock, bound as the database's time);
// without, the database server's clock decides, as in production. It
// declares leases, which mysql.Store implements (CAP-001); a second handle
// on the same database (CAP-002); with manualClock, the clock every handle
// binds as the database's time (CAP-003); and, for a server reached over
// plain TCP, the faults of a faultproxy.Proxy that every handle connects
// through (FAULT-*). A server behind a socket or name-checked TLS is
// reached directly, without faults.
func Target(s *scratch.Server, manualClock bool) conformance.Target {
	return target(s, manualClock, nil)
}

// TargetRestarting is Target on a server of the test's own that the
// harness may also kill and start again (the restart fault, FAULT-002).
// Never give it a server that other tests use.
func TargetRestarting(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	t := target(s, manualClock, r)
	t.Name = "mysql (private server)"
	return t
}

func target(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	addr, proxyErr := s.ProxyAddr()
	caps := conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock, Faults: faultproxy.FaultsFor(proxyErr, r)}
	return conformance.Target{
		Name:         "mysql",
		StoreVersion: "mysql/" + s.Source,
		Capabilities: caps,
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			name, err := s.CreateDatabase(ctx)
			if err != nil {
				return nil, err
			}
			h := &harness{server: s, db: name, dsn: s.DSN(name), FaultInjector: faultproxy.NoFaults}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Now())
			}
			if proxyErr == nil {
				if h.proxy, err = faultproxy.Start(addr); err != nil {
					s.DropDatabase(ctx, name)
					return nil, err
				}
				h.dsn, h.FaultInjector = s.DSNVia(name, h.proxy.Addr()), h.proxy
				if r != nil {
					h.FaultInjector = h.proxy.WithRestarts(r)
				}
			}
			if h.store, err = h.open(ctx); err != nil {
				h.closeProxy()
				s.DropDatabase(ctx, name)
				return nil, err
			}
			return h, nil
		},
	}
}

type harness struct {
	server *scratch.Server
	db     string
	dsn    string            // through the proxy, where there is one
	proxy  *faultproxy.Proxy // nil for a server a proxy cannot reach
	// The proxy, with restarts where declared; NoFaults without a proxy.
	conformance.FaultInjector
	clock   *conformance.ManualClock // shared by every handle
	store   *mysql.Store
	handles []*mysql.Store
}

func (h *harness) open(ctx context.Context) (*mysql.Store, error) {
	return mysql.Open(ctx, mysql.Options{DSN: h.dsn, MaxOpenConns: 16, Logger: slog.New(slog.DiscardHandler),
		Clock: h.storeClock()})
}

// storeClock is the manual clock, or nil (the database's) without one.
func (h *harness) storeClock() runstate.Clock {
	if h.clock == nil {
		return nil
	}
	return h.clock
}

func (h *harness) Store() runstate.RunStateStore { return h.store }

func (h *harness) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	s, err := h.open(ctx)
	if err == nil {
		h.handles = append(h.handles, s)
	}
	return s, err
}

func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }

// closeProxy closes the proxy, where there is one.
func (h *harness) closeProxy() {
	if h.proxy != nil {
		h.proxy.Close()
	}
}

func (h *harness) Close(ctx context.Context) error {
	h.EndFault(ctx)
	for _, s := range append(h.handles, h.store) {
		s.Close()
	}
	h.closeProxy()
	return h.server.DropDatabase(ctx, h.db)
}
