package protocol

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/protocol/pb"
)

// StoreInfo is what a server says of its store when a client opens it.
type StoreInfo struct {
	Name, Version string
	// Leases: the store implements runstate.LeaseStore.
	Leases bool
	// Batches are the batch calls the server offers; a server older than
	// them offers none.
	Batches BatchCalls
	// WatchRunnable: the server streams runnable notices (its store is a
	// runstate.RunnableWatcher); a server older than them does not.
	WatchRunnable bool
	// WatchRun: the server streams the notices of a run's writes (its
	// store is a runstate.RunWatcher); a server older than them does not.
	WatchRun bool
	// TestClock: the server runs in test mode and its store reads the test
	// clock, which SetClock moves.
	TestClock bool
	// Features names what the server can do (Feature*): the client's store
	// has exactly these features, and sends no field with meaning that is
	// not among them.
	Features []string
	// ProtocolVersion is the server's, MAJOR.MINOR: as it named it, or
	// 1.6 for a server recognised as one (recognisedVersion); empty from an
	// older server (1.5 or older).
	ProtocolVersion string
}

// BatchCalls names the batch interfaces a server's store implements.
type BatchCalls struct {
	CreateRuns bool // runstate.BatchCreator
	UpdateRuns bool // runstate.BatchUpdater
	ClaimRuns  bool // runstate.BatchClaimer (only with leases)
}

// Route is the connection one call goes over.
type Route struct {
	Client pb.RunStateStoreClient
	// Life, when set, ends when the server is gone for good (a plugin
	// process that exited): a call in flight ends with it, failing with
	// runstate.ErrUnavailable instead of hanging.
	Life context.Context
}

// OpenParams are the input of Open.
type OpenParams struct {
	Route Route
	// Peer names the server in errors ("plugin memory").
	Peer string
	// Config is sent to the server's Opener (a shared store ignores it).
	Config map[string]string
}

// Open sends the server its configuration, which opens its store, and
// returns what the server says of the store. A client calls it once per
// connection, before any other call.
func Open(ctx context.Context, p OpenParams) (StoreInfo, error) {
	resp, err := p.Route.Client.Open(ctx, &pb.OpenRequest{Config: p.Config, ProtocolVersion: Version})
	if err != nil {
		return StoreInfo{}, callError(ctx, p.Peer, p.Route, err)
	}
	info := StoreInfo{Name: resp.Name, Version: resp.Version, TestClock: resp.TestClock, Features: featuresOfResponse(resp),
		ProtocolVersion: resp.ProtocolVersion}
	if info.ProtocolVersion == "" {
		is16, err := answersSetClock(ctx, p.Route)
		if err != nil {
			return StoreInfo{}, runstate.Unavailable(p.Peer+" names no protocol version, and did not answer the call that tells 1.6 from older (SetClock)", callError(ctx, p.Peer, p.Route, err))
		}
		if is16 {
			info.ProtocolVersion = recognisedVersion
			info.Features = append(info.Features, keptSince16(info.Features)...)
		}
	}
	// The fields below say what the names say: one source.
	info.Leases = info.Has(FeatureLeases)
	info.Batches = BatchCalls{CreateRuns: info.Has(FeatureBatchCreate), UpdateRuns: info.Has(FeatureBatchUpdate), ClaimRuns: info.Has(FeatureBatchClaim)}
	info.WatchRunnable, info.WatchRun = info.Has(FeatureWatchRunnable), info.Has(FeatureWatchRun)
	return info, nil
}

// RemoteOptions configure NewRemoteStore.
type RemoteOptions struct {
	// Peer names the server in errors ("gateway host:443").
	Peer string
	// Route picks each call's connection; its error (runstate.ErrUnavailable,
	// saying why there is none) fails the call at once.
	Route func() (Route, error)
	// Info is what the server said of its store when opened (Open).
	Info StoreInfo
	// AcceptNoPrincipal sends writes to a server that does not record
	// principals (one older than FeaturePrincipal) without theirs, instead
	// of refusing them: the audit trail then does not say which principal
	// made them.
	AcceptNoPrincipal bool
}

