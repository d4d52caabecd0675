package protocol_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
	"github.com/runstate/runstate/internal/testsupport/grpctest"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/protocol/pb"
)

// served is a store served over an in-memory gRPC connection, with the
// client's side of it.
type served struct {
	remote *protocol.RemoteStore
	conn   *grpc.ClientConn
}

// serve registers the service register makes on an in-memory server and
// connects to it.
func serve(t *testing.T, register func(grpc.ServiceRegistrar)) served {
	t.Helper()
	conn := grpctest.Dial(t, register)
	remote, err := protocol.Connect(context.Background(), protocol.ConnectParams{Conn: conn, Peer: "the test's server"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	return served{remote: remote, conn: conn}
}

func serveStore(t *testing.T, store runstate.RunStateStore) served {
	return serve(t, protocol.NewService(protocol.ServiceOptions{Name: "test", Store: store}).Register)
}

// has reports which batch interfaces s implements.
func has(s runstate.RunStateStore) protocol.BatchCalls {
	creator := s.Features().BatchCreator != nil
	updater := s.Features().BatchUpdater != nil
	claimer := s.Features().BatchClaimer != nil
	return protocol.BatchCalls{CreateRuns: creator, UpdateRuns: updater, ClaimRuns: claimer}
}

// The client's store has the batch interfaces the server's store has, no
// others, whatever the combination.
func TestTheClientHasExactlyTheServersBatchInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		store  func(m *memory.Store) runstate.RunStateStore
		leases bool
		want   protocol.BatchCalls
	}{
		{"all three", func(m *memory.Store) runstate.RunStateStore { return m }, true, protocol.BatchCalls{CreateRuns: true, UpdateRuns: true, ClaimRuns: true}},
		{"none", func(m *memory.Store) runstate.RunStateStore { return featuretest.WithoutBatches(m) }, true, protocol.BatchCalls{}},
		{"creates only", func(m *memory.Store) runstate.RunStateStore {
			return featuretest.Edit(m, func(f *runstate.Features) { f.BatchUpdater, f.BatchClaimer = nil, nil })
		}, true, protocol.BatchCalls{CreateRuns: true}},
		{"updates and claims", func(m *memory.Store) runstate.RunStateStore {
			return featuretest.Edit(m, func(f *runstate.Features) { f.BatchCreator = nil })
		}, true, protocol.BatchCalls{UpdateRuns: true, ClaimRuns: true}},
		{"no leases: no batch claims", func(m *memory.Store) runstate.RunStateStore {
			return featuretest.Edit(m, func(f *runstate.Features) { f.Leases, f.BatchCreator = nil, nil })
		}, false, protocol.BatchCalls{UpdateRuns: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serveStore(t, tc.store(memorytest.Open(t, nil)))
			if got := s.remote.Info().Batches; got != tc.want {
				t.Fatalf("Open said %+v, want %+v", got, tc.want)
			}
			store := s.remote.Checked()
			if got := has(store); got != tc.want {
				t.Fatalf("the client's store is %T with %+v, want %+v", store, got, tc.want)
			}
			if leases := store.Features().Leases != nil; leases != tc.leases {
				t.Fatalf("the client's store has leases %v, want %v", leases, tc.leases)
			}
			// A batch the store has works through the client's store.
			if tc.want.UpdateRuns {
				run, err := store.CreateRun(context.Background(), runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"})
				if err != nil {
					t.Fatal(err)
				}
				res, err := featuretest.Must(runstate.As[runstate.BatchUpdater](store)).UpdateRuns(context.Background(), runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
					{RunID: "r1", ExpectedVersion: run.Version, Status: "canceled"}}})
				if err != nil || res.Items[0].Err != nil || res.Items[0].Run.Status != runstate.StatusCanceled {
					t.Fatalf("UpdateRuns: %+v, %v", res, err)
				}
			}
		})
	}
}

// oldServer is a server built before the batch calls: its Open says
// nothing of them, and it answers them UNIMPLEMENTED.
type oldServer struct{ *protocol.Service }

func (o oldServer) Open(ctx context.Context, r *pb.OpenRequest) (*pb.OpenResponse, error) {
	resp, err := o.Service.Open(ctx, r)
	if resp != nil {
		resp = &pb.OpenResponse{Name: resp.Name, Version: resp.Version, Leases: resp.Leases}
	}
	return resp, err
}

func (oldServer) CreateRuns(ctx context.Context, r *pb.CreateRunsRequest) (*pb.CreateRunsResponse, error) {
	return pb.UnimplementedRunStateStoreServer{}.CreateRuns(ctx, r)
}

func (oldServer) UpdateRuns(ctx context.Context, r *pb.UpdateRunsRequest) (*pb.UpdateRunsResponse, error) {
	return pb.UnimplementedRunStateStoreServer{}.UpdateRuns(ctx, r)
}

func (oldServer) ClaimRuns(ctx context.Context, r *pb.ClaimRunsRequest) (*pb.ClaimRunsResponse, error) {
	return pb.UnimplementedRunStateStoreServer{}.ClaimRuns(ctx, r)
}

