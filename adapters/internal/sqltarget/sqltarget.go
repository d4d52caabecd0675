// Package sqltarget is the conformance target of the SQL adapters
// (mysqltest, pgtest): each check gets a database or schema of its own
// on a shared server, every handle is a connection pool of its own, as a
// second worker process would have, and, for a server a proxy can reach,
// every handle connects through a faultproxy.Proxy. What the engines do
// differently, how a check's place is made, reached and dropped, is an
// Engine.
package sqltarget

import (
	"context"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
)

// Store is a handle on a check's database.
type Store interface {
	runstate.RunStateStore
	Close() error
}

// Engine is a SQL adapter's part of its conformance target.
type Engine struct {
	// Name names the target ("mysql").
	Name string
	// Source says where the server came from, for StoreVersion.
	Source string
	// ProxyAddr returns the server's TCP address for a proxy to forward
	// to, or why there is none.
	ProxyAddr func() (string, error)
	// NewCheck makes a check's database or schema (or its name).
	NewCheck func(ctx context.Context) (Check, error)
}

// Check is one conformance check's database or schema.
type Check interface {
	// DSN is the check's DSN, through a proxy at via (host:port) unless
	// via is empty.
	DSN(via string) (string, error)
	// Open opens a handle on dsn; first is the check's first handle.
	Open(ctx context.Context, dsn string, clock runstate.Clock, first bool) (Store, error)
	// Drop removes what NewCheck made, once every handle is closed;
	// firstClosed is what the first handle's Close returned.
	Drop(ctx context.Context, firstClosed error) error
}

// Target is e's conformance target. It declares leases (CAP-001); a
// second handle on the same database (CAP-002); with manualClock, the
// clock every handle binds as the database's time (CAP-003), else the
// database server's clock decides, as in production; and, for a server a
// proxy can reach, the faults of the proxy every handle connects through
// (FAULT-*), with restarts of the server when r is not nil (FAULT-002).
// Only a server of the test's own may be given with r.
func Target(e Engine, manualClock bool, r faultproxy.Restarter) conformance.Target {
	addr, proxyErr := e.ProxyAddr()
	t := target(e, manualClock, faultproxy.FaultsFor(proxyErr, r), func(ctx context.Context, h *harness) error { return h.connect(ctx, addr, proxyErr, r) })
	if r != nil {
		t.Name += " (private server)"
	}
	return t
}

// TargetFailingOver is e's conformance target on a replicated server
// whose harness fails over (conformance.FaultFailover): every handle
// connects by the check's DSN, which must name every server the primary
// may be, and no proxy stands between them, so that failover is the only
// fault. Only a server of the test's own may be given.
func TargetFailingOver(e Engine, manualClock bool, failover conformance.FaultInjector) conformance.Target {
	t := target(e, manualClock, []conformance.Fault{conformance.FaultFailover}, func(ctx context.Context, h *harness) (err error) {
		h.FaultInjector = failover
		if h.dsn, err = h.check.DSN(""); err != nil {
			return err
		}
		h.store, err = h.check.Open(ctx, h.dsn, h.storeClock(), true)
		return err
	})
	t.Name += " (primary and standby)"
	return t
}

// target is e's target declaring faults, each harness connected by connect.
func target(e Engine, manualClock bool, faults []conformance.Fault, connect func(context.Context, *harness) error) conformance.Target {
	return conformance.Target{
		Name:         e.Name,
		StoreVersion: e.Name + "/" + e.Source,
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: manualClock, Faults: faults},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			check, err := e.NewCheck(ctx)
			if err != nil {
				return nil, err
			}
			h := &harness{check: check, FaultInjector: faultproxy.NoFaults}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Now())
			}
			if err := connect(ctx, h); err != nil {
				h.closeProxy()
				check.Drop(ctx, nil)
				return nil, err
			}
			return h, nil
		},
	}
}

type harness struct {
	check Check
	dsn   string            // through the proxy, where there is one
	proxy *faultproxy.Proxy // nil for a server a proxy cannot reach
	// The proxy, with restarts where declared; NoFaults without a proxy.
	conformance.FaultInjector
	clock   *conformance.ManualClock // shared by every handle
	store   Store
	handles []Store
}

// connect starts the proxy, where the server has an address for one, and
// opens the first handle.
func (h *harness) connect(ctx context.Context, addr string, proxyErr error, r faultproxy.Restarter) (err error) {
	via := ""
	if proxyErr == nil {
		if h.proxy, err = faultproxy.Start(addr); err != nil {
			return err
		}
		via, h.FaultInjector = h.proxy.Addr(), h.proxy
		if r != nil {
			h.FaultInjector = h.proxy.WithRestarts(r)
		}
	}
	if h.dsn, err = h.check.DSN(via); err != nil {
		return err
	}
	h.store, err = h.check.Open(ctx, h.dsn, h.storeClock(), true)
	return err
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
	s, err := h.check.Open(ctx, h.dsn, h.storeClock(), false)
	if err != nil {
		return nil, err
	}
	h.handles = append(h.handles, s)
	return s, nil
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
	for _, s := range h.handles {
		s.Close()
	}
	err := h.store.Close()
	h.closeProxy()
	return h.check.Drop(ctx, err)
}
