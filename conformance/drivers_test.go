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

// Keeps implements driver.Keeper: its searches judge by RunnableQuery.Admits.
func (d *mapDriver) Keeps() driver.Keeps { return driver.Keeps{Parking: true} }

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
	return d.runnable(q, q.Admits), nil
}

// admission decides whether a run with its lease is a claim candidate at
// now: the kit's is RunnableQuery.Admits; a mutant has its own.
type admission func(s runstate.RunSnapshot, l driver.LeaseState, now time.Time) bool

// runnable is Runnable with the candidates that admits selects.
func (d *mapDriver) runnable(q driver.RunnableQuery, admits admission) []runstate.RunSnapshot {
	now := d.now()
	return d.selectRuns(func(r *mapRecord) bool {
		return admits(r.run, r.lease, now) && (q.After == nil || q.After.Less(driver.RunnablePositionOf(r.run)))
	}, byRunnableOrder, q.Limit)
}

func (d *mapDriver) ClaimNext(_ context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	return d.claimNext(q.Admits, take), nil
}

// claimNext is ClaimNext of the first run in claim order that admits selects.
func (d *mapDriver) claimNext(admits admission, take func(driver.Current) driver.Change) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	var best *mapRecord
	for _, r := range d.runs {
		if admits(r.run, r.lease, now) && (best == nil || byRunnableOrder(r.run, best.run) < 0) {
			best = r
		}
	}
	if best == nil {
		return false
	}
	d.apply(best, take(d.current(best)))
	return true
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
	return driverTargetOn(true, fault)
}

// driverTargetOn is driverTarget on a manual clock (controlled) or on the
// system clock, as a driver out of process is certified.
func driverTargetOn(controlled bool, fault func(*mapDriver) driver.Driver) conformance.Target {
	return conformance.Target{
		Name:         "driver mutant",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: controlled},
		NewHarness: func(context.Context) (conformance.Harness, error) {
			clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			var storeClock runstate.Clock = clock
			if !controlled {
				storeClock = driver.SystemClock{}
			}
			return &kitHarness{store: driver.Wrap(fault(newMapDriver(storeClock))), clock: clock}, nil
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

// candidatesMisjudged selects claim candidates by an admission of its own
// instead of RunnableQuery.Admits, in Runnable, in ClaimNext or in both,
// as a driver whose queries restate the kit's rule may.
type candidatesMisjudged struct {
	*mapDriver
	admits                  func(driver.RunnableQuery) admission
	inRunnable, inClaimNext bool
}

// judge is the admission Runnable or ClaimNext uses: its own where it
// misjudges, else the kit's.
func (d candidatesMisjudged) judge(q driver.RunnableQuery, misjudged bool) admission {
	if misjudged {
		return d.admits(q)
	}
	return q.Admits
}

func (d candidatesMisjudged) Runnable(_ context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	return d.runnable(q, d.judge(q, d.inRunnable)), nil
}

func (d candidatesMisjudged) ClaimNext(_ context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	return d.claimNext(d.judge(q, d.inClaimNext), take), nil
}

// misjudging returns the fault of a driver that admits candidates by
// admits in Runnable, ClaimNext or both.
func misjudging(admits func(driver.RunnableQuery) admission, inRunnable, inClaimNext bool) func(*mapDriver) driver.Driver {
	return func(d *mapDriver) driver.Driver { return candidatesMisjudged{d, admits, inRunnable, inClaimNext} }
}

// anyLabel admits as q does, but a run carrying any one of q's label pairs
// matches, as a query joining the pairs with OR would.
func anyLabel(q driver.RunnableQuery) admission {
	unlabelled := q
	unlabelled.Labels = nil
	return func(s runstate.RunSnapshot, l driver.LeaseState, now time.Time) bool {
		if !unlabelled.Admits(s, l, now) {
			return false
		}
		for k, v := range q.Labels {
			if got, ok := s.Labels[k]; ok && got == v {
				return true
			}
		}
		return len(q.Labels) == 0
	}
}

// aSecondEarly admits as q does, but judges leases a second ahead: a lease
// that expires within the second counts as expired, as a query comparing
// expires_at with now plus a margin would.
func aSecondEarly(q driver.RunnableQuery) admission {
	return func(s runstate.RunSnapshot, l driver.LeaseState, now time.Time) bool {
		return q.Admits(s, l, now.Add(time.Second))
	}
}

// rowStampedOnEveryWrite sets the run's updated_at to the write's time on
// every write of the run, a lease's alone included, as a row whose
// updated_at column is declared ON UPDATE CURRENT_TIMESTAMP does.
type rowStampedOnEveryWrite struct{ *mapDriver }

func stamped(change func(driver.Current) driver.Change) func(driver.Current) driver.Change {
	return func(cur driver.Current) driver.Change {
		c := change(cur)
		if !c.Empty() && c.Run == nil {
			run := cur.Run.Clone()
			run.UpdatedAt = driver.Timestamp(cur.Now)
			c.Run = &run
		}
		return c
	}
}

func (d rowStampedOnEveryWrite) Modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	return d.mapDriver.Modify(ctx, runID, stamped(change))
}

func (d rowStampedOnEveryWrite) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	return d.mapDriver.ClaimNext(ctx, q, stamped(take))
}

