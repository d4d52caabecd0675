package driver

import (
	"fmt"
	"time"

	"github.com/runstate/runstate"
)

// Keeper is a Driver that states which parts of the run's layout it keeps
// beyond those every driver keeps. The kit learns the layout a version at a
// time, as the protocol does (docs/protocol.md, "Fields with meaning"): a
// driver written before a part existed stores and searches without it, so
// Wrap refuses a write that needs a part the driver does not name, with
// runstate.ErrUnsupported naming it, rather than accept the write and lose
// it. A Driver that is not a Keeper keeps none of them.
type Keeper interface {
	// Keeps returns the parts of the layout the driver keeps. Wrap asks
	// once: a driver's layout is its code's, and does not change while it
	// runs.
	Keeps() Keeps
}

// Keeps names the parts of the run's layout a driver keeps. Each field is a
// promise about the driver's storage and searches, and the kit adds a field
// for each part it adds, so that a driver compiled against a later kit
// keeps its old meaning: false, refused.
type Keeps struct {
	// Parking: the driver stores runstate.RunSnapshot.WakeAt as it
	// receives it, and Runnable and NextClaimer.ClaimNext pass over a
	// parked run until its wake time and offer it in claim order from
	// then on (WAKE-001, WAKE-002): they judge candidates with
	// RunnableQuery.Admits, or search QueueParked by wake time besides the
	// unleased queue and expired leases (QueueOf). Without it, an update
	// that sets WakeAt, parking or waking, is refused: a driver that
	// searched the unleased queue alone would never offer a parked run
	// again.
	Parking bool
}

// keepsOf is what d keeps: its own statement, or nothing beyond the layout
// every driver keeps.
func keepsOf(d Driver) Keeps {
	if k, ok := d.(Keeper); ok {
		return k.Keeps()
	}
	return Keeps{}
}

// unkept refuses the update p (validated) when it needs a part of the
// layout the driver does not keep.
func (w *wrapped) unkept(p runstate.UpdateRunParams) error {
	if p.WakeAt == nil || w.keeps.Parking {
		return nil
	}
	consequence := "it would leave run " + p.RunID + " stranded, parked until " + p.WakeAt.UTC().Format(time.RFC3339Nano) +
		" where the store's claims never look"
	if p.WakeAt.IsZero() {
		consequence = "no run of it is ever parked, so there is none to wake"
	}
	return &runstate.Error{Code: runstate.CodeUnsupported, RunID: p.RunID, Message: fmt.Sprintf(
		"the store does not keep parked runs (its driver does not state driver.Keeps.Parking): %s. "+
			"Hold a waiting run in hand instead, or upgrade the driver to keep wake_at and state it (driver.Keeper)", consequence)}
}
