package driver

import (
	"context"
	"sync"

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
	wake := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, runstate.Unavailable("the store is closed", nil)
	}
	if n.watchers == nil {
		n.watchers = make(map[string]map[chan struct{}]struct{})
	}
	if n.watchers[p.RunID] == nil {
		n.watchers[p.RunID] = make(map[chan struct{}]struct{})
	}
	n.watchers[p.RunID][wake] = struct{}{}
	context.AfterFunc(ctx, func() { n.end(p.RunID, wake) })
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
