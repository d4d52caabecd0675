package protocol

import (
	"context"
	"io"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol/pb"
)

// Opener makes a store from the configuration a client sends with Open.
// A store with a Close() error method is closed with the Service.
type Opener func(ctx context.Context, config map[string]string) (runstate.RunStateStore, error)

// ServiceOptions configure NewService: either Open or Store.
type ServiceOptions struct {
	// Name and Version name the store in clients' logs and reports;
	// Version defaults to "unknown".
	Name, Version string
	// Open makes the store when a client opens it; one client may.
	Open Opener
	// Store is shared instead, with any number of clients: its owner opened
	// it and closes it, and a client's Open only reports it (its
	// configuration is ignored).
	Store runstate.RunStateStore
	// Watcher announces the store's runnable runs (WatchRunnable); it
	// defaults to the store when that is a runstate.RunnableWatcher.
	Watcher runstate.RunnableWatcher
	// RunWatcher announces the writes of the store's runs (WatchRun); it
	// defaults to the store when that is a runstate.RunWatcher.
	RunWatcher runstate.RunWatcher
	// Clock, for a server started in test mode (certification), is the
	// test clock that SetClock moves: Open hands it to the Opener
	// (TestClockFrom); a shared Store is taken to read it already. Nil
	// refuses SetClock.
	Clock *TestClock
}

// Service is the protocol's gRPC service over one store.
type Service struct {
	pb.UnimplementedRunStateStoreServer
	open  Opener // nil for a shared store
	info  StoreInfo
	clock *TestClock // nil: SetClock is refused

	mu    sync.RWMutex
	store runstate.RunStateStore
	// watcher and runWatch, when set, announce in place of the store's
	// own watches (ServiceOptions).
	watcher  runstate.RunnableWatcher
	runWatch runstate.RunWatcher
}

// NewService returns the service of the store opts describes.
func NewService(opts ServiceOptions) *Service {
	s := &Service{open: opts.Open, info: StoreInfo{Name: opts.Name, Version: opts.Version}, clock: opts.Clock}
	if s.info.Version == "" {
		s.info.Version = "unknown"
	}
	if s.open == nil {
		if s.clock != nil {
			s.clock.read.Store(true)
		}
		s.store, s.watcher, s.runWatch = opts.Store, opts.Watcher, opts.RunWatcher
	}
	return s
}

// Register serves s on r.
func (s *Service) Register(r grpc.ServiceRegistrar) { pb.RegisterRunStateStoreServer(r, s) }

// Close closes the store Open made, when it has a Close method; calls
// after it fail with runstate.ErrUnavailable. A shared store is its
// owner's to close.
func (s *Service) Close() {
	if s.open == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.store.(io.Closer); ok {
		if err := c.Close(); err != nil {
			slog.Error("closing the store", "error", err)
		}
	}
	s.store = nil
}

// Open implements the protocol's Open: it opens the store (a shared one is
// open already) and reports it.
func (s *Service) Open(ctx context.Context, r *pb.OpenRequest) (*pb.OpenResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != nil {
		if s.store != nil {
			return nil, toStatus(runstate.InvalidArgument("open", "the served store is open already"))
		}
		if s.clock != nil {
			ctx = WithTestClock(ctx, s.clock)
		}
		store, err := s.open(ctx, r.Config)
		if err != nil {
			return nil, toStatus(err)
		}
		s.store = store
	}
	f := runstate.Resolve(s.store)
	if s.watcher != nil && f.Leases != nil {
		f.RunnableWatcher = s.watcher
	}
	if s.runWatch != nil {
		f.RunWatcher = s.runWatch
	}
	resp := openResponse(f)
	resp.Name, resp.Version = s.info.Name, s.info.Version
	resp.TestClock = s.clock != nil && s.clock.read.Load()
	return resp, nil
}

// get returns the store, or an error when no client has opened it.
func (s *Service) get() (runstate.RunStateStore, runstate.LeaseStore, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.store == nil {
		return nil, nil, toStatus(runstate.Unavailable("the served store is not open: the client must call Open first", nil))
	}
	leases, _ := runstate.As[runstate.LeaseStore](s.store)
	return s.store, leases, nil
}

