package protocol_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
	"github.com/runstate/runstate/internal/testsupport/watchtest"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/protocol/pb"
)

// announcing is a memory store whose runnable notices the test sends.
type announcing struct {
	*memory.Store
	notices chan struct{}
}

func (a announcing) Features() runstate.Features { return runstate.FeaturesOf(a) }

func (a announcing) WatchRunnable(ctx context.Context, _ runstate.WatchRunnableParams) (<-chan struct{}, error) {
	wake := make(chan struct{}, 1)
	go func() {
		defer close(wake)
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.notices:
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
	}()
	return wake, nil
}

func memoryStore(t *testing.T) *memory.Store {
	t.Helper()
	s, err := memory.Open(context.Background(), memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func notice(t *testing.T, wake <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no notice", what)
	}
}

func ended(t *testing.T, wake <-chan struct{}, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-wake:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the watch goes on", what)
		}
	}
}

// A store's runnable notices cross the connection; the watch ends with
// its context and with the client's store.
func TestNoticesCrossTheConnection(t *testing.T) {
	store := announcing{memoryStore(t), make(chan struct{})}
	s := serveStore(t, store)
	if !s.remote.Info().WatchRunnable {
		t.Fatal("Open did not offer watching")
	}
	ctx, cancel := context.WithCancel(context.Background())
	wake, err := s.remote.WatchRunnable(ctx, runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Fatal("a notice before any was sent: the stream's first notice is not for the caller")
	case <-time.After(100 * time.Millisecond):
	}
	for i := range 3 {
		store.notices <- struct{}{}
		notice(t, wake, fmt.Sprintf("notice %d", i+1))
	}
	cancel()
	ended(t, wake, "the context ended")

	wake, err = s.remote.WatchRunnable(context.Background(), runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatal(err)
	}
	s.remote.Close()
	ended(t, wake, "the store closed")
}

// A store that announces nothing is not offered; asked anyway, the client
// says to poll, and the server answers as one older than watching.
func TestAStoreWithoutNoticesIsPolled(t *testing.T) {
	s := serveStore(t, featuretest.Edit(memoryStore(t), func(f *runstate.Features) { f.RunnableWatcher = nil }))
	if s.remote.Info().WatchRunnable {
		t.Fatal("Open offered watching of a store without it")
	}
	if _, err := s.remote.WatchRunnable(context.Background(), runstate.WatchRunnableParams{}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("watching a store without notices: %v", err)
	}
	// A client that believes the server offers it (a server replaced by
	// one without it) is refused at once, not left waiting.
	route := protocol.Route{Client: pb.NewRunStateStoreClient(s.conn)}
	believer := protocol.NewRemoteStore(protocol.RemoteOptions{Peer: "the test's server", Info: protocol.StoreInfo{WatchRunnable: true},
		Route: func() (protocol.Route, error) { return route, nil }})
	defer believer.Close()
	if wake, err := believer.WatchRunnable(context.Background(), runstate.WatchRunnableParams{}); err == nil || wake != nil {
		t.Fatalf("a watch of a server without it: %v", err)
	}
}

// A run's notices cross the connection: an update of the watched run
// wakes the client's watch, which ends with its context. A store without
// them is not offered, and asked anyway the client says to poll.
func TestRunNoticesCrossTheConnection(t *testing.T) {
	store := memoryStore(t)
	s := serveStore(t, store)
	if !s.remote.Info().WatchRun {
		t.Fatal("Open did not offer watching a run of a store that announces them")
	}
	latency := watchtest.RunWakesOnUpdate(t, s.remote, s.remote)
	t.Logf("update to wake-up across the connection: %v", latency)
	if _, err := s.remote.WatchRun(context.Background(), runstate.WatchRunParams{RunID: "no such id!"}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("watching a malformed run id: %v, want INVALID_ARGUMENT", err)
	}

	quiet := serveStore(t, withoutRunWatcher{store})
	if quiet.remote.Info().WatchRun {
		t.Fatal("Open offered watching a run of a store without it")
	}
	if _, err := quiet.remote.WatchRun(context.Background(), runstate.WatchRunParams{RunID: "r1"}); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("watching a run of a store without notices: %v", err)
	}
}

// withoutRunWatcher hides the memory store's RunWatcher, as a store that
// never had one.
type withoutRunWatcher struct{ runstate.Store }

func (s withoutRunWatcher) Features() runstate.Features {
	f := s.Store.Features()
	f.RunWatcher = nil
	return f
}