// RemoteStore is the store a Service serves at the other end of a gRPC
// connection: each call goes there as it is (Checked adds the kit's checks
// on this side). It implements runstate.Store and runstate.LeaseReader; a
// lease call to a store without leases fails on the server's side.
type RemoteStore struct {
	peer  string
	route func() (Route, error)
	info  StoreInfo
	// acceptNoPrincipal: RemoteOptions.AcceptNoPrincipal.
	acceptNoPrincipal bool
	close             context.CancelFunc // set by Connect
	// done ends when the store is closed: watches end with it.
	done    context.Context
	release context.CancelFunc
}

var (
	_ runstate.Store       = (*RemoteStore)(nil)
	_ runstate.LeaseReader = (*RemoteStore)(nil)
)

// NewRemoteStore returns the store served over the connections opts.Route
// picks, each opened already.
func NewRemoteStore(opts RemoteOptions) *RemoteStore {
	done, release := context.WithCancel(context.Background())
	return &RemoteStore{peer: opts.Peer, route: opts.Route, info: opts.Info, acceptNoPrincipal: opts.AcceptNoPrincipal, done: done, release: release}
}

// ConnectParams are the input of Connect.
type ConnectParams struct {
	// Conn is the connection to a Service; closing the store leaves it open.
	Conn grpc.ClientConnInterface
	// Peer names the server in errors ("the store served at /path/store.sock").
	Peer string
	// Config is sent to the server's Opener (a shared store ignores it).
	Config map[string]string
	// AcceptNoPrincipal is RemoteOptions.AcceptNoPrincipal.
	AcceptNoPrincipal bool
}

// Connect opens the store a Service serves on p.Conn and returns it.
func Connect(ctx context.Context, p ConnectParams) (*RemoteStore, error) {
	life, end := context.WithCancel(context.Background())
	route := Route{Client: pb.NewRunStateStoreClient(p.Conn), Life: life}
	info, err := Open(ctx, OpenParams{Route: route, Peer: p.Peer, Config: p.Config})
	if err != nil {
		end()
		return nil, err
	}
	closed := runstate.Unavailable(p.Peer+" is closed", nil)
	r := NewRemoteStore(RemoteOptions{Peer: p.Peer, Info: info, AcceptNoPrincipal: p.AcceptNoPrincipal, Route: func() (Route, error) {
		if life.Err() != nil {
			return Route{}, closed
		}
		return route, nil
	}})
	r.close = end
	return r, nil
}

// Info is what the server said of its store when opened.
func (r *RemoteStore) Info() StoreInfo { return r.info }

// Checked returns the store behind the kit's checks (driver.Checked), so
// that input is validated once on this side of the connection (protobuf
// strings must be valid UTF-8 to be sent at all) and once by the store
// beyond it, with the features the server offers (Features), no others.
func (r *RemoteStore) Checked() runstate.RunStateStore {
	return driver.Checked(r)
}

// Close ends a store Connect returned: calls in flight end, later calls
// fail with runstate.ErrUnavailable. The connection stays open. A store
// NewRemoteStore returned is closed by whoever gives its routes; Close
// ends its watches (WatchRunnable, WatchRun).
func (r *RemoteStore) Close() error {
	r.release()
	if r.close != nil {
		r.close()
	}
	return nil
}

// callError turns a call's failure into the contract's error; ctx is the
// caller's, so that a caller's own deadline is not taken for a dead server.
func callError(ctx context.Context, peer string, route Route, err error) error {
	gone := func() bool { return route.Life != nil && route.Life.Err() != nil }
	if ctx.Err() == nil && gone() {
		return runstate.Unavailable(peer+" has exited", err)
	}
	return fromStatus(err, peer, gone)
}

// bind returns ctx ended with the route's life too, so that a call in
// flight ends when the server is gone, and what releases it.
func (route Route) bind(ctx context.Context) (context.Context, func()) {
	if route.Life == nil {
		return ctx, func() {}
	}
	callCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(route.Life, cancel)
	return callCtx, func() { stop(); cancel() }
}

// call runs one call on the route r picks, its context tied to the route's
// life, so that a call in flight ends when the server is gone.
func call[T any](r *RemoteStore, ctx context.Context, f func(context.Context, pb.RunStateStoreClient) (T, error)) (T, error) {
	var zero T
	route, err := r.route()
	if err != nil {
		return zero, err
	}
	callCtx, end := route.bind(ctx)
	defer end()
	out, err := f(callCtx, route.Client)
	if err != nil {
		return zero, callError(ctx, r.peer, route, err)
	}
	return out, nil
}

