package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
	"github.com/runstate/runstate/internal/testsupport/testlog"
)

// withoutWatcher is a store that announces nothing, as a store that never
// had a RunnableWatcher.
type withoutWatcher struct{ runstate.Store }

func (s withoutWatcher) Features() runstate.Features {
	f := s.Store.Features()
	f.RunnableWatcher = nil
	return f
}

// A remote worker behind the gateway, polling every 10 minutes, claims a
// run within 100 ms of its submission when the gateway's store announces
// runnable runs (PostgreSQL with NotifyRunnable); with watching off, the
// same worker is not offered a watch and waits for its poll.
func TestARemoteWorkerWakesOnSubmit(t *testing.T) {
	srv := sqltest.Postgres.Find(t)
	for _, watching := range []bool{true, false} {
		name := map[bool]string{true: "watching", false: "watching off"}[watching]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			store, err := postgres.Open(ctx, postgres.Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true, NotifyRunnable: true,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			var served runstate.RunStateStore = store
			if !watching {
				served = withoutWatcher{store}
			}
			addr := servePlaintext(t, served)
			worker, operator := dialPlaintext(t, addr, "worker-a"), dialPlaintext(t, addr, "operator-o")

			watcher := worker.Watcher()
			if (watcher != nil) != watching {
				t.Fatalf("the client offers a watcher: %v, want %v", watcher != nil, watching)
			}
			idle, claimed := make(chan struct{}, 1), make(chan time.Time, 1)
			go remoteWorker(ctx, leased(worker.Store()), watcher, 10*time.Minute, idle, claimed)
			select {
			case <-idle:
			case <-time.After(20 * time.Second):
				t.Fatal("the worker never found the queue empty")
			}
			submitted := time.Now()
			if _, err := operator.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
				t.Fatal(err)
			}
			select {
			case at := <-claimed:
				took := at.Sub(submitted)
				t.Logf("claimed %v after submit", took)
				if !watching {
					t.Fatalf("claimed without watching, %v after submit, with a 10-minute poll", took)
				}
				if took > 100*time.Millisecond {
					t.Errorf("claimed %v after submit, want within 100 ms", took)
				}
			case <-time.After(time.Second):
				if watching {
					t.Fatal("not claimed within a second of submit")
				}
				t.Log("without a watch the run waits for the worker's poll, 10 minutes away")
			}
		})
	}
}

// remoteWorker is the demo runner's worker loop in small: claim, and when
// nothing is runnable wait for a notice or the poll interval. It says on
// idle when it first found nothing, and on claimed when it claimed.
func remoteWorker(ctx context.Context, s runstate.Store, w runstate.RunnableWatcher, poll time.Duration, idle chan<- struct{}, claimed chan<- time.Time) {
	var wake <-chan struct{}
	if w != nil {
		ch, err := w.WatchRunnable(ctx, runstate.WatchRunnableParams{})
		if err != nil {
			return
		}
		wake = ch
	}
	for ctx.Err() == nil {
		_, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "worker-a", Incarnation: "1"}, TTL: time.Minute})
		if err == nil {
			claimed <- time.Now()
			return
		}
		if !errors.Is(err, runstate.ErrNotFound) {
			return
		}
		select {
		case idle <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		case <-wake:
		}
	}
}

// servePlaintext serves store on a loopback gateway without TLS until the
// test ends.
func servePlaintext(t *testing.T, store runstate.RunStateStore) string {
	t.Helper()
	tokens, err := gateway.ParseTokens(tokensFile(""))
	if err != nil {
		t.Fatal(err)
	}
	s, err := gateway.NewServer(gateway.ServerOptions{Store: store, Tokens: tokens, Logger: slog.New(slog.NewTextHandler(&testlog.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	return lis.Addr().String()
}

func dialPlaintext(t *testing.T, addr, principal string) *gateway.Client {
	t.Helper()
	c, err := gateway.Dial(context.Background(), addr, gateway.Options{Token: tokenOf(principal), Plaintext: true})
	if err != nil {
		t.Fatalf("dial as %s: %v", principal, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A watch outlives a gateway restart: the stop ends the stream, the
// client wakes its caller once (a notice may have been missed) and
// watches the new gateway, whose notices then arrive; a reader may watch.
func TestAWatchSurvivesAGatewayRestart(t *testing.T) {
	srv := sqltest.Postgres.Find(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, postgres.Options{DSN: srv.DSN(), Schema: srv.NewSchemaName(), ScratchSchema: true, NotifyRunnable: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tokens, err := gateway.ParseTokens(tokensFile(""))
	if err != nil {
		t.Fatal(err)
	}
	start := func(addr string) (*gateway.Server, string) {
		s, err := gateway.NewServer(gateway.ServerOptions{Store: store, Tokens: tokens, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(lis)
		return s, lis.Addr().String()
	}
	stop := func(s *gateway.Server) {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		s.Stop(stopCtx)
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("the stop waited %v: a watch held it", took)
		}
	}
	first, addr := start("127.0.0.1:0")
	reader, operator := dialPlaintext(t, addr, "reader-r"), dialPlaintext(t, addr, "operator-o")
	watchCtx, endWatch := context.WithCancel(ctx)
	wake, err := reader.Watcher().WatchRunnable(watchCtx, runstate.WatchRunnableParams{})
	if err != nil {
		t.Fatalf("a reader watches: %v", err)
	}
	woken := func(what string) {
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
	stop(first)
	woken("the stream broke")
	second, _ := start(addr)
	defer stop(second)
	woken("watching again")
	if _, err := operator.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	woken("a run submitted to the new gateway")
	endWatch()
	for range wake { // the watch ends with its context
	}
}
