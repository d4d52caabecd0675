package protocol_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/internal/testsupport/grpctest"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/protocol/pb"
)

// asAnOlderServer makes today's service answer as a server of protocol
// 1.5 or older would: its Open names no features and no version, it has no
// SetClock, and the fields it does not know are dropped from the
// requests, as protobuf drops them.
func asAnOlderServer(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if strings.HasSuffix(info.FullMethod, "/SetClock") {
		return nil, status.Error(codes.Unimplemented, "unknown method SetClock")
	}
	switch r := req.(type) {
	case *pb.UpdateRunRequest:
		r.ReleaseLease = false
		if r.Actor != nil {
			r.Actor.Principal = ""
		}
	case *pb.CreateRunRequest:
		if r.Actor != nil {
			r.Actor.Principal = ""
		}
	}
	return withoutNames(handler(ctx, req))
}

// asA16Server makes today's service answer as a server of protocol 1.6:
// its Open names no features and no version, and it keeps every field.
func asA16Server(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return withoutNames(handler(ctx, req))
}

// withoutNames takes the version and the feature names out of an answer
// to Open.
func withoutNames(resp any, err error) (any, error) {
	if open, ok := resp.(*pb.OpenResponse); ok {
		open.Features, open.ProtocolVersion = nil, ""
	}
	return resp, err
}

// olderServer serves store as an older server, and connects to it.
func olderServer(t *testing.T, store runstate.RunStateStore, acceptNoPrincipal bool) *protocol.RemoteStore {
	return serveAs(t, store, asAnOlderServer, acceptNoPrincipal)
}