// CreateRun implements runstate.RunStateStore.
func (r *RemoteStore) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	if err := r.principal(&p.Actor); err != nil {
		return runstate.RunSnapshot{}, err
	}
	run, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Run, error) {
		return rpc.CreateRun(ctx, createPB(p))
	})
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return fromRun(run), nil
}

// UpdateRun implements runstate.RunStateStore. To a server that cannot
// release the lease in the update's write (FeatureUpdateReleaseLease), an
// update with ReleaseLease is two writes: the update, then ReleaseLease.
func (r *RemoteStore) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if err := r.principal(&p.Actor); err != nil {
		return runstate.RunSnapshot{}, err
	}
	if err := r.wakeAt(p); err != nil {
		return runstate.RunSnapshot{}, err
	}
	release := r.releaseAfter(&p)
	run, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Run, error) {
		return rpc.UpdateRun(ctx, updatePB(p))
	})
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return fromRun(run), release(ctx)
}

// GetRun implements runstate.RunStateStore.
func (r *RemoteStore) GetRun(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	run, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Run, error) {
		return rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	})
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return fromRun(run), nil
}

// ListRuns implements runstate.RunStateStore.
func (r *RemoteStore) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	page, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.RunPage, error) {
		return rpc.ListRuns(ctx, &pb.ListRunsRequest{Statuses: p.Statuses, WorkflowName: p.WorkflowName, Labels: p.Labels,
			CreatedFrom: ts(p.CreatedFrom), CreatedBefore: ts(p.CreatedBefore), Limit: int64(p.Limit), Cursor: p.Cursor})
	})
	if err != nil {
		return runstate.RunPage{}, err
	}
	return fromRunPage(page), nil
}

// ListAuditEvents implements runstate.RunStateStore.
func (r *RemoteStore) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	page, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.AuditPage, error) {
		return rpc.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{RunId: p.RunID, AfterSeq: p.AfterSeq, Limit: int64(p.Limit)})
	})
	if err != nil {
		return runstate.AuditPage{}, err
	}
	out := runstate.AuditPage{More: page.More}
	for _, e := range page.Events {
		out.Events = append(out.Events, fromEvent(e))
	}
	return out, nil
}

// ClaimRun implements runstate.LeaseStore.
func (r *RemoteStore) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	c, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Claim, error) {
		return rpc.ClaimRun(ctx, &pb.ClaimRunRequest{RunId: p.RunID, Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Statuses: p.Statuses})
	})
	if err != nil {
		return runstate.Claim{}, err
	}
	return fromClaim(c), nil
}

// ClaimNextRun implements runstate.LeaseStore.
func (r *RemoteStore) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	c, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Claim, error) {
		return rpc.ClaimNextRun(ctx, &pb.ClaimNextRunRequest{Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Filter: filterPB(p.Filter)})
	})
	if err != nil {
		return runstate.Claim{}, err
	}
	return fromClaim(c), nil
}

// RenewLease implements runstate.LeaseStore.
func (r *RemoteStore) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	l, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Lease, error) {
		return rpc.RenewLease(ctx, &pb.RenewLeaseRequest{RunId: p.RunID, Token: p.Token, Ttl: durationpb.New(p.TTL)})
	})
	if err != nil {
		return runstate.Lease{}, err
	}
	return fromLease(l), nil
}

// ReleaseLease implements runstate.LeaseStore.
func (r *RemoteStore) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	_, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.ReleaseLeaseResponse, error) {
		return rpc.ReleaseLease(ctx, &pb.ReleaseLeaseRequest{RunId: p.RunID, Token: p.Token})
	})
	return err
}

// ListRunnableRuns implements runstate.LeaseStore.
func (r *RemoteStore) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	page, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.RunPage, error) {
		return rpc.ListRunnableRuns(ctx, &pb.ListRunnableRunsRequest{Filter: filterPB(p.Filter), Limit: int64(p.Limit), Cursor: p.Cursor})
	})
	if err != nil {
		return runstate.RunPage{}, err
	}
	return fromRunPage(page), nil
}

// GetLease implements runstate.LeaseReader.
func (r *RemoteStore) GetLease(ctx context.Context, runID string) (runstate.Lease, error) {
	l, err := call(r, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Lease, error) {
		return rpc.GetLease(ctx, &pb.GetRunRequest{RunId: runID})
	})
	if err != nil {
		return runstate.Lease{}, err
	}
	return fromLease(l), nil
}
