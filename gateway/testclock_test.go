package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/protocol"
)

// A gateway in test mode lets an operator move its store's clock, and
// nobody else: a reader's or a worker's SetClock is refused and the clock
// stays where it was.
func TestOnlyAnOperatorMovesTheTestClock(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := protocol.NewTestClock(start)
	store, err := memory.Open(ctx, memory.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tokens, err := gateway.ParseTokens(tokensFile(""))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.NewServer(gateway.ServerOptions{Store: store, Tokens: tokens, Logger: slog.New(slog.DiscardHandler), TestClock: clock})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop(ctx)
	dial := func(principal string) *gateway.Client {
		c, err := gateway.Dial(ctx, lis.Addr().String(), gateway.Options{Token: tokenOf(principal), Plaintext: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, principal := range []string{"reader-r", "worker-a"} {
		if err := dial(principal).SetClock(ctx, start.Add(time.Hour)); !errors.Is(err, runstate.ErrPermissionDenied) {
			t.Errorf("SetClock as %s: %v, want PERMISSION_DENIED", principal, err)
		}
	}
	if !clock.Now().Equal(start) {
		t.Fatalf("a refused SetClock moved the clock to %v", clock.Now())
	}
	operator := dial("operator-o")
	if err := operator.SetClock(ctx, start.Add(time.Hour)); err != nil {
		t.Fatalf("SetClock as the operator: %v", err)
	}
	run, err := operator.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if !run.CreatedAt.Equal(start.Add(time.Hour)) {
		t.Errorf("created at %v after the operator moved the clock to %v", run.CreatedAt, start.Add(time.Hour))
	}
	if err := operator.SetClock(ctx, start); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("moving the clock back: %v, want INVALID_ARGUMENT", err)
	}
}
