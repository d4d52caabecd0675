package conformance_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
)

// Driver-level single-fault stores: integrators write drivers, not stores,
// so the catalogue also holds drivers with one mistake each, served by the
// kit (driver.Wrap). mapDriver is the correct driver they change: a map
// under one mutex, with its own claim-next and lease read.

type mapRecord struct {
	run    runstate.RunSnapshot
	events []runstate.AuditEvent
	lease  driver.LeaseState
}

type mapDriver struct {
	clock runstate.Clock
	mu    sync.Mutex
	runs  map[string]*mapRecord
}

var (
	_ driver.Driver      = (*mapDriver)(nil)
	_ driver.NextClaimer = (*mapDriver)(nil)
	_ driver.LeaseReader = (*mapDriver)(nil)
)

func newMapDriver(clock runstate.Clock) *mapDriver {
	return &mapDriver{clock: clock, runs: map[string]*mapRecord{}}
}

func (d *mapDriver) Now(context.Context) (time.Time, error) { return d.now(), nil }

func (d *mapDriver) now() time.Time { return driver.Timestamp(d.clock.Now()) }

func (d *mapDriver) Insert(_ context.Context, p driver.InsertParams) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.runs[p.Run.RunID]; ok {
		return runstate.ErrAlreadyExists
	}
	d.runs[p.Run.RunID] = &mapRecord{run: p.Run.Clone(), events: []runstate.AuditEvent{p.Created}}
	return nil
}

func (d *mapDriver) current(r *mapRecord) driver.Current {
	return driver.Current{Run: r.run, Lease: r.lease, LastSeq: int64(len(r.events)), Now: d.now()}
}

// apply stores c; the caller holds the mutex.
func (d *mapDriver) apply(r *mapRecord, c driver.Change) {
	if c.Run != nil {
		r.run = c.Run.Clone()
	}
	if c.Lease != nil {
		r.lease = *c.Lease
	}
	r.events = append(r.events, c.Events...)
}

func (d *mapDriver) Modify(_ context.Context, runID string, change func(driver.Current) driver.Change) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.ErrNotFound
	}
	d.apply(r, change(d.current(r)))
	return nil
}

func (d *mapDriver) Get(_ context.Context, runID string) (runstate.RunSnapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.RunSnapshot{}, runstate.ErrNotFound
	}
	return r.run.Clone(), nil
}

// selectRuns returns copies of the first limit runs keep selects, in order.
func (d *mapDriver) selectRuns(keep func(*mapRecord) bool, order func(a, b runstate.RunSnapshot) int, limit int) []runstate.RunSnapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []runstate.RunSnapshot
	for _, r := range d.runs {
		if keep(r) {
			out = append(out, r.run.Clone())
		}
	}
	slices.SortFunc(out, order)
	return out[:min(limit, len(out))]
}

func byListOrder(a, b runstate.RunSnapshot) int {
	return driver.PositionOf(a).Compare(driver.PositionOf(b))
}

func byRunnableOrder(a, b runstate.RunSnapshot) int {
	return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
}

func (d *mapDriver) ListRuns(_ context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	return d.selectRuns(func(r *mapRecord) bool {
		return q.Filter.Matches(r.run) && (q.After == nil || q.After.Less(driver.PositionOf(r.run)))
	}, byListOrder, q.Limit), nil
}

func (d *mapDriver) ListAudit(_ context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[q.RunID]
	if !ok {
		return nil, runstate.ErrNotFound
	}
	from := min(int(q.AfterSeq), len(r.events))
	return slices.Clone(r.events[from:min(len(r.events), from+q.Limit)]), nil
}

func (d *mapDriver) Runnable(_ context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	now := d.now()
	return d.selectRuns(func(r *mapRecord) bool {
		return q.Admits(r.run, r.lease, now) && (q.After == nil || q.After.Less(driver.RunnablePositionOf(r.run)))
	}, byRunnableOrder, q.Limit), nil
}

func (d *mapDriver) ClaimNext(_ context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	var best *mapRecord
	for _, r := range d.runs {
		if q.Admits(r.run, r.lease, now) && (best == nil || byRunnableOrder(r.run, best.run) < 0) {
			best = r
		}
	}
	if best == nil {
		return false, nil
	}
	d.apply(best, take(d.current(best)))
	return true, nil
}

