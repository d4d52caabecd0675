// Package memory is the in-memory reference adapter: every rule of the
// contract, kept plain so that other adapters can be compared with it.
// Nothing survives the process; use it for tests, demos and single-process
// runners that need no history after a restart.
package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate/spec"
)

var _ spec.Store = (*Store)(nil)

// Store keeps runs in a map guarded by one mutex, so every operation is
// atomic and linearisable (CAS-003, AUD-005, LEASE-002, LIN-001, LIN-002).
// The zero value is not usable; call New.
type Store struct {
	clock spec.Clock

	mu     sync.Mutex
	runs   map[string]*record
	closed bool
}

type record struct {
	snap   spec.RunSnapshot
	events []spec.AuditEvent
	lease  spec.LeaseState
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that stamps times and decides lease expiry.
func WithClock(c spec.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: spec.SystemClock{}, runs: make(map[string]*record)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Close discards the data; later calls return spec.ErrUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.runs = true, nil
	return nil
}

// lock checks the context (CTX-001), takes the mutex and checks the store is open.
// On success the caller must unlock.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return spec.Unavailable("memory store is closed", nil)
	}
	return nil
}

// lockRun locks the store and returns runID's record, or ErrNotFound
// (RUN-004). On success the caller must unlock.
func (s *Store) lockRun(ctx context.Context, runID string) (*record, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	r, ok := s.runs[runID]
	if !ok {
		s.mu.Unlock()
		return nil, spec.NotFound(runID)
	}
	return r, nil
}

func (s *Store) now() time.Time { return spec.Timestamp(s.clock.Now()) }

// CreateRun implements spec.RunStateStore.
func (s *Store) CreateRun(ctx context.Context, p spec.CreateRunParams) (spec.RunSnapshot, error) {
	if err := spec.PrepareCreate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	if err := s.lock(ctx); err != nil {
		return spec.RunSnapshot{}, err
	}
	defer s.mu.Unlock()
	if _, ok := s.runs[p.RunID]; ok { // RUN-003
		return spec.RunSnapshot{}, spec.AlreadyExists(p.RunID)
	}
	var retried *spec.RunSnapshot
	if r, ok := s.runs[p.RetryOf]; ok && p.RetryOf != "" {
		retried = &r.snap
	}
	snap, ev, err := spec.NewRun(p, retried, s.now())
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	s.runs[p.RunID] = &record{snap: snap, events: []spec.AuditEvent{ev}}
	return snap.Clone(), nil
}

// UpdateRun implements spec.RunStateStore.
func (s *Store) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (spec.RunSnapshot, error) {
	if err := spec.PrepareUpdate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	r, err := s.lockRun(ctx, p.RunID)
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	defer s.mu.Unlock()
	out := spec.ApplyUpdate(r.snap, r.lease, p, s.now())
	if out.Write {
		r.snap = out.Snapshot
	}
	for _, ev := range out.Events {
		ev.Seq = int64(len(r.events)) + 1
		r.events = append(r.events, ev)
	}
	snap, err := out.Result()
	return snap.Clone(), err
}

// GetRun implements spec.RunStateStore.
func (s *Store) GetRun(ctx context.Context, runID string) (spec.RunSnapshot, error) {
	if err := spec.PrepareGet(runID); err != nil {
		return spec.RunSnapshot{}, err
	}
	r, err := s.lockRun(ctx, runID)
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	defer s.mu.Unlock()
	return r.snap.Clone(), nil // a copy: snapshots are values (RUN-008)
}

// ListRuns implements spec.RunStateStore.
func (s *Store) ListRuns(ctx context.Context, p spec.ListRunsParams) (spec.RunPage, error) {
	q, err := spec.PrepareListRuns(p)
	if err != nil {
		return spec.RunPage{}, err
	}
	if err := s.lock(ctx); err != nil {
		return spec.RunPage{}, err
	}
	defer s.mu.Unlock()
	var match []spec.RunSnapshot
	for _, r := range s.runs {
		if q.Filter.Matches(r.snap) && (q.After == nil || q.After.Less(spec.PositionOf(r.snap))) {
			match = append(match, r.snap)
		}
	}
	slices.SortFunc(match, func(a, b spec.RunSnapshot) int { return spec.PositionOf(a).Compare(spec.PositionOf(b)) })
	page, more := cut(match, q.Limit) // the last page has no cursor (LIST-005)
	out := spec.RunPage{Runs: page}
	if more {
		out.NextCursor = spec.PositionOf(page[len(page)-1]).Cursor()
	}
	return out, nil
}

