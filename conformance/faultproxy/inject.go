package faultproxy

import (
	"context"
	"fmt"

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
		return fmt.Errorf("a proxy cannot cause a %s: a harness restarts its backend itself", f.Fault)
	}
	return nil
}

// EndFault heals a partition and removes a delay.
func (p *Proxy) EndFault(context.Context) error {
	p.Heal()
	p.SetDelay(0)
	return nil
}