func (d *mapDriver) GetLease(_ context.Context, runID string) (driver.LeaseState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return driver.LeaseState{}, runstate.ErrNotFound
	}
	return r.lease, nil
}

// driverTarget serves the driver that fault makes of a correct mapDriver
// through the kit, with a manual clock and every capability.
func driverTarget(fault func(*mapDriver) driver.Driver) conformance.Target {
	return conformance.Target{
		Name:         "driver mutant",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
		NewHarness: func(context.Context) (conformance.Harness, error) {
			clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			return &kitHarness{store: driver.Wrap(fault(newMapDriver(clock))), clock: clock}, nil
		},
	}
}

type kitHarness struct {
	store runstate.Store
	clock *conformance.ManualClock
}

func (h *kitHarness) Store() runstate.RunStateStore                              { return h.store }
func (h *kitHarness) OpenHandle(context.Context) (runstate.RunStateStore, error) { return h.store, nil }
func (h *kitHarness) Advance(d time.Duration)                                    { h.clock.Advance(d) }
func (h *kitHarness) Close(context.Context) error                                { return nil }

// ---- the faults, one method each ----

// staleAppend is Modify as a key-value store with compare-and-set on the
// run's key alone would write it: it reads, lets go, and writes back only
// if the snapshot's version is unchanged; a change that only appends
// events (a refused write to a terminal run) is appended unguarded, at
// the Seq numbers its stale read gave it, so racing refusals repeat one.
type staleAppend struct{ *mapDriver }

func (d staleAppend) Modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	for {
		d.mu.Lock()
		r, ok := d.runs[runID]
		if !ok {
			d.mu.Unlock()
			return runstate.ErrNotFound
		}
		cur := d.current(r)
		d.mu.Unlock()
		c := change(cur)
		pause(0) // between the read and the write
		d.mu.Lock()
		if c.Run != nil && r.run.Version != cur.Run.Version {
			d.mu.Unlock()
			continue // the snapshot moved: read again
		}
		d.apply(r, c)
		d.mu.Unlock()
		return nil
	}
}

// overwritingInsert stores a run over an existing one with the same id.
type overwritingInsert struct{ *mapDriver }

func (d overwritingInsert) Insert(_ context.Context, p driver.InsertParams) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs[p.Run.RunID] = &mapRecord{run: p.Run.Clone(), events: []runstate.AuditEvent{p.Created}}
	return nil
}

// sharedGet returns the snapshot it keeps, its labels map included.
type sharedGet struct{ *mapDriver }

func (d sharedGet) Get(_ context.Context, runID string) (runstate.RunSnapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.RunSnapshot{}, runstate.ErrNotFound
	}
	return r.run, nil
}

// millisecondIndex orders and pages runs by created_at cut to
// milliseconds, as an index keyed by a millisecond timestamp would.
type millisecondIndex struct{ *mapDriver }

func msPosition(r runstate.RunSnapshot) driver.RunPosition {
	return driver.RunPosition{CreatedAt: r.CreatedAt.Truncate(time.Millisecond), RunID: r.RunID}
}

func (d millisecondIndex) ListRuns(_ context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	var after *driver.RunPosition
	if q.After != nil {
		after = &driver.RunPosition{CreatedAt: q.After.CreatedAt.Truncate(time.Millisecond), RunID: q.After.RunID}
	}
	return d.selectRuns(func(r *mapRecord) bool {
		return q.Filter.Matches(r.run) && (after == nil || after.Less(msPosition(r.run)))
	}, func(a, b runstate.RunSnapshot) int { return msPosition(a).Compare(msPosition(b)) }, q.Limit), nil
}

// auditPageShort returns one event fewer than asked after the first page.
type auditPageShort struct{ *mapDriver }

func (d auditPageShort) ListAudit(ctx context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	evs, err := d.mapDriver.ListAudit(ctx, q)
	if q.AfterSeq > 0 && len(evs) == q.Limit && len(evs) > 1 {
		evs = evs[:len(evs)-1] // the kit reads limit+1: the page ends as if complete
	}
	return evs, err
}

// chunkedRunnable reads the candidates a few at a time, each chunk at its
// own instant, as a scan in batches of an index would.
type chunkedRunnable struct {
	*mapDriver
	chunk int
}