// serveAs serves store through the interceptor as, and connects to it.
func serveAs(t *testing.T, store runstate.RunStateStore, as grpc.UnaryServerInterceptor, acceptNoPrincipal bool) *protocol.RemoteStore {
	t.Helper()
	conn := grpctest.Dial(t, protocol.NewService(protocol.ServiceOptions{Name: "older", Store: store}).Register, grpc.UnaryInterceptor(as))
	r, err := protocol.Connect(context.Background(), protocol.ConnectParams{Conn: conn, Peer: "plugin older", AcceptNoPrincipal: acceptNoPrincipal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Today's server names every feature and the fields whose meaning it
// keeps, with its version.
func TestTodaysServerNamesItsFeaturesAndVersion(t *testing.T) {
	info := serveStore(t, memoryStore(t)).remote.Info()
	if info.ProtocolVersion != protocol.Version {
		t.Errorf("version %q, want %q", info.ProtocolVersion, protocol.Version)
	}
	for _, f := range []string{protocol.FeatureLeases, protocol.FeatureBatchClaim, protocol.FeatureUpdateReleaseLease,
		protocol.FeaturePrincipal, protocol.FeatureBatchClaimStart} {
		if !info.Has(f) {
			t.Errorf("Open does not name %s: %v", f, info.Features)
		}
	}
}

// protocol.Features names, each once, every feature a server of this
// version announces; an older server's version reads "1.5 or older".
func TestFeaturesNameWhatAServerAnnounces(t *testing.T) {
	all := protocol.Features()
	announced := serveStore(t, memoryStore(t)).remote.Info()
	for _, f := range announced.Features {
		if !slices.Contains(all, f) {
			t.Errorf("the server announces %s, which protocol.Features %v lacks", f, all)
		}
	}
	if compacted := slices.Compact(slices.Sorted(slices.Values(all))); len(compacted) != len(all) {
		t.Errorf("protocol.Features names a feature twice: %v", all)
	}
	if v := announced.Speaks(); v != protocol.Version {
		t.Errorf("today's server speaks %q, want %q", v, protocol.Version)
	}
	if v := olderServer(t, memoryStore(t), false).Info().Speaks(); v != "1.5 or older" {
		t.Errorf("an older server speaks %q, want 1.5 or older", v)
	}
}

// An older server keeps none of the fields with meaning: the client
// releases a lease with a call of its own after the update, refuses a
// principal the server would drop (unless told to accept that), and
// starts batch-claimed runs with an update each. Nothing is lost.
func TestAnOlderServerIsSentNothingItWouldDrop(t *testing.T) {
	ctx := context.Background()
	m, err := memory.Open(ctx, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	older := olderServer(t, m, false)
	if info := older.Info(); info.ProtocolVersion != "" || info.Has(protocol.FeaturePrincipal) || !info.Has(protocol.FeatureBatchClaim) {
		t.Fatalf("the older server's Open: %+v", info)
	}
	store := older.Checked()
	s, _ := runstate.As[runstate.Store](store)

	// Release with the update: the update, then a ReleaseLease.
	run, _ := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"})
	cl, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "a", Incarnation: "1"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: cl.Lease.Token,
		Status: "running", ReleaseLease: true}); err != nil {
		t.Fatalf("an update that releases its lease: %v", err)
	}
	if _, err := m.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "b", Incarnation: "1"}, TTL: time.Hour,
		Statuses: []string{"running"}}); err != nil {
		t.Errorf("the lease was not released: another worker's claim %v", err)
	}

	// In a batch too: each applied item's lease is released after it.
	var ups []runstate.UpdateRunParams
	for _, id := range []string{"b1", "b2"} {
		r, _ := s.CreateRun(ctx, runstate.CreateRunParams{RunID: id, WorkflowName: "w"})
		c, err := s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: id, Owner: runstate.Owner{Worker: "a", Incarnation: "1"}, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ups = append(ups, runstate.UpdateRunParams{RunID: id, ExpectedVersion: r.Version, LeaseToken: c.Lease.Token, Status: "canceled", ReleaseLease: true})
	}
	res, err := runstate.UpdateRuns(ctx, s, runstate.UpdateRunsParams{Updates: ups})
	if err != nil || res.Items[0].Err != nil || res.Items[1].Err != nil {
		t.Fatalf("a batch of updates that release their leases: %+v, %v", res, err)
	}
	for _, id := range []string{"b1", "b2"} {
		if l, err := m.GetLease(ctx, id); err != nil || l.Token != 1 {
			t.Fatalf("%s's lease: %+v, %v", id, l, err)
		} else if err := m.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: id, Token: 1}); !errors.Is(err, runstate.ErrLeaseLost) {
			t.Errorf("%s's lease was not released by the batch: releasing it again %v", id, err)
		}
	}

	// A principal the server would drop is refused, and nothing is written.
	_, err = s.CreateRun(ctx, runstate.CreateRunParams{RunID: "r2", WorkflowName: "w", Actor: runstate.Actor{Kind: runstate.ActorOperator, Principal: "alice"}})
	if !errors.Is(err, runstate.ErrUnsupported) || !strings.Contains(err.Error(), "principal") || !strings.Contains(err.Error(), "1.5 or older") ||
		!strings.Contains(err.Error(), protocol.Version) {
		t.Errorf("a write with a principal to an older server: %v", err)
	}
	if _, err := m.GetRun(ctx, "r2"); !errors.Is(err, runstate.ErrNotFound) {
		t.Errorf("the refused create wrote the run: %v", err)
	}
	accepting := olderServer(t, m, true).Checked()
	if _, err := accepting.CreateRun(ctx, runstate.CreateRunParams{RunID: "r2", WorkflowName: "w", Actor: runstate.Actor{Kind: runstate.ActorOperator, Principal: "alice"}}); err != nil {
		t.Errorf("with a trail without principals accepted: %v", err)
	}

	// Batch claims that start their runs: claimed, then started, each (r2
	// and these two).
	for _, id := range []string{"q1", "q2"} {
		s.CreateRun(ctx, runstate.CreateRunParams{RunID: id, WorkflowName: "w"})
	}
	claims, err := runstate.ClaimRuns(ctx, s, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "c", Incarnation: "1"}, TTL: time.Hour, Max: 5, Start: true,
		Filter: runstate.RunnableFilter{Statuses: []string{"queued"}}})
	if err != nil || len(claims.Claims) != 3 {
		t.Fatalf("claims that start their runs: %+v, %v", claims, err)
	}
	for _, c := range claims.Claims {
		if got, _ := m.GetRun(ctx, c.Run.RunID); got.Status != runstate.StatusRunning || c.Run.Status != runstate.StatusRunning {
			t.Errorf("%s claimed %s, stored %s: want running", c.Run.RunID, c.Run.Status, got.Status)
		}
	}
}