func (s *Service) leaseStore() (runstate.LeaseStore, error) {
	_, l, err := s.get()
	if err == nil && l == nil {
		err = toStatus(runstate.InvalidArgument("leases", "the served store does not implement runstate.LeaseStore"))
	}
	return l, err
}

// CreateRun implements the protocol's CreateRun.
func (s *Service) CreateRun(ctx context.Context, r *pb.CreateRunRequest) (*pb.Run, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	run, err := st.CreateRun(ctx, fromCreate(r))
	return runPB(run), toStatus(err)
}

// UpdateRun implements the protocol's UpdateRun.
func (s *Service) UpdateRun(ctx context.Context, r *pb.UpdateRunRequest) (*pb.Run, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	run, err := st.UpdateRun(ctx, fromUpdate(r))
	return runPB(run), toStatus(err)
}

// GetRun implements the protocol's GetRun.
func (s *Service) GetRun(ctx context.Context, r *pb.GetRunRequest) (*pb.Run, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	run, err := st.GetRun(ctx, r.RunId)
	return runPB(run), toStatus(err)
}

// ListRuns implements the protocol's ListRuns.
func (s *Service) ListRuns(ctx context.Context, r *pb.ListRunsRequest) (*pb.RunPage, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	page, err := st.ListRuns(ctx, runstate.ListRunsParams{Statuses: r.Statuses, WorkflowName: r.WorkflowName, Labels: emptyNil(r.Labels),
		CreatedFrom: fromTS(r.CreatedFrom), CreatedBefore: fromTS(r.CreatedBefore), Limit: int(r.Limit), Cursor: r.Cursor})
	return runPagePB(page), toStatus(err)
}

// ListAuditEvents implements the protocol's ListAuditEvents.
func (s *Service) ListAuditEvents(ctx context.Context, r *pb.ListAuditEventsRequest) (*pb.AuditPage, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	page, err := st.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: r.RunId, AfterSeq: r.AfterSeq, Limit: int(r.Limit)})
	out := &pb.AuditPage{More: page.More}
	for _, e := range page.Events {
		out.Events = append(out.Events, eventPB(e))
	}
	return out, toStatus(err)
}

// ClaimRun implements the protocol's ClaimRun.
func (s *Service) ClaimRun(ctx context.Context, r *pb.ClaimRunRequest) (*pb.Claim, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	c, err := ls.ClaimRun(ctx, runstate.ClaimRunParams{RunID: r.RunId, Owner: fromOwner(r.Owner), TTL: fromDuration(r.Ttl), Statuses: r.Statuses})
	return claimPB(c), toStatus(err)
}

// ClaimNextRun implements the protocol's ClaimNextRun.
func (s *Service) ClaimNextRun(ctx context.Context, r *pb.ClaimNextRunRequest) (*pb.Claim, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	c, err := ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: fromOwner(r.Owner), TTL: fromDuration(r.Ttl), Filter: fromFilter(r.Filter)})
	return claimPB(c), toStatus(err)
}

// RenewLease implements the protocol's RenewLease.
func (s *Service) RenewLease(ctx context.Context, r *pb.RenewLeaseRequest) (*pb.Lease, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	l, err := ls.RenewLease(ctx, runstate.RenewLeaseParams{RunID: r.RunId, Token: r.Token, TTL: fromDuration(r.Ttl)})
	return leasePB(l), toStatus(err)
}

// ReleaseLease implements the protocol's ReleaseLease.
func (s *Service) ReleaseLease(ctx context.Context, r *pb.ReleaseLeaseRequest) (*pb.ReleaseLeaseResponse, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	return &pb.ReleaseLeaseResponse{}, toStatus(ls.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: r.RunId, Token: r.Token}))
}

// ListRunnableRuns implements the protocol's ListRunnableRuns.
func (s *Service) ListRunnableRuns(ctx context.Context, r *pb.ListRunnableRunsRequest) (*pb.RunPage, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	page, err := ls.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: fromFilter(r.Filter), Limit: int(r.Limit), Cursor: r.Cursor})
	return runPagePB(page), toStatus(err)
}

