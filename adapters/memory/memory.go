// Package memory is the in-memory reference adapter: every rule of the
// contract, kept plain so that other adapters can be compared with it.
// Nothing survives the process; use it for tests, demos and single-process
// runners that need no history after a restart.
package memory

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

var (
	_ runstate.Store        = (*Store)(nil)
	_ runstate.BatchCreator = (*Store)(nil)
)

// Options configure Open.
type Options struct {
	// Clock stamps times and decides lease expiry; defaults to the system clock.
	Clock runstate.Clock
}

// Store is a runstate store in memory. Every operation holds one mutex, so
// it is atomic and linearisable (CAS-003, AUD-005, LEASE-002, LIN-001, LIN-002).
type Store struct {
	driver.Store
	data *storage
}

var _ runstate.RunWatcher = (*Store)(nil)

// WatchRun implements runstate.RunWatcher: every write of this store
// wakes the run's watchers, within the process.
func (s *Store) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	return s.data.notices.WatchRun(ctx, p)
}

// Open returns an empty store.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := &storage{clock: opts.Clock, runs: make(map[string]*record)}
	if d.clock == nil {
		d.clock = driver.SystemClock{}
	}
	return &Store{Store: driver.Wrap(d), data: d}, nil
}

// CreateRuns implements runstate.BatchCreator: all runs or none, under the
// store's mutex.
func (s *Store) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.Store.(runstate.BatchCreator).CreateRuns(ctx, p)
}

// Close discards the data; later calls return runstate.ErrUnavailable.
func (s *Store) Close() error {
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	s.data.closed, s.data.runs = true, nil
	s.data.notices.Close()
	return nil
}

// storage is the memory adapter's driver.Driver: a map under one mutex.
// It stores and returns copies, so no caller shares its values (RUN-008).
type storage struct {
	clock runstate.Clock

	mu     sync.Mutex
	runs   map[string]*record
	closed bool
	// notices wakes the watchers of a run at each write (RunWatcher).
	notices driver.RunNotices
}

var (
	_ driver.Driver           = (*storage)(nil)
	_ driver.NextClaimer      = (*storage)(nil)
	_ driver.BatchInserter    = (*storage)(nil)
	_ driver.BatchModifier    = (*storage)(nil)
	_ driver.BatchNextClaimer = (*storage)(nil)
)

type record struct {
	run    runstate.RunSnapshot
	events []runstate.AuditEvent
	lease  driver.LeaseState
}

// lock takes the mutex and checks the store is open; on success the caller
// must unlock.
func (d *storage) lock() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return runstate.Unavailable("memory store is closed", nil)
	}
	return nil
}

// Now implements driver.Driver.
func (d *storage) Now(context.Context) (time.Time, error) { return d.now(), nil }

func (d *storage) now() time.Time { return driver.Timestamp(d.clock.Now()) }

// Insert implements driver.Driver.
func (d *storage) Insert(_ context.Context, r driver.InsertParams) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if _, ok := d.runs[r.Run.RunID]; ok {
		return runstate.ErrAlreadyExists
	}
	d.runs[r.Run.RunID] = &record{run: r.Run.Clone(), events: []runstate.AuditEvent{r.Created}}
	d.notices.Notify(r.Run.RunID)
	return nil
}

// InsertMany implements driver.BatchInserter: every id is checked before
// any run is stored (BATCH-001).
func (d *storage) InsertMany(_ context.Context, runs []driver.InsertParams) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	for i, r := range runs {
		if _, ok := d.runs[r.Run.RunID]; ok {
			return &runstate.BatchItemError{Index: i, Err: runstate.ErrAlreadyExists}
		}
	}
	for _, r := range runs {
		d.runs[r.Run.RunID] = &record{run: r.Run.Clone(), events: []runstate.AuditEvent{r.Created}}
		d.notices.Notify(r.Run.RunID)
	}
	return nil
}

// ModifyMany implements driver.BatchModifier: the items one after another
// under one hold of the mutex, which makes them one atomic write.
func (d *storage) ModifyMany(_ context.Context, items []driver.ModifyItem) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	for i := range items {
		r, ok := d.runs[items[i].RunID]
		if !ok {
			items[i].Err = runstate.ErrNotFound
			continue
		}
		d.apply(r, items[i].Change(d.current(r)))
	}
	return nil
}

// Modify implements driver.Driver.
func (d *storage) Modify(_ context.Context, runID string, change func(driver.Current) driver.Change) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.ErrNotFound
	}
	d.apply(r, change(d.current(r)))
	return nil
}

func (d *storage) current(r *record) driver.Current {
	return driver.Current{Run: r.run, Lease: r.lease, LastSeq: int64(len(r.events)), Now: d.now()}
}

