package driver

import (
	"context"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// RunNotices is runstate.RunWatcher within one process, for a store that
// one process owns (memory, Badger): its writes call Notify, its
// WatchRun hands out the channels. The zero value is ready; Close ends
// every watch.
type RunNotices struct {
	mu       sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
	closed   bool
}

// WatchRun implements runstate.RunWatcher.
func (n *RunNotices) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateWatchRun(p); err != nil {
		return nil, err
	}
	return n.watch(ctx, p.RunID)
}

// watch hands out a channel that Notify(key) wakes until ctx ends.
func (n *RunNotices) watch(ctx context.Context, key string) (<-chan struct{}, error) {
	wake := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, runstate.Unavailable("the store is closed", nil)
	}
	if n.watchers == nil {
		n.watchers = make(map[string]map[chan struct{}]struct{})
	}
	if n.watchers[key] == nil {
		n.watchers[key] = make(map[chan struct{}]struct{})
	}
	n.watchers[key][wake] = struct{}{}
	context.AfterFunc(ctx, func() { n.end(key, wake) })
	return wake, nil
}

// ValidateWatchRun checks the input of runstate.RunWatcher.WatchRun, as
// every store checks it.
func ValidateWatchRun(p runstate.WatchRunParams) error { return validateRunID(p.RunID) }

// end closes wake, unless Close did: the watch's context ended (WATCH-002).
func (n *RunNotices) end(runID string, wake chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.watchers[runID][wake]; !ok {
		return
	}
	delete(n.watchers[runID], wake)
	if len(n.watchers[runID]) == 0 {
		delete(n.watchers, runID)
	}
	close(wake)
}

// Notify wakes the watchers of each run (WATCH-001); it never blocks.
func (n *RunNotices) Notify(runIDs ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range runIDs {
		wakeAll(n.watchers[id])
	}
}

// wakeAll sends to each channel of set that has no value waiting.
func wakeAll(set map[chan struct{}]struct{}) {
	for wake := range set {
		select {
		case wake <- struct{}{}:
		default: // one is waiting already: they coalesce
		}
	}
}

// NotifyAll wakes every watcher: a notice of any run may have been
// missed (a lost connection).
func (n *RunNotices) NotifyAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, set := range n.watchers {
		wakeAll(set)
	}
}

// Close ends every watch, and refuses later ones.
func (n *RunNotices) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for _, set := range n.watchers {
		for wake := range set {
			close(wake)
		}
	}
	n.watchers = nil
}

// RunnableNotices is runstate.RunnableWatcher within one process, for a
// store that one process owns (memory, Badger): a write that makes a run
// claimable without a lease (BecameClaimable) calls Notify once it has
// committed, and WatchRunnable hands out the channels. The zero value is
// ready; Close ends every watch.
//
// A parked run that comes due is written by nobody, so the store tells
// RunnableNotices when it parks one (Parked) and how to find the next wake
// time (NextWake): a timer wakes the watchers when each comes, as a write
// would.
type RunnableNotices struct {
	// watchers are RunNotices' registry, under one key: every watcher
	// hears every notice.
	watchers RunNotices

	mu     sync.Mutex
	closed bool
	// next finds the earliest wake time after a time among the store's
	// parked runs; timer fires at armed, the earliest known.
	next  func(after time.Time) (time.Time, bool)
	timer *time.Timer
	armed time.Time
}

// NextWake gives the function that finds the earliest wake time after a
// given time among the store's parked runs, and arms the timer for it: a
// store calls it once, when it opens, before any write. An alarm may ring
// while the store closes, so next must be safe to call then (and find
// nothing).
func (n *RunnableNotices) NextWake(next func(after time.Time) (time.Time, bool)) {
	n.mu.Lock()
	n.next = next
	n.mu.Unlock()
	if t, ok := next(time.Now()); ok {
		n.Parked(t)
	}
}

// Parked tells of a run parked until t: the watchers are woken then.
func (n *RunnableNotices) Parked(t time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || (!n.armed.IsZero() && !t.Before(n.armed)) {
		return // an earlier alarm is set; it arms the next one when it rings
	}
	n.armed = t
	if n.timer == nil {
		n.timer = time.AfterFunc(time.Until(t), n.ring)
		return
	}
	n.timer.Reset(time.Until(t))
}

// ring wakes the watchers, as a parked run came due, and arms the timer
// for the next wake time after now. The store is asked without n.mu held:
// its writes call Parked holding their own lock.
func (n *RunnableNotices) ring() {
	n.Notify()
	n.mu.Lock()
	n.armed = time.Time{}
	next, closed := n.next, n.closed
	n.mu.Unlock()
	if next == nil || closed {
		return // the store may be closing too: next must not read it
	}
	if t, ok := next(time.Now()); ok {
		n.Parked(t)
	}
}

// WatchRunnable implements runstate.RunnableWatcher.
func (n *RunnableNotices) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.watchers.watch(ctx, "")
}

// Notify wakes every watcher; it never blocks.
func (n *RunnableNotices) Notify() { n.watchers.Notify("") }

// Close ends every watch, and refuses later ones.
func (n *RunnableNotices) Close() {
	n.mu.Lock()
	n.closed = true
	if n.timer != nil {
		n.timer.Stop()
	}
	n.mu.Unlock()
	n.watchers.Close()
}

// Placed is what decides a run's queue: its snapshot and its lease.
type Placed struct {
	Run   runstate.RunSnapshot
	Lease LeaseState
}

// ParkedUntil reports the wake time of a write that parked a run (or
// parked it anew, until another time), moving it from before (nil: a new
// run) to after; ok is false for any other write.
func ParkedUntil(before *Placed, after Placed) (time.Time, bool) {
	if QueueOf(after.Run, after.Lease) != QueueParked {
		return time.Time{}, false
	}
	if before != nil && QueueOf(before.Run, before.Lease) == QueueParked && before.Run.WakeAt.Equal(after.Run.WakeAt) {
		return time.Time{}, false
	}
	return after.Run.WakeAt, true
}

// BecameClaimable reports whether a write that moved a run from before
// (nil: a new run) to after made it claimable without a lease: created
// so, or moved to the unleased queue from a lease, from parking (a run
// woken before its time) or from another status. A store with a
// runstate.RunnableWatcher announces such writes; a parked run that comes
// due is announced by nobody (no write), so watchers still poll.
func BecameClaimable(before *Placed, after Placed) bool {
	if QueueOf(after.Run, after.Lease) != QueueUnleased {
		return false
	}
	// Not when it was claimable before, and as it was.
	return before == nil || QueueOf(before.Run, before.Lease) != QueueUnleased || before.Run.Status != after.Run.Status
}