// ListAuditEvents implements spec.RunStateStore.
func (s *Store) ListAuditEvents(ctx context.Context, p spec.ListAuditParams) (spec.AuditPage, error) {
	limit, err := spec.PrepareAuditQuery(p)
	if err != nil {
		return spec.AuditPage{}, err
	}
	r, err := s.lockRun(ctx, p.RunID)
	if err != nil {
		return spec.AuditPage{}, err
	}
	defer s.mu.Unlock()
	// Seq n is at index n-1: pages by seq without gaps or repeats (AUD-006).
	from := min(int(p.AfterSeq), len(r.events))
	events, more := cutCopy(r.events[from:], limit)
	return spec.AuditPage{Events: events, More: more}, nil
}

// ClaimRun implements spec.LeaseStore.
func (s *Store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	c, err := spec.PrepareClaimRun(p)
	if err != nil {
		return spec.Claim{}, err
	}
	r, err := s.lockRun(ctx, c.RunID)
	if err != nil {
		return spec.Claim{}, err
	}
	defer s.mu.Unlock()
	return s.claim(r, c.Owner, c.TTL, c.Statuses)
}

func (s *Store) claim(r *record, owner spec.Owner, ttl time.Duration, statuses []spec.RunStatus) (spec.Claim, error) {
	lease, err := r.lease.Claim(r.snap, owner, ttl, statuses, s.now())
	if err != nil {
		return spec.Claim{}, err
	}
	r.lease = lease
	return spec.Claim{Lease: lease.Lease(r.snap.RunID), Run: r.snap.Clone()}, nil
}

// ClaimNextRun implements spec.LeaseStore.
func (s *Store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	q, err := spec.PrepareClaimNext(p)
	if err != nil {
		return spec.Claim{}, err
	}
	if err := s.lock(ctx); err != nil {
		return spec.Claim{}, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var best *record
	for _, r := range s.runs {
		if q.ClaimableBy(r.snap, r.lease, p.Owner, now) &&
			(best == nil || spec.RunnablePositionOf(r.snap).Less(spec.RunnablePositionOf(best.snap))) {
			best = r
		}
	}
	if best == nil { // LEASE-013
		return spec.Claim{}, &spec.Error{Code: spec.CodeNotFound, Message: "no runnable run matches the filter"}
	}
	return s.claim(best, p.Owner, p.TTL, q.Statuses)
}

// RenewLease implements spec.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, p spec.RenewLeaseParams) (spec.Lease, error) {
	if err := spec.PrepareRenew(p); err != nil {
		return spec.Lease{}, err
	}
	r, err := s.lockRun(ctx, p.RunID)
	if err != nil {
		return spec.Lease{}, err
	}
	defer s.mu.Unlock()
	lease, err := r.lease.Renew(p.RunID, p.Token, p.TTL, s.now())
	if err != nil {
		return spec.Lease{}, err
	}
	r.lease = lease
	return lease.Lease(p.RunID), nil
}

// ReleaseLease implements spec.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, p spec.ReleaseLeaseParams) error {
	if err := spec.PrepareRelease(p); err != nil {
		return err
	}
	r, err := s.lockRun(ctx, p.RunID)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	lease, err := r.lease.Release(p.RunID, p.Token)
	if err != nil {
		return err
	}
	r.lease = lease
	return nil
}

// ListRunnableRuns implements spec.LeaseStore.
func (s *Store) ListRunnableRuns(ctx context.Context, p spec.ListRunnableParams) (spec.RunPage, error) {
	q, err := spec.PrepareRunnable(p.Filter, p.Limit, p.Cursor)
	if err != nil {
		return spec.RunPage{}, err
	}
	if err := s.lock(ctx); err != nil {
		return spec.RunPage{}, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var match []spec.RunSnapshot
	for _, r := range s.runs {
		if q.Runnable(r.snap, r.lease, now) && (q.After == nil || q.After.Less(spec.RunnablePositionOf(r.snap))) {
			match = append(match, r.snap)
		}
	}
	slices.SortFunc(match, func(a, b spec.RunSnapshot) int {
		return spec.RunnablePositionOf(a).Compare(spec.RunnablePositionOf(b))
	})
	page, more := cut(match, q.Limit)
	out := spec.RunPage{Runs: page}
	if more {
		out.NextCursor = spec.RunnablePositionOf(page[len(page)-1]).Cursor()
	}
	return out, nil
}

// cut returns the first limit runs as deep copies and whether more followed.
func cut(runs []spec.RunSnapshot, limit int) ([]spec.RunSnapshot, bool) {
	more := len(runs) > limit
	if more {
		runs = runs[:limit]
	}
	out := make([]spec.RunSnapshot, len(runs))
	for i, r := range runs {
		out[i] = r.Clone()
	}
	return out, more
}

func cutCopy(events []spec.AuditEvent, limit int) ([]spec.AuditEvent, bool) {
	more := len(events) > limit
	if more {
		events = events[:limit]
	}
	return slices.Clone(events), more
}