// apply writes c under the mutex; the watchers it wakes read the run
// after the mutex is released, so they see the write.
func (d *storage) apply(r *record, c driver.Change) {
	if c.Run != nil || c.Lease != nil || len(c.Events) > 0 {
		d.notices.Notify(r.run.RunID)
	}
	if c.Run != nil {
		r.run = c.Run.Clone()
	}
	if c.Lease != nil {
		r.lease = *c.Lease
	}
	r.events = append(r.events, c.Events...)
}

// Get implements driver.Driver.
func (d *storage) Get(_ context.Context, runID string) (runstate.RunSnapshot, error) {
	if err := d.lock(); err != nil {
		return runstate.RunSnapshot{}, err
	}
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.RunSnapshot{}, runstate.ErrNotFound
	}
	return r.run.Clone(), nil
}

// ListRuns implements driver.Driver.
func (d *storage) ListRuns(_ context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	return d.scan(func(r *record) bool {
		return q.Filter.Matches(r.run) && (q.After == nil || q.After.Less(driver.PositionOf(r.run)))
	}, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) }, q.Limit)
}

// Runnable implements driver.Driver.
func (d *storage) Runnable(_ context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	now := d.now()
	return d.scan(func(r *record) bool {
		return q.Admits(r.run, r.lease, now) && (q.After == nil || q.After.Less(driver.RunnablePositionOf(r.run)))
	}, byClaimOrder, q.Limit)
}

func byClaimOrder(a, b runstate.RunSnapshot) int {
	return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
}

// scan returns copies of the first limit runs keep selects, in order.
func (d *storage) scan(keep func(*record) bool, order func(a, b runstate.RunSnapshot) int, limit int) ([]runstate.RunSnapshot, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	first := firstInOrder{order: order, limit: limit}
	for _, r := range d.runs {
		if keep(r) {
			first.offer(r.run)
		}
	}
	match := first.runs
	slices.SortFunc(match, order)
	for i := range match {
		match[i] = match[i].Clone()
	}
	return match, nil
}

// firstInOrder keeps the first limit runs, in order, of those offered: a
// heap whose root is the last one kept, so a page costs a pass over the
// runs, not a sort of every match (a deep page and the first cost alike).
type firstInOrder struct {
	runs  []runstate.RunSnapshot
	order func(a, b runstate.RunSnapshot) int
	limit int
}

func (f *firstInOrder) offer(r runstate.RunSnapshot) {
	switch {
	case len(f.runs) < f.limit:
		heap.Push(f, r)
	case f.limit > 0 && f.order(r, f.runs[0]) < 0:
		f.runs[0] = r
		heap.Fix(f, 0)
	}
}

func (f *firstInOrder) Len() int           { return len(f.runs) }
func (f *firstInOrder) Less(i, j int) bool { return f.order(f.runs[i], f.runs[j]) > 0 }
func (f *firstInOrder) Swap(i, j int)      { f.runs[i], f.runs[j] = f.runs[j], f.runs[i] }
func (f *firstInOrder) Push(x any)         { f.runs = append(f.runs, x.(runstate.RunSnapshot)) }
func (f *firstInOrder) Pop() any {
	last := f.runs[len(f.runs)-1]
	f.runs = f.runs[:len(f.runs)-1]
	return last
}

// ClaimNext implements driver.NextClaimer: one pass over the runs under
// the mutex finds the first in claim order and claims it.
func (d *storage) ClaimNext(_ context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	if err := d.lock(); err != nil {
		return false, err
	}
	defer d.mu.Unlock()
	now := d.now()
	var best *record
	var bestPos driver.RunnablePosition
	for _, r := range d.runs {
		if !q.Admits(r.run, r.lease, now) {
			continue
		}
		if pos := driver.RunnablePositionOf(r.run); best == nil || pos.Less(bestPos) {
			best, bestPos = r, pos
		}
	}
	if best == nil {
		return false, nil
	}
	d.apply(best, take(d.current(best)))
	return true, nil
}

// ClaimNextMany implements driver.BatchNextClaimer: one pass over the runs
// under the mutex finds the first max in claim order, and claims them.
func (d *storage) ClaimNextMany(_ context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	if err := d.lock(); err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	now := d.now()
	first := firstInOrder{order: byClaimOrder, limit: max}
	for _, r := range d.runs {
		if q.Admits(r.run, r.lease, now) {
			first.offer(r.run)
		}
	}
	best := first.runs
	slices.SortFunc(best, byClaimOrder)
	for _, run := range best {
		r := d.runs[run.RunID]
		d.apply(r, take(d.current(r)))
	}
	return len(best), nil
}

// ListAudit implements driver.Driver.
func (d *storage) ListAudit(_ context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	r, ok := d.runs[q.RunID]
	if !ok {
		return nil, runstate.ErrNotFound
	}
	// Seq n is at index n-1: pages by seq without gaps or repeats (AUD-006).
	from := min(int(q.AfterSeq), len(r.events))
	return slices.Clone(r.events[from:min(len(r.events), from+q.Limit)]), nil
}