// GetLease answers who holds a run's lease, when the store can tell
// (runstate.LeaseReader); UNIMPLEMENTED otherwise.
func (s *Service) GetLease(ctx context.Context, r *pb.GetRunRequest) (*pb.Lease, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	reader, ok := runstate.As[runstate.LeaseReader](st)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "the store does not tell who holds a lease (runstate.LeaseReader)")
	}
	l, err := reader.GetLease(ctx, r.RunId)
	return leasePB(l), toStatus(err)
}

// openResponse announces the features f, by name and, for clients older
// than the names, in the fields they read.
func openResponse(f runstate.Features) *pb.OpenResponse {
	return &pb.OpenResponse{ProtocolVersion: Version, Features: append(featureNames(f), keptFields...), Leases: f.Leases != nil, CreateRuns: f.BatchCreator != nil,
		UpdateRuns: f.BatchUpdater != nil, ClaimRuns: f.BatchClaimer != nil, WatchRunnable: f.RunnableWatcher != nil, WatchRun: f.RunWatcher != nil}
}

// featureOf returns the open store's feature F (runstate.As), named
// what; a store without it is answered UNIMPLEMENTED, as a server without
// the call would answer, so that a client treats both alike.
func featureOf[F any](s *Service, what string) (F, error) {
	st, _, err := s.get()
	if err != nil {
		var none F
		return none, err
	}
	f, ok := runstate.As[F](st)
	if !ok {
		return f, status.Errorf(codes.Unimplemented, "the store does not implement %s", what)
	}
	return f, nil
}

// CreateRuns implements the protocol's CreateRuns, when the store is a
// runstate.BatchCreator.
func (s *Service) CreateRuns(ctx context.Context, r *pb.CreateRunsRequest) (*pb.CreateRunsResponse, error) {
	creator, err := featureOf[runstate.BatchCreator](s, "runstate.BatchCreator")
	if err != nil {
		return nil, err
	}
	p := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, len(r.Runs))}
	for i, run := range r.Runs {
		p.Runs[i] = fromCreate(run)
	}
	res, err := creator.CreateRuns(ctx, p)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.CreateRunsResponse{Runs: make([]*pb.Run, len(res.Runs))}
	for i, run := range res.Runs {
		out.Runs[i] = runPB(run)
	}
	return out, nil
}

// UpdateRuns implements the protocol's UpdateRuns, when the store is a
// runstate.BatchUpdater: each item's error crosses with its identity.
func (s *Service) UpdateRuns(ctx context.Context, r *pb.UpdateRunsRequest) (*pb.UpdateRunsResponse, error) {
	updater, err := featureOf[runstate.BatchUpdater](s, "runstate.BatchUpdater")
	if err != nil {
		return nil, err
	}
	p := runstate.UpdateRunsParams{Updates: make([]runstate.UpdateRunParams, len(r.Updates))}
	for i, u := range r.Updates {
		p.Updates[i] = fromUpdate(u)
	}
	res, err := updater.UpdateRuns(ctx, p)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.UpdateRunsResponse{Items: make([]*pb.UpdateRunsItem, len(res.Items))}
	for i, item := range res.Items {
		if item.Err != nil {
			out.Items[i] = &pb.UpdateRunsItem{Error: errorDetail(item.Err)}
		} else {
			out.Items[i] = &pb.UpdateRunsItem{Run: runPB(item.Run)}
		}
	}
	return out, nil
}

// ClaimRuns implements the protocol's ClaimRuns, when the store is a
// runstate.BatchClaimer with leases. An error after claims answers them
// with the error beside them: they are held, and the caller's to use.
func (s *Service) ClaimRuns(ctx context.Context, r *pb.ClaimRunsRequest) (*pb.ClaimRunsResponse, error) {
	// Batch claims need leases; Open offers them only then.
	claimer, err := featureOf[runstate.BatchClaimer](s, "runstate.BatchClaimer with runstate.LeaseStore")
	if err != nil {
		return nil, err
	}
	res, err := claimer.ClaimRuns(ctx, fromClaimRuns(r))
	if err != nil && len(res.Claims) == 0 {
		return nil, toStatus(err)
	}
	out := &pb.ClaimRunsResponse{Claims: make([]*pb.Claim, len(res.Claims))}
	for i, c := range res.Claims {
		out.Claims[i] = claimPB(c)
	}
	if err != nil {
		out.Error = errorDetail(err)
	}
	return out, nil
}
