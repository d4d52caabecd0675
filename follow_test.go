package runstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// wokenWithin waits for a wake-up; the bound only ends a test that would
// otherwise hang.
func wokenWithin(t *testing.T, wake <-chan struct{}, bound time.Duration, what string) {
	t.Helper()
	select {
	case _, open := <-wake:
		if !open {
			t.Fatalf("%s: Wake closed", what)
		}
	case <-time.After(bound):
		t.Fatalf("%s: no wake-up within %v", what, bound)
	}
}

// quietFor fails if wake delivers within d.
func quietFor(t *testing.T, wake <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-wake:
		t.Fatalf("%s: a wake-up", what)
	case <-time.After(d):
	}
}

// With a stream, Follow wakes at each notice, long before its poll; when
// the stream ends it goes on polling; when ctx ends, Wake closes.
func TestFollowWakesOnNoticesAndPollsWhenTheStreamEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	notices := make(chan struct{}, 1)
	f := runstate.Follow(ctx, runstate.FollowParams{Poll: time.Hour,
		Watch: func(context.Context) (<-chan struct{}, error) { return notices, nil }})
	if !f.Watching || f.WatchErr != nil {
		t.Fatalf("Watching %v, WatchErr %v: want a standing watch", f.Watching, f.WatchErr)
	}
	quietFor(t, f.Wake, 100*time.Millisecond, "before any notice, with an hour's poll")
	for range 3 {
		notices <- struct{}{}
		wokenWithin(t, f.Wake, 10*time.Second, "a notice")
	}
	close(notices)
	quietFor(t, f.Wake, 100*time.Millisecond, "the stream's end")
	cancel()
	select {
	case _, open := <-f.Wake:
		if open {
			t.Fatal("a wake-up after ctx ended, want Wake closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wake still open 10s after ctx ended")
	}
}

// Without a stream, or with one that cannot start, Follow polls, and says
// why it does not watch.
func TestFollowPollsWithoutAStream(t *testing.T) {
	refused := errors.New("no stream here")
	for name, watch := range map[string]func(context.Context) (<-chan struct{}, error){
		"none":    nil,
		"refused": func(context.Context) (<-chan struct{}, error) { return nil, refused },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := runstate.Follow(ctx, runstate.FollowParams{Poll: 20 * time.Millisecond, Watch: watch})
			if f.Watching || (watch != nil) != errors.Is(f.WatchErr, refused) {
				t.Fatalf("Watching %v, WatchErr %v", f.Watching, f.WatchErr)
			}
			for range 3 {
				wokenWithin(t, f.Wake, 10*time.Second, "a poll")
			}
		})
	}
}