// driverMutants is the catalogue of single-fault drivers.
func driverMutants() []targetMutant {
	t := func(fault func(*mapDriver) driver.Driver) func() conformance.Target {
		return func() conformance.Target { return driverTarget(fault) }
	}
	realClock := func(fault func(*mapDriver) driver.Driver) func() conformance.Target {
		return func() conformance.Target { return driverTargetOn(false, fault) }
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
		{"LEASE-023", "driver: Runnable and ClaimNext match labels by any pair", t(misjudging(anyLabel, true, true))},
		{"LEASE-023", "driver: Runnable alone matches labels by any pair", t(misjudging(anyLabel, true, false))},
		{"LEASE-023", "driver: ClaimNext alone matches labels by any pair", t(misjudging(anyLabel, false, true))},
		{"LEASE-023", "driver: Runnable and ClaimNext match labels by any pair, real clock", realClock(misjudging(anyLabel, true, true))},
		{"LEASE-024", "driver: Runnable and ClaimNext take a lease expiring within the second for expired", t(misjudging(aSecondEarly, true, true))},
		{"LEASE-024", "driver: Runnable alone takes a lease expiring within the second for expired", t(misjudging(aSecondEarly, true, false))},
		{"LEASE-024", "driver: ClaimNext alone takes a lease expiring within the second for expired", t(misjudging(aSecondEarly, false, true))},
		{"LEASE-024", "driver: Runnable and ClaimNext take a lease expiring within the second for expired, real clock", realClock(misjudging(aSecondEarly, true, true))},
		{"LEASE-024", "driver: ClaimNext alone takes a lease expiring within the second for expired, real clock", realClock(misjudging(aSecondEarly, false, true))},
		{"CAS-005", "driver: updated_at stamped on every write of the run, a lease's alone too", t(func(d *mapDriver) driver.Driver { return rowStampedOnEveryWrite{d} })},
		{"CAS-005", "driver: updated_at stamped on every write of the run, a lease's alone too, real clock", realClock(func(d *mapDriver) driver.Driver { return rowStampedOnEveryWrite{d} })},
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
	correct := func(d *mapDriver) driver.Driver { return d }
	for _, res := range conformance.RunRules(context.Background(), driverTarget(correct), rules, nil) {
		if res.Outcome != conformance.Pass && !(res.Outcome == conformance.Skip && strings.Contains(res.Detail, "BatchCreator")) {
			t.Errorf("%s: %s %s %v", res.Rule.ID, res.Outcome, res.Detail, res.Failures)
		}
	}
	// On the real clock, the rules whose driver mutants run there too.
	var onRealClock []string
	for _, m := range driverMutants() {
		if strings.HasSuffix(m.name, ", real clock") && !slices.Contains(onRealClock, m.rule) {
			onRealClock = append(onRealClock, m.rule)
		}
	}
	rules, err = conformance.Select(onRealClock, nil)
	if err != nil || len(rules) == 0 {
		t.Fatalf("the rules of the real-clock driver mutants: %v, %v", onRealClock, err)
	}
	for _, res := range conformance.RunRules(context.Background(), driverTargetOn(false, correct), rules, nil) {
		if res.Outcome != conformance.Pass {
			t.Errorf("%s, real clock: %s %s %v", res.Rule.ID, res.Outcome, res.Detail, res.Failures)
		}
	}
}