// A server of 1.6, which names nothing, is known by its SetClock: it keeps
// the fields 1.1 to 1.3 added, so its client sends them as to today's.
func TestA16ServerIsRecognisedAndSentEveryFieldItKeeps(t *testing.T) {
	ctx := context.Background()
	m, err := memory.Open(ctx, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := serveAs(t, m, asA16Server, false)
	info := r.Info()
	if info.ProtocolVersion != "1.6" || !info.Has(protocol.FeaturePrincipal) || !info.Has(protocol.FeatureUpdateReleaseLease) || !info.Has(protocol.FeatureBatchClaimStart) {
		t.Fatalf("a 1.6 server: %+v", info)
	}
	run, err := r.Checked().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w", Actor: runstate.Actor{Kind: runstate.ActorOperator, Principal: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := m.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: run.RunID})
	if err != nil || len(page.Events) != 1 || page.Events[0].Actor.Principal != "alice" {
		t.Errorf("the principal in the trail: %+v, %v", page.Events, err)
	}
}

// asA17Server makes today's service answer as a server of protocol 1.7:
// its Open names its version and the features of 1.7, without wake_at,
// and it drops the wake time of an update, as protobuf drops a field it
// does not know.
func asA17Server(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if r, ok := req.(*pb.UpdateRunRequest); ok {
		r.SetWakeAt, r.WakeAt = false, nil
	}
	resp, err := handler(ctx, req)
	if open, ok := resp.(*pb.OpenResponse); ok {
		open.ProtocolVersion = "1.7"
		open.Features = slices.DeleteFunc(open.Features, func(f string) bool { return f == protocol.FeatureWakeAt })
	}
	return resp, err
}

// A server of 1.7 would drop a wake time and write the rest, leaving the
// run claimable at once: its client refuses the update, alone or in a
// batch, naming the feature and both versions, and nothing is written.
// Today's server parks and wakes the run across the wire.
func TestAWakeTimeIsNeverSentToAServerThatWouldDropIt(t *testing.T) {
	ctx := context.Background()
	m, err := memory.Open(ctx, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	older := serveAs(t, m, asA17Server, false)
	if info := older.Info(); info.ProtocolVersion != "1.7" || info.Has(protocol.FeatureWakeAt) {
		t.Fatalf("the 1.7 server's Open: %+v", info)
	}
	s := older.Checked()
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	wake := time.Now().Add(time.Hour)
	_, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &wake, Message: ptrTo("parked")})
	if !errors.Is(err, runstate.ErrUnsupported) || !strings.Contains(err.Error(), protocol.FeatureWakeAt) ||
		!strings.Contains(err.Error(), "1.7") || !strings.Contains(err.Error(), protocol.Version) {
		t.Errorf("parking through a 1.7 server: %v", err)
	}
	res, err := runstate.UpdateRuns(ctx, s, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &time.Time{}}}})
	if err != nil || !errors.Is(res.Items[0].Err, runstate.ErrUnsupported) {
		t.Errorf("waking through a 1.7 server in a batch: %+v, %v", res, err)
	}
	if got, _ := m.GetRun(ctx, run.RunID); got.Version != run.Version || got.Message != "" {
		t.Errorf("a refused update was written: version %d, message %q", got.Version, got.Message)
	}

	today := serveStore(t, m).remote.Checked()
	parked, err := today.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &wake})
	if err != nil || !parked.WakeAt.Equal(wake.UTC().Truncate(time.Microsecond)) {
		t.Fatalf("parking through today's server: wake_at %v, %v", parked.WakeAt, err)
	}
	if got, _ := m.GetRun(ctx, run.RunID); !got.WakeAt.Equal(parked.WakeAt) {
		t.Errorf("the store holds wake_at %v, want %v", got.WakeAt, parked.WakeAt)
	}
	woken, err := today.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: parked.Version, WakeAt: &time.Time{}})
	if err != nil || !woken.WakeAt.IsZero() {
		t.Errorf("waking through today's server: wake_at %v, %v", woken.WakeAt, err)
	}
}

func ptrTo[T any](v T) *T { return &v }