func (d chunkedRunnable) Runnable(ctx context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	var out []runstate.RunSnapshot
	for len(out) < q.Limit {
		part := q
		part.Limit = min(d.chunk, q.Limit-len(out))
		if len(out) > 0 {
			last := driver.RunnablePositionOf(out[len(out)-1])
			part.After = &last
		}
		runs, err := d.mapDriver.Runnable(ctx, part)
		if err != nil {
			return nil, err
		}
		out = append(out, runs...)
		if len(runs) < part.Limit {
			break
		}
		pause(0) // the next chunk is read at another instant
	}
	return out, nil
}

// firstFoundClaimer claims the first admitted run it meets, in map order.
type firstFoundClaimer struct{ *mapDriver }

func (d firstFoundClaimer) ClaimNext(_ context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for _, r := range d.runs {
		if q.Admits(r.run, r.lease, now) {
			d.apply(r, take(d.current(r)))
			return true, nil
		}
	}
	return false, nil
}

// releasedLeaseForgotten reads a released lease as never issued.
type releasedLeaseForgotten struct{ *mapDriver }

func (d releasedLeaseForgotten) GetLease(ctx context.Context, runID string) (driver.LeaseState, error) {
	l, err := d.mapDriver.GetLease(ctx, runID)
	if l.Released {
		return driver.LeaseState{}, err
	}
	return l, err
}

// leaseReadFromCache answers the first lease it read for a run ever after,
// as a cache in front of the lease's key would.
type leaseReadFromCache struct {
	*mapDriver
	cache *overrides[driver.LeaseState]
}

func (d leaseReadFromCache) GetLease(ctx context.Context, runID string) (driver.LeaseState, error) {
	if l, ok := d.cache.get(runID); ok {
		return l, nil
	}
	l, err := d.mapDriver.GetLease(ctx, runID)
	if err == nil && l.Token > 0 {
		d.cache.set(runID, l)
	}
	return l, err
}

// driverMutants is the catalogue of single-fault drivers.
func driverMutants() []targetMutant {
	t := func(fault func(*mapDriver) driver.Driver) func() conformance.Target {
		return func() conformance.Target { return driverTarget(fault) }
	}
	return []targetMutant{
		{"AUD-009", "driver: Modify appends a refusal's event from a stale read", t(func(d *mapDriver) driver.Driver { return staleAppend{d} })},
		{"RUN-003", "driver: Insert overwrites an existing run", t(func(d *mapDriver) driver.Driver { return overwritingInsert{d} })},
		{"RUN-008", "driver: Get returns the value it keeps", t(func(d *mapDriver) driver.Driver { return sharedGet{d} })},
		{"LIST-005", "driver: ListRuns orders by created_at cut to milliseconds", t(func(d *mapDriver) driver.Driver { return millisecondIndex{d} })},
		{"AUD-006", "driver: ListAudit's later pages one event short", t(func(d *mapDriver) driver.Driver { return auditPageShort{d} })},
		{"LEASE-020", "driver: Runnable reads its candidates in chunks", t(func(d *mapDriver) driver.Driver { return chunkedRunnable{d, 2} })},
		{"LEASE-003", "driver: ClaimNext takes the first admitted run it meets", t(func(d *mapDriver) driver.Driver { return firstFoundClaimer{d} })},
		{"LEASE-021", "driver: GetLease forgets released leases", t(func(d *mapDriver) driver.Driver { return releasedLeaseForgotten{d} })},
		{"LEASE-021", "driver: GetLease answers from a cache", t(func(d *mapDriver) driver.Driver {
			return leaseReadFromCache{d, &overrides[driver.LeaseState]{}}
		})},
	}
}

// The driver the mutants change passes every rule they break, so their
// failures come from their faults. A wrapped driver watches nothing
// (runstate.RunWatcher is a store's, beside the kit), so WATCH is left out
// as FAULT is.
func TestCorrectMapDriverPassesEveryRule(t *testing.T) {
	rules, err := conformance.Select(nil, []string{"FAULT", "WATCH"})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range conformance.RunRules(context.Background(), driverTarget(func(d *mapDriver) driver.Driver { return d }), rules, nil) {
		if res.Outcome != conformance.Pass && !(res.Outcome == conformance.Skip && strings.Contains(res.Detail, "BatchCreator")) {
			t.Errorf("%s: %s %s %v", res.Rule.ID, res.Outcome, res.Detail, res.Failures)
		}
	}
}
