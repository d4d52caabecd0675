// Package memory is the in-memory reference adapter: every rule of the
// contract, kept plain so that other adapters can be compared with it.
// Nothing survives the process; use it for tests, demos and single-process
// runners that need no history after a restart.
//
// Runs are kept in a map, and in ordered indexes (index.go) that every
// write moves under the same mutex: ListRuns order overall and per status,
// claim order per status for unleased runs, lease expiry per status and
// lease owner for leased ones, as the key-value stores lay out their keys
// (adapters/internal/kvindex). A claim-next, a runnable page or a ListRuns
// page starts by binary search and reads about the runs it returns, not
// every run the store holds: finished runs and live leases cost it nothing.
package memory

import (
	"context"
	"log/slog"
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
	// Logger receives the store's debug lines (every lease decision, see
	// driver.WrapOptions.Logger); nil logs nothing.
	Logger *slog.Logger
}

// Store is a runstate store in memory. Every operation holds one mutex, so
// it is atomic and linearisable (CAS-003, AUD-005, LEASE-002, LIN-001, LIN-002).
type Store struct {
	driver.Store
	data *storage
}

var (
	_ runstate.RunWatcher      = (*Store)(nil)
	_ runstate.RunnableWatcher = (*Store)(nil)
)

// Features implements runstate.RunStateStore: the kit's, with run watches
// and runnable watches.
func (s *Store) Features() runstate.Features { return runstate.FeaturesOf(s) }

// WatchRun implements runstate.RunWatcher: every write of this store
// wakes the run's watchers, within the process.
func (s *Store) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	return s.data.notices.WatchRun(ctx, p)
}

// WatchRunnable implements runstate.RunnableWatcher: a write that made a
// run claimable without a lease (created, released, woken, moved back to
// a claimable status) wakes every watcher, within the process, and so does
// a parked run when it comes due (the store keeps an alarm for the
// earliest).
func (s *Store) WatchRunnable(ctx context.Context, p runstate.WatchRunnableParams) (<-chan struct{}, error) {
	return s.data.claimable.WatchRunnable(ctx, p)
}

// Open returns an empty store.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := &storage{clock: opts.Clock, runs: make(map[string]*record), index: newIndexes()}
	if d.clock == nil {
		d.clock = driver.SystemClock{}
	}
	d.claimable.NextWake(d.nextWake)
	return &Store{Store: driver.WrapWith(d, driver.WrapOptions{Logger: opts.Logger}), data: d}, nil
}

// CreateRuns implements runstate.BatchCreator: all runs or none, under the
// store's mutex.
func (s *Store) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.Store.Features().BatchCreator.CreateRuns(ctx, p)
}

// Close discards the data; later calls return runstate.ErrUnavailable.
func (s *Store) Close() error {
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	s.data.closed, s.data.runs, s.data.index = true, nil, indexes{}
	s.data.notices.Close()
	s.data.claimable.Close()
	return nil
}

// storage is the memory adapter's driver.Driver: a map and its indexes
// under one mutex. It stores and returns copies, so no caller shares its
// values (RUN-008).
type storage struct {
	clock runstate.Clock

	mu     sync.Mutex
	runs   map[string]*record
	index  indexes
	closed bool
	// notices wakes the watchers of a run at each write (RunWatcher);
	// claimable wakes idle workers at a write that made a run claimable
	// without a lease (RunnableWatcher).
	notices   driver.RunNotices
	claimable driver.RunnableNotices
	// reads counts the index entries listings and claims have visited (a
	// run read each), for tests that check a read costs what it returns.
	reads int64
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

// Keeps implements driver.Keeper: parked runs are indexed by wake time
// beside the unleased queue.
func (d *storage) Keeps() driver.Keeps { return driver.Keeps{Parking: true} }

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
	d.insert(r)
	d.notices.Notify(r.Run.RunID)
	d.claimable.Notify() // a new run is queued
	return nil
}

// insert stores a new run and enters it in the indexes.
func (d *storage) insert(r driver.InsertParams) {
	rec := &record{run: r.Run.Clone(), events: []runstate.AuditEvent{r.Created}}
	d.runs[r.Run.RunID] = rec
	d.index.add(rec)
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
		d.insert(r)
		d.notices.Notify(r.Run.RunID)
	}
	d.claimable.Notify() // new runs are queued
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

// apply writes c to r, moving r's index entries with it, under the
// mutex; the watchers it wakes read the run after the mutex is released,
// so they see the write.
func (d *storage) apply(r *record, c driver.Change) {
	if c.Run != nil || c.Lease != nil || len(c.Events) > 0 {
		d.notices.Notify(r.run.RunID)
	}
	before := driver.Placed{Run: r.run, Lease: r.lease}
	d.index.remove(r)
	defer d.index.add(r)
	if c.Run != nil {
		r.run = c.Run.Clone()
	}
	if c.Lease != nil {
		r.lease = *c.Lease
	}
	r.events = append(r.events, c.Events...)
	after := driver.Placed{Run: r.run, Lease: r.lease}
	if driver.BecameClaimable(&before, after) {
		d.claimable.Notify()
	}
	if wake, ok := driver.ParkedUntil(&before, after); ok {
		d.claimable.Parked(wake)
	}
}

