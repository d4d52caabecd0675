package protocol

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// ErrNoTestClock is the error of SetClock on a server that offers no test
// clock: one not started in test mode, one whose store does not read the
// test clock, or one older than the call. errors.Is recognises it on the
// client.
var ErrNoTestClock = errors.New("the server offers no test clock")

// TestClock is the stopped clock of a server started for certification:
// its time moves only when a client calls SetClock, so that every process
// serving one store, each started at the same instant and moved alike,
// agrees on the time, as conformance.ManualClock does within one process.
type TestClock struct {
	mu  sync.Mutex
	now time.Time
	// read records that a store took the clock (TestClockFrom), so that
	// a server whose store ignores it refuses SetClock instead of moving
	// nothing.
	read atomic.Bool
}

// NewTestClock returns a test clock stopped at start.
func NewTestClock(start time.Time) *TestClock { return &TestClock{now: start} }

// TestClockOfEnv returns the test clock the environment variable name
// asks for (an RFC 3339 instant, where it stands still), nil when unset:
// how a host starts a server in test mode.
func TestClockOfEnv(name string) (*TestClock, error) {
	v := os.Getenv(name)
	if v == "" {
		return nil, nil
	}
	start, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: want an RFC 3339 time: %w", name, v, err)
	}
	return NewTestClock(start), nil
}

// Clock returns c as a runstate.Clock: nil (no clock) when c is nil.
func (c *TestClock) Clock() runstate.Clock {
	if c == nil {
		return nil
	}
	return c
}

// Now returns the clock's time.
func (c *TestClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t; a t before its time is refused, with the
// clock unchanged: the store's time never runs backwards.
func (c *TestClock) Set(t time.Time) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		return c.now, runstate.InvalidArgument("to", "%s is before the test clock's time %s: the clock only moves forward",
			t.Format(time.RFC3339Nano), c.now.Format(time.RFC3339Nano))
	}
	c.now = t
	return c.now, nil
}

type testClockKey struct{}

// WithTestClock returns ctx carrying c, for an Opener (TestClockFrom).
func WithTestClock(ctx context.Context, c *TestClock) context.Context {
	return context.WithValue(ctx, testClockKey{}, c)
}

// TestClockFrom returns the clock an Opener's store must read when its
// server was started in test mode, and nil otherwise (the store keeps its
// own clock). An Opener that passes it to its store (an adapter's Clock
// option) lets the host move the store's time (SetClock).
func TestClockFrom(ctx context.Context) runstate.Clock {
	c, _ := ctx.Value(testClockKey{}).(*TestClock)
	if c == nil {
		return nil
	}
	c.read.Store(true)
	return c
}

// SetClock implements the protocol's SetClock: it moves the test clock
// when the server has one that its store reads, and refuses otherwise.
func (s *Service) SetClock(_ context.Context, r *pb.SetClockRequest) (*pb.SetClockResponse, error) {
	if _, _, err := s.get(); err != nil {
		return nil, err
	}
	if s.clock == nil {
		return nil, status.Error(codes.FailedPrecondition, "this server was not started in test mode (for certification): its store keeps its own clock")
	}
	if !s.clock.read.Load() {
		return nil, status.Error(codes.FailedPrecondition, "the store this server opened does not read the test clock: its Opener must pass protocol.TestClockFrom(ctx) (plugin.TestClock) to the store")
	}
	now, err := s.clock.Set(fromTS(r.To))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.SetClockResponse{Now: ts(now)}, nil
}

// SetClockParams are SetClock's.
type SetClockParams struct {
	Route Route
	// Peer names the server in errors.
	Peer string
	// To is the time the store's clock moves to; never before its time.
	To time.Time
}

// SetClock moves the test clock of the store a server serves to p.To. A
// server that offers none fails it with ErrNoTestClock.
func SetClock(ctx context.Context, p SetClockParams) error {
	callCtx, end := p.Route.bind(ctx)
	defer end()
	_, err := p.Route.Client.SetClock(callCtx, &pb.SetClockRequest{To: ts(p.To)})
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.FailedPrecondition:
			if len(st.Details()) == 0 {
				return fmt.Errorf("%s: %w: %s", p.Peer, ErrNoTestClock, st.Message())
			}
		case codes.Unimplemented:
			return fmt.Errorf("%s: %w: it was built before the test clock", p.Peer, ErrNoTestClock)
		}
	}
	return callError(ctx, p.Peer, p.Route, err)
}

// SetClock moves the test clock of the store r reaches to to: SetClock on
// r's current route.
func (r *RemoteStore) SetClock(ctx context.Context, to time.Time) error {
	route, err := r.route()
	if err != nil {
		return err
	}
	return SetClock(ctx, SetClockParams{Route: route, Peer: r.peer, To: to})
}
