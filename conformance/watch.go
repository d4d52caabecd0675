package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("WATCH-001", "A store with runstate.RunWatcher wakes a watch of a run soon after the run is created or updated; a malformed run id is INVALID_ARGUMENT.", none, checkWatchRunWakes)
	register("WATCH-002", "A watch of a run ends, its channel closed, when its context ends.", none, checkWatchRunEnds)
}

// RunWatching is a Harness that also gives the watcher of its store,
// when the store's handle is not one itself (a client of a plugin or a
// gateway, whose store is a checked wrapper): nil when it offers none.
type RunWatching interface {
	RunWatcher() runstate.RunWatcher
}

// watchBound is how long a wake-up may take: far beyond the milliseconds
// one takes, so that only a watch that never wakes fails.
const watchBound = 20 * time.Second

// runWatcher returns the store's RunWatcher, or skips the check.
func (c *checkState) runWatcher() runstate.RunWatcher {
	if h, ok := c.h.(RunWatching); ok {
		if w := h.RunWatcher(); w != nil {
			return w
		}
		c.skip(lackRemoteRunWatcher)
	}
	w, ok := runstate.As[runstate.RunWatcher](c.store)
	if !ok {
		c.skip(lackRunWatcher)
	}
	return w
}

// watchRun starts a watch of runID that ends with the check.
func (c *checkState) watchRun(ctx context.Context, w runstate.RunWatcher, runID string) <-chan struct{} {
	wake, err := w.WatchRun(ctx, runstate.WatchRunParams{RunID: runID})
	if err != nil {
		c.Fatalf("WatchRun to succeed", "%s", describeErr(err))
	}
	return wake
}

// awaitWake waits for a wake-up on wake after what happened.
func (c *checkState) awaitWake(wake <-chan struct{}, after string) {
	select {
	case _, open := <-wake:
		if !open {
			c.Fatalf("a wake-up after "+after, "the watch ended")
		}
	case <-time.After(watchBound):
		c.Fatalf("a wake-up after "+after, "none within %v", watchBound)
	case <-c.ctx.Done():
		c.Fatalf("a wake-up after "+after, "the check ended first")
	}
}

// drainWakes takes the wake-ups waiting on wake: they may come for nothing.
func drainWakes(wake <-chan struct{}) {
	for {
		select {
		case <-wake:
		default:
			return
		}
	}
}

func checkWatchRunWakes(c *checkState) {
	w := c.runWatcher()
	if _, err := w.WatchRun(c.ctx, runstate.WatchRunParams{RunID: "not a run id!"}); !errors.Is(err, runstate.ErrInvalidArgument) {
		c.Errorf("WatchRun of a malformed run id to fail with INVALID_ARGUMENT", "%s", describeErr(err))
	}
	ctx, stop := context.WithCancel(c.ctx)
	defer stop()
	// A run watched before it exists: its create wakes the watch.
	id := fmt.Sprintf("watched-%d", time.Now().UnixNano())
	wake := c.watchRun(ctx, w, id)
	began := time.Now()
	run := c.create(runstate.CreateRunParams{RunID: id})
	c.awaitWake(wake, "the watched run was created")
	created := time.Since(began)
	// A write of another run need not wake the watch, but may.
	c.update(transition(c.newRun(), runstate.StatusRunning))
	drainWakes(wake)
	began = time.Now()
	c.update(transition(run, runstate.StatusRunning))
	c.awaitWake(wake, "the watched run was updated")
	c.note(fmt.Sprintf("woken %v after the create, %v after the update", created.Round(time.Microsecond), time.Since(began).Round(time.Microsecond)))
}

func checkWatchRunEnds(c *checkState) {
	w := c.runWatcher()
	run := c.newRun()
	ctx, stop := context.WithCancel(c.ctx)
	wake := c.watchRun(ctx, w, run.RunID)
	stop()
	deadline := time.After(watchBound)
	for {
		select {
		case _, open := <-wake:
			if !open {
				return
			}
		case <-deadline:
			c.Fatalf("the channel closed after the watch's context ended", "still open %v later", watchBound)
		}
	}
}
