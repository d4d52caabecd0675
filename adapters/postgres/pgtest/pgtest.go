// Package pgtest is the conformance harness of the PostgreSQL adapter:
// each check gets a schema of its own in a database testserver finds.
package pgtest

import (
	"context"
	"log/slog"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
)

// Target is the PostgreSQL adapter's conformance target: each check gets
// its own schema; the second handle is a separate connection pool, as a
// second worker process would have. With manualClock the suite moves the
// stores' clock itself (Options.Clock, bound as the database's time);
// without, the database server's clock decides, as in production. It
// declares leases, which postgres.Store implements (CAP-001); a second
// handle on the same schema (CAP-002); and, with manualClock, the clock
// every handle binds as the database's time (CAP-003); and, for a server
// reached over TCP without name-checked TLS, the faults of a
// faultproxy.Proxy that every handle connects through (FAULT-*). Another
// server is reached directly, without faults.
func Target(s *scratch.Server, manualClock bool) conformance.Target {
	return target(s, manualClock, nil)
}

// TargetRestarting is Target on a server of the test's own that the
// harness may also kill and start again (the restart fault, FAULT-002).
// Never give it a server that other tests use.
func TargetRestarting(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	t := target(s, manualClock, r)
	t.Name = "postgres (private server)"
	return t
}

func target(s *scratch.Server, manualClock bool, r faultproxy.Restarter) conformance.Target {
	addr, proxyErr := s.ProxyAddr()
	caps := conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock, Faults: faultproxy.FaultsFor(proxyErr, r)}
	return conformance.Target{
		Name:         "postgres",
		StoreVersion: "postgres/" + s.Source,
		Capabilities: caps,
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			h := &harness{server: s, schema: s.NewSchemaName(), dsn: s.DSN(), FaultInjector: faultproxy.NoFaults}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Now())
			}
			var err error
			if proxyErr == nil {
				if h.proxy, err = faultproxy.Start(addr); err != nil {
					return nil, err
				}
				if h.dsn, err = s.DSNVia(h.proxy.Addr()); err != nil {
					h.proxy.Close()
					return nil, err
				}
				h.FaultInjector = h.proxy
				if r != nil {
					h.FaultInjector = h.proxy.WithRestarts(r)
				}
			}
			if h.store, err = h.open(ctx, true); err != nil {
				if h.proxy != nil {
					h.proxy.Close()
				}
				return nil, err
			}
			return h, nil
		},
	}
}

type harness struct {
	server *scratch.Server
	schema string
	dsn    string            // through the proxy, where there is one
	proxy  *faultproxy.Proxy // nil for a server a proxy cannot reach
	// The proxy, with restarts where declared; NoFaults without a proxy.
	conformance.FaultInjector
	clock   *conformance.ManualClock // shared by every handle
	store   *postgres.Store
	handles []*postgres.Store
}

// open opens a handle on the check's schema; the first one creates it and
// drops it when closed.
func (h *harness) open(ctx context.Context, first bool) (*postgres.Store, error) {
	// Announcing runnable runs is on, so that every rule holds with the
	// statement it adds to writes.
	return postgres.Open(ctx, postgres.Options{DSN: h.dsn, Schema: h.schema, ScratchSchema: first, MaxOpenConns: 8,
		NotifyRunnable: true, Logger: slog.New(slog.DiscardHandler), Clock: h.storeClock()})
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
	s, err := h.open(ctx, false)
	if err == nil {
		h.handles = append(h.handles, s)
	}
	return s, err
}

func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }

func (h *harness) Close(ctx context.Context) error {
	h.EndFault(ctx)
	for _, s := range h.handles {
		s.Close()
	}
	err := h.store.Close() // drops the schema
	if h.proxy != nil {
		h.proxy.Close()
	}
	return err
}