// nextWake returns the earliest wake time after after among the parked
// runs, for the notices of runs that come due.
func (d *storage) nextWake(after time.Time) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.index.nextWake(after)
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

// ListRuns implements driver.Driver. It walks ListRuns order, of every run
// or of each status the filter names, from where the page starts (after
// the cursor, from created_from) to created_before: a deep page costs what
// a first one does. With several statuses it takes up to a page from each
// and keeps the first, as their union in order begins with those.
func (d *storage) ListRuns(_ context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	orders := []*ordered[driver.RunPosition]{d.index.created}
	if len(q.Filter.Statuses) > 0 {
		orders = nil
		for _, st := range slices.Compact(slices.Sorted(slices.Values(q.Filter.Statuses))) {
			orders = append(orders, d.index.byStatus(st))
		}
	}
	var start *driver.RunPosition // the later of created_from and the cursor
	if !q.Filter.CreatedFrom.IsZero() {
		start = &driver.RunPosition{CreatedAt: q.Filter.CreatedFrom}
	}
	if q.After != nil && (start == nil || start.Less(*q.After)) {
		start = q.After
	}
	var page []*record
	for _, order := range orders {
		taken := 0
		for pos := range order.from(start) {
			if !q.Filter.CreatedBefore.IsZero() && !pos.CreatedAt.Before(q.Filter.CreatedBefore) {
				break
			}
			r := d.read(pos.RunID)
			if (q.After == nil || q.After.Less(pos)) && q.Filter.Matches(r.run) {
				page = append(page, r)
				if taken++; taken == q.Limit {
					break
				}
			}
		}
	}
	return copies(page, byListOrder, q.Limit), nil
}

// Runnable implements driver.Driver.
func (d *storage) Runnable(_ context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	return copies(d.runnable(q, d.now(), q.Limit), byClaimOrder, q.Limit), nil
}

// runnable returns, in claim order and after q.After, the first limit runs
// that q admits at now, all read at one instant under the mutex (LEASE-010,
// LEASE-020). For each status it reads the head of the claim-order queue,
// the expired leases (in expiry order, so all of them) and the parked runs
// that are due (WAKE-001, in wake order, all of them), and for a
// claimant the leases of its worker's other incarnations, which do not
// bind it (LEASE-012): what the kvindex stores read.
func (d *storage) runnable(q driver.RunnableQuery, now time.Time, limit int) []*record {
	var found []*record
	seen := map[string]bool{}
	consider := func(id string) bool {
		if seen[id] {
			return false
		}
		seen[id] = true
		r := d.read(id)
		if (q.After != nil && !q.After.Less(driver.RunnablePositionOf(r.run))) || !q.Admits(r.run, r.lease, now) {
			return false
		}
		found = append(found, r)
		return true
	}
	for _, st := range slices.Compact(slices.Sorted(slices.Values(q.Statuses))) {
		taken := 0
		for pos := range d.index.queueOf(st).from(q.After) {
			if consider(pos.RunID) {
				if taken++; taken == limit {
					break
				}
			}
		}
		for id := range d.index.expired(st, now) {
			consider(id)
		}
		for id := range d.index.due(st, now) {
			consider(id)
		}
	}
	if q.Claimant != nil {
		for id := range d.index.otherIncarnations(*q.Claimant) {
			consider(id)
		}
	}
	slices.SortFunc(found, func(a, b *record) int { return byClaimOrder(a.run, b.run) })
	return found[:min(len(found), limit)]
}

// read returns the run an index entry names, counting the visit.
func (d *storage) read(runID string) *record {
	d.reads++
	return d.runs[runID]
}

func byListOrder(a, b runstate.RunSnapshot) int {
	return driver.PositionOf(a).Compare(driver.PositionOf(b))
}

func byClaimOrder(a, b runstate.RunSnapshot) int {
	return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
}

// copies returns copies of the first limit runs of found in order.
func copies(found []*record, order func(a, b runstate.RunSnapshot) int, limit int) []runstate.RunSnapshot {
	out := make([]runstate.RunSnapshot, 0, min(len(found), limit))
	for _, r := range found {
		out = append(out, r.run)
	}
	slices.SortFunc(out, order)
	out = out[:min(len(out), limit)]
	for i := range out {
		out[i] = out[i].Clone()
	}
	return out
}

// ClaimNext implements driver.NextClaimer: ClaimNextMany of one.
func (d *storage) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	n, err := d.ClaimNextMany(ctx, q, 1, take)
	return n == 1, err
}

// ClaimNextMany implements driver.BatchNextClaimer: under one hold of the
// mutex it finds the first max runs in claim order and claims them.
func (d *storage) ClaimNextMany(_ context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	if err := d.lock(); err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	best := d.runnable(q, d.now(), max)
	for _, r := range best {
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
