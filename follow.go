package runstate

import (
	"context"
	"time"
)

// FollowParams configure Follow.
type FollowParams struct {
	// Watch starts a change stream (a RunnableWatcher's or a RunWatcher's,
	// see WatchRunnableOf and WatchRunOf); nil when the store offers none.
	Watch func(ctx context.Context) (<-chan struct{}, error)
	// Poll is how often the follower wakes without a notice: its only
	// wake-ups when there is no stream, a safety net when there is one
	// (a notice may be lost, an expiring lease notifies nobody).
	Poll time.Duration
}

// Following is what Follow returns.
type Following struct {
	// Wake receives a value at each notice of the stream and at each poll;
	// values coalesce. It is closed when ctx ends.
	Wake <-chan struct{}
	// Watching: the stream stands, so wake-ups come soon after a change;
	// otherwise they come every Poll.
	Watching bool
	// WatchErr is why the stream could not be started, if it was asked for.
	WatchErr error
}

// Follow is the one way to wait for changes in a store, with its change
// stream when it has one and by polling in any case: a store without a
// stream is followed exactly as before streams existed. When the stream
// ends before ctx does (the store closed, a server that stopped offering
// it), the follower goes on polling.
func Follow(ctx context.Context, p FollowParams) Following {
	var notices <-chan struct{}
	var f Following
	if p.Watch != nil {
		notices, f.WatchErr = p.Watch(ctx)
		f.Watching = f.WatchErr == nil
	}
	wake := make(chan struct{}, 1)
	f.Wake = wake
	go func() {
		defer close(wake)
		tick := time.NewTicker(p.Poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case _, open := <-notices:
				if !open {
					notices = nil // the stream ended: polling alone
					continue
				}
			}
			select {
			case wake <- struct{}{}:
			default: // one is waiting already: they coalesce
			}
		}
	}()
	return f
}

// WatchRunnableOf is FollowParams.Watch for w's runnable runs; nil when w
// is nil.
func WatchRunnableOf(w RunnableWatcher) func(context.Context) (<-chan struct{}, error) {
	if w == nil {
		return nil
	}
	return func(ctx context.Context) (<-chan struct{}, error) { return w.WatchRunnable(ctx, WatchRunnableParams{}) }
}

// WatchRunOf is FollowParams.Watch for the run p names; nil when w is nil.
func WatchRunOf(w RunWatcher, p WatchRunParams) func(context.Context) (<-chan struct{}, error) {
	if w == nil {
		return nil
	}
	return func(ctx context.Context) (<-chan struct{}, error) { return w.WatchRun(ctx, p) }
}
