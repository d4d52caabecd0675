package memory

import (
	"cmp"
	"iter"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// indexes are the orders the store reads runs in, so that a claim or a
// page reads the runs it returns and few others, however many runs the
// store holds. They are the key-value stores' (adapters/internal/kvindex)
// in memory: entries are a function of a run's snapshot and lease
// (entries), and every write moves them under the mutex it writes under.
type indexes struct {
	// created holds every run, in ListRuns order (LIST-005).
	created *ordered[driver.RunPosition]
	// status holds the runs of each status, in ListRuns order.
	status map[runstate.RunStatus]*ordered[driver.RunPosition]
	// queue holds the unleased non-terminal runs of each status
	// (driver.QueueUnleased), in claim order (LEASE-003).
	queue map[runstate.RunStatus]*ordered[driver.RunnablePosition]
	// expiry holds the leased non-terminal runs of each status
	// (driver.QueueLeased), earliest lease expiry first, so the expired
	// leases, claimable again, are its head.
	expiry map[runstate.RunStatus]*ordered[timedKey]
	// parked holds the parked runs of each status (driver.QueueParked),
	// earliest wake time first, so the due ones are its head.
	parked map[runstate.RunStatus]*ordered[timedKey]
	// owner holds the leased non-terminal runs by lease owner: a claim
	// passes over the leases of its worker's earlier incarnations (LEASE-012).
	owner *ordered[ownerKey]
}

// timedKey orders runs by a time from which they are claimable: a lease's
// expiry, or a parked run's wake time.
type timedKey struct {
	At    time.Time
	RunID string
}

func (a timedKey) compare(b timedKey) int {
	return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.RunID, b.RunID))
}

type ownerKey struct {
	Worker, Incarnation, RunID string
}

func (a ownerKey) compare(b ownerKey) int {
	return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.RunID, b.RunID))
}

func newIndexes() indexes {
	return indexes{
		created: newOrdered(driver.RunPosition.Compare),
		status:  map[runstate.RunStatus]*ordered[driver.RunPosition]{},
		queue:   map[runstate.RunStatus]*ordered[driver.RunnablePosition]{},
		expiry:  map[runstate.RunStatus]*ordered[timedKey]{},
		parked:  map[runstate.RunStatus]*ordered[timedKey]{},
		owner:   newOrdered(ownerKey.compare),
	}
}

// perStatus returns the index of status st in m, made empty on first use.
func perStatus[K any](m map[runstate.RunStatus]*ordered[K], st runstate.RunStatus, cmp func(a, b K) int) *ordered[K] {
	if m[st] == nil {
		m[st] = newOrdered(cmp)
	}
	return m[st]
}

func (x *indexes) byStatus(st runstate.RunStatus) *ordered[driver.RunPosition] {
	return perStatus(x.status, st, driver.RunPosition.Compare)
}

func (x *indexes) queueOf(st runstate.RunStatus) *ordered[driver.RunnablePosition] {
	return perStatus(x.queue, st, driver.RunnablePosition.Compare)
}

func (x *indexes) expiryOf(st runstate.RunStatus) *ordered[timedKey] {
	return perStatus(x.expiry, st, timedKey.compare)
}

func (x *indexes) parkedOf(st runstate.RunStatus) *ordered[timedKey] {
	return perStatus(x.parked, st, timedKey.compare)
}

// add enters r in every index its snapshot and lease put it in; remove
// takes it out of them. A write removes a run, changes it and adds it, so
// the indexes always say what the runs say.
func (x *indexes) add(r *record)    { x.entries(r, true) }
func (x *indexes) remove(r *record) { x.entries(r, false) }

// entries inserts (or deletes) r's entries: where kvindex.IndexKeys puts
// keys, for the orders the memory store reads.
func (x *indexes) entries(r *record, insert bool) {
	s, lease := r.run, r.lease
	put(x.created, driver.PositionOf(s), insert)
	put(x.byStatus(s.Status), driver.PositionOf(s), insert)
	switch driver.QueueOf(s, lease) {
	case driver.QueueNone:
	case driver.QueueUnleased:
		put(x.queueOf(s.Status), driver.RunnablePositionOf(s), insert)
	case driver.QueueLeased:
		put(x.expiryOf(s.Status), timedKey{lease.ExpiresAt, s.RunID}, insert)
		put(x.owner, ownerKey{lease.Owner.Worker, lease.Owner.Incarnation, s.RunID}, insert)
	case driver.QueueParked:
		put(x.parkedOf(s.Status), timedKey{s.WakeAt, s.RunID}, insert)
	}
}

func put[K any](o *ordered[K], k K, insert bool) {
	if insert {
		o.insert(k)
	} else {
		o.delete(k)
	}
}

// expired yields the runs of status st whose lease expired by now.
func (x *indexes) expired(st runstate.RunStatus, now time.Time) iter.Seq[string] {
	return reached(x.expiryOf(st), now)
}

// due yields the parked runs of status st whose wake time is now or past.
func (x *indexes) due(st runstate.RunStatus, now time.Time) iter.Seq[string] {
	return reached(x.parkedOf(st), now)
}

// nextWake returns the earliest wake time after after among the parked
// runs of every status.
func (x *indexes) nextWake(after time.Time) (time.Time, bool) {
	var first time.Time
	for _, o := range x.parked {
		for k := range o.from(&timedKey{At: after.Add(time.Nanosecond)}) {
			if first.IsZero() || k.At.Before(first) {
				first = k.At
			}
			break
		}
	}
	return first, !first.IsZero()
}

// reached yields the runs of o whose time is now or past, in time order.
func reached(o *ordered[timedKey], now time.Time) iter.Seq[string] {
	return func(yield func(string) bool) {
		for k := range o.from(nil) {
			if now.Before(k.At) || !yield(k.RunID) {
				return // the rest are later
			}
		}
	}
}

// otherIncarnations yields the runs leased to owner's worker under any
// incarnation but owner's: those before it, then, seeking past owner's own
// leases, those after it (no incarnation sorts between owner's and owner's
// followed by 0x00).
func (x *indexes) otherIncarnations(owner runstate.Owner) iter.Seq[string] {
	return func(yield func(string) bool) {
		for k := range x.owner.from(&ownerKey{Worker: owner.Worker}) {
			if k.Worker != owner.Worker || k.Incarnation >= owner.Incarnation {
				break
			}
			if !yield(k.RunID) {
				return
			}
		}
		for k := range x.owner.from(&ownerKey{Worker: owner.Worker, Incarnation: owner.Incarnation + "\x00"}) {
			if k.Worker != owner.Worker || !yield(k.RunID) {
				return
			}
		}
	}
}
