package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/runstate/runstate/conformance"
)

// Faults are the faults a proxy causes, for a target's capabilities.
var Faults = []conformance.Fault{conformance.FaultPartition, conformance.FaultReset, conformance.FaultDelay}

// StartFault causes p's part of conformance.FaultInjector, so that a
// harness whose handles connect through p forwards to it.
func (p *Proxy) StartFault(_ context.Context, f conformance.FaultParams) error {
	switch f.Fault {
	case conformance.FaultPartition:
		p.Partition()
	case conformance.FaultReset:
		p.Reset()
	case conformance.FaultDelay:
		p.SetDelay(f.Delay)
	default:
		return fmt.Errorf("a proxy cannot cause the fault %q: a harness restarts its backend itself (Proxy.WithRestarts)", f.Fault)
	}
	return nil
}

// EndFault heals a partition and removes a delay.
func (p *Proxy) EndFault(context.Context) error {
	p.Heal()
	p.SetDelay(0)
	return nil
}

// Restarter kills a server and starts it again, such as the private
// servers the MySQL and PostgreSQL test packages start.
type Restarter interface {
	// Kill stops the server as a crash would.
	Kill() error
	// Start starts it again on the same data and returns once it answers.
	Start(ctx context.Context) error
}

// FaultsWithRestarts are Faults and the restart.
var FaultsWithRestarts = append(slices.Clone(Faults), conformance.FaultRestart)

// NoFaults is the injector of a harness whose server no proxy can reach:
// it declares no faults, so the suite never starts one.
var NoFaults conformance.FaultInjector = noFaults{}

type noFaults struct{}

func (noFaults) StartFault(context.Context, conformance.FaultParams) error {
	return errors.New("this target declares no faults: its server is not reached through a proxy")
}

func (noFaults) EndFault(context.Context) error { return nil }

// FaultsFor are the faults a harness declares: none for a server a proxy
// cannot reach (addrErr), the proxy's, and restarts where r restarts the
// server.
func FaultsFor(addrErr error, r Restarter) []conformance.Fault {
	switch {
	case addrErr != nil:
		return nil
	case r != nil:
		return FaultsWithRestarts
	}
	return Faults
}

// WithRestarts returns a conformance.FaultInjector that restarts r (kill
// at StartFault, start at EndFault) and leaves the other faults to p. Give
// it only a server of the test's own: other tests' stores would fail.
func (p *Proxy) WithRestarts(r Restarter) conformance.FaultInjector {
	return &restarting{Proxy: p, server: r}
}

type restarting struct {
	*Proxy
	server Restarter
	mu     sync.Mutex
	down   bool
}

func (r *restarting) StartFault(ctx context.Context, f conformance.FaultParams) error {
	if f.Fault != conformance.FaultRestart {
		return r.Proxy.StartFault(ctx, f)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = true
	return r.server.Kill()
}

func (r *restarting) EndFault(ctx context.Context) error {
	err := r.Proxy.EndFault(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		r.down = false
		err = errors.Join(err, r.server.Start(ctx))
	}
	return err
}