// A server without the batch calls leaves the client with no batch
// interfaces and everything else working: the package's batch functions
// fall back to single calls.
func TestAServerWithoutBatchCallsLeavesTheClientWorking(t *testing.T) {
	ctx := context.Background()
	service := protocol.NewService(protocol.ServiceOptions{Name: "old", Store: memorytest.Open(t, nil)})
	s := serve(t, func(r grpc.ServiceRegistrar) { pb.RegisterRunStateStoreServer(r, oldServer{service}) })
	if _, err := pb.NewRunStateStoreClient(s.conn).CreateRuns(ctx, &pb.CreateRunsRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("the old server answers CreateRuns with %v, want UNIMPLEMENTED", err)
	}
	store, ok := runstate.As[runstate.Store](s.remote.Checked())
	if !ok {
		t.Fatalf("the client's store %T has lost its leases", s.remote.Checked())
	}
	if got := has(store); got != (protocol.BatchCalls{}) {
		t.Fatalf("the client's store offers %+v of a server without batch calls", got)
	}
	created, err := runstate.CreateRuns(ctx, store, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{
		{RunID: "r1", WorkflowName: "w"}, {RunID: "r2", WorkflowName: "w"}}})
	if err != nil || len(created.Runs) != 2 {
		t.Fatalf("CreateRuns by single calls: %+v, %v", created, err)
	}
	claimed, err := runstate.ClaimRuns(ctx, store, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w1", Incarnation: "1"},
		TTL: time.Minute, Max: 2, Start: true})
	if err != nil || len(claimed.Claims) != 2 || claimed.Claims[0].Run.Status != runstate.StatusRunning {
		t.Fatalf("ClaimRuns by single calls: %+v, %v", claimed, err)
	}
	var updates []runstate.UpdateRunParams
	for _, c := range claimed.Claims {
		updates = append(updates, runstate.UpdateRunParams{RunID: c.Run.RunID, ExpectedVersion: c.Run.Version, LeaseToken: c.Lease.Token, Status: "success"})
	}
	updates[1].ExpectedVersion++ // refused by the store, on its own
	updated, err := runstate.UpdateRuns(ctx, store, runstate.UpdateRunsParams{Updates: updates})
	if err != nil || updated.Items[0].Err != nil || !errors.Is(updated.Items[1].Err, runstate.ErrVersionConflict) {
		t.Fatalf("UpdateRuns by single calls: %+v, %v", updated, err)
	}
	if run, err := store.GetRun(ctx, updates[0].RunID); err != nil || run.Status != runstate.StatusSuccess {
		t.Fatalf("GetRun: %+v, %v", run, err)
	}
}

// A refused batch item keeps its index and its error's identity; each
// item of UpdateRuns its own; a call's deadline and a closed client act
// as for single calls.
func TestBatchErrorsKeepTheirIdentity(t *testing.T) {
	ctx := context.Background()
	m := memorytest.Open(t, nil)
	s := serveStore(t, m)
	store := s.remote.Checked()
	if _, err := store.CreateRun(ctx, runstate.CreateRunParams{RunID: "taken", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}

	_, err := featuretest.Must(runstate.As[runstate.BatchCreator](store)).CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{
		{RunID: "new", WorkflowName: "w"}, {RunID: "taken", WorkflowName: "w"}}})
	var item *runstate.BatchItemError
	if !errors.As(err, &item) || item.Index != 1 || !errors.Is(err, runstate.ErrAlreadyExists) {
		t.Fatalf("a batch with a taken RunID at item 1: %v", err)
	}
	if _, err := m.GetRun(ctx, "new"); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatalf("a refused batch created run new: %v", err)
	}

	updates := []runstate.UpdateRunParams{{RunID: "taken", ExpectedVersion: 1, Status: "canceled"},
		{RunID: "missing", ExpectedVersion: 1, Status: "canceled"}, {RunID: "stale", ExpectedVersion: 7, Status: "canceled"}}
	if _, err := store.CreateRun(ctx, runstate.CreateRunParams{RunID: "stale", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	res, err := featuretest.Must(runstate.As[runstate.BatchUpdater](store)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: updates})
	if err != nil {
		t.Fatal(err)
	}
	var conflict *runstate.Error
	if res.Items[0].Err != nil || !errors.Is(res.Items[1].Err, runstate.ErrNotFound) ||
		!errors.As(res.Items[2].Err, &conflict) || conflict.Code != runstate.CodeVersionConflict || conflict.ExpectedVersion != 7 {
		t.Fatalf("items: %+v", res.Items)
	}

	late, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if _, err := featuretest.Must(runstate.As[runstate.BatchClaimer](store)).ClaimRuns(late, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"},
		TTL: time.Minute, Max: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a batch claim past its deadline: %v", err)
	}

	s.remote.Close()
	if _, err := featuretest.Must(runstate.As[runstate.BatchUpdater](store)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: updates[:1]}); !errors.Is(err, runstate.ErrUnavailable) {
		t.Fatalf("a batch on a closed client: %v", err)
	}
}

// failingClaimer claims one run, then fails, as a store that loses its
// connection part-way through a batch claim.
type failingClaimer struct{ *memory.Store }

func (f failingClaimer) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	claim, err := f.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: p.Owner, TTL: p.TTL, Filter: p.Filter})
	if err != nil {
		return runstate.ClaimRunsResult{}, err
	}
	return runstate.ClaimRunsResult{Claims: []runstate.Claim{claim}}, runstate.Unavailable("the store went away", nil)
}

// The claims a batch claim made before its error reach the client with
// the error: they are held, and the caller's.
func TestClaimsBeforeAnErrorCrossWithIt(t *testing.T) {
	ctx := context.Background()
	m := memorytest.Open(t, nil)
	if _, err := m.CreateRun(ctx, runstate.CreateRunParams{RunID: "r1", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	store := serveStore(t, failingClaimer{m}).remote.Checked()
	res, err := featuretest.Must(runstate.As[runstate.BatchClaimer](store)).ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Minute, Max: 2})
	if !errors.Is(err, runstate.ErrUnavailable) || len(res.Claims) != 1 || res.Claims[0].Lease.RunID != "r1" {
		t.Fatalf("ClaimRuns: %+v, %v", res, err)
	}
}
