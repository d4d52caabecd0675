package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/testsupport/testlog"
)

// countingDriver is a map-backed driver with the batch interfaces that
// counts its writes, can hold its first single write until released (so
// that the next calls queue behind it), and can fail its next ModifyMany
// calls as a whole.
type countingDriver struct {
	mu   sync.Mutex
	runs map[string]*countedRun

	// hold, when set, holds the next write (but InsertMany) until it is closed;
	// entered is closed when that write arrives.
	hold, entered chan struct{}
	// failModifyMany is how many ModifyMany calls to fail as a whole.
	failModifyMany int
	// retryClaims makes ClaimNextMany retry after deciding its first run.
	retryClaims bool
	// mostItems is the largest ModifyMany, guarded by mu.
	mostItems int
	// cost is what every write costs, as a commit's sync would; with
	// serialCost, one write at a time (one log), else all at once.
	cost       time.Duration
	serialCost bool
	commitMu   sync.Mutex

	modifies, modifyManys, inserts, insertManys, claimNextManys atomic.Int64
	t                                                           testing.TB
}

type countedRun struct {
	run    runstate.RunSnapshot
	lease  LeaseState
	events []runstate.AuditEvent
}

func newCountingDriver(t testing.TB) *countingDriver {
	return &countingDriver{runs: make(map[string]*countedRun), t: t}
}

// holdNext makes the next single write wait until the returned release.
func (d *countingDriver) holdNext() (entered <-chan struct{}, release func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	hold := make(chan struct{})
	d.hold, d.entered = hold, make(chan struct{})
	return d.entered, func() { close(hold) }
}

// waitIfHeld holds a single write when asked to.
func (d *countingDriver) waitIfHeld() {
	d.mu.Lock()
	hold, entered := d.hold, d.entered
	d.hold, d.entered = nil, nil
	d.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
}

func (d *countingDriver) write() {
	if d.serialCost {
		d.commitMu.Lock()
		defer d.commitMu.Unlock()
	}
	if d.cost > 0 {
		time.Sleep(d.cost)
	}
}

func (d *countingDriver) Now(context.Context) (time.Time, error) { return Timestamp(time.Now()), nil }

func (d *countingDriver) Insert(_ context.Context, p InsertParams) error {
	d.inserts.Add(1)
	d.waitIfHeld()
	d.write()
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.runs[p.Run.RunID]; ok {
		return runstate.ErrAlreadyExists
	}
	d.runs[p.Run.RunID] = &countedRun{run: p.Run.Clone(), events: []runstate.AuditEvent{p.Created}}
	return nil
}

func (d *countingDriver) InsertMany(_ context.Context, runs []InsertParams) error {
	d.insertManys.Add(1)
	d.write()
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := make(map[string]bool)
	for i, p := range runs {
		if _, ok := d.runs[p.Run.RunID]; ok {
			return &runstate.BatchItemError{Index: i, Err: runstate.ErrAlreadyExists}
		}
		if seen[p.Run.RunID] {
			d.t.Errorf("run %s twice in one InsertMany", p.Run.RunID)
		}
		seen[p.Run.RunID] = true
	}
	for _, p := range runs {
		d.runs[p.Run.RunID] = &countedRun{run: p.Run.Clone(), events: []runstate.AuditEvent{p.Created}}
	}
	return nil
}

func (d *countingDriver) Modify(_ context.Context, runID string, change func(Current) Change) error {
	d.modifies.Add(1)
	d.waitIfHeld()
	d.write()
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.ErrNotFound
	}
	r.apply(change(r.current()))
	return nil
}

func (d *countingDriver) ModifyMany(ctx context.Context, items []ModifyItem) error {
	d.modifyManys.Add(1)
	d.waitIfHeld()
	if err := ctx.Err(); err != nil {
		return err
	}
	d.write()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mostItems = max(d.mostItems, len(items))
	seen := make(map[string]bool)
	for _, item := range items {
		if seen[item.RunID] {
			d.t.Errorf("run %s twice in one ModifyMany", item.RunID)
		}
		seen[item.RunID] = true
	}
	if d.failModifyMany > 0 {
		d.failModifyMany--
		for _, item := range items { // decide, then store nothing
			if r, ok := d.runs[item.RunID]; ok {
				item.Change(r.current())
			}
		}
		return errors.New("deadlock detected")
	}
	for i := range items {
		r, ok := d.runs[items[i].RunID]
		if !ok {
			items[i].Err = runstate.ErrNotFound
			continue
		}
		r.apply(items[i].Change(r.current()))
	}
	return nil
}

func (r *countedRun) current() Current {
	return Current{Run: r.run, Lease: r.lease, LastSeq: int64(len(r.events)), Now: time.Now()}
}

func (r *countedRun) apply(c Change) {
	if c.Run != nil {
		r.run = c.Run.Clone()
	}
	if c.Lease != nil {
		r.lease = *c.Lease
	}
	r.events = append(r.events, c.Events...)
}

func (d *countingDriver) Get(_ context.Context, runID string) (runstate.RunSnapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[runID]
	if !ok {
		return runstate.RunSnapshot{}, runstate.ErrNotFound
	}
	return r.run.Clone(), nil
}

func (d *countingDriver) ListRuns(context.Context, RunQuery) ([]runstate.RunSnapshot, error) {
	return nil, nil
}

func (d *countingDriver) ListAudit(context.Context, AuditQuery) ([]runstate.AuditEvent, error) {
	return nil, nil
}

func (d *countingDriver) Runnable(_ context.Context, q RunnableQuery) ([]runstate.RunSnapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var runs []runstate.RunSnapshot
	for _, r := range d.runnable(q) {
		runs = append(runs, r.run.Clone())
	}
	return runs, nil
}

// runnable returns at most q.Limit runs q admits now, in claim order.
func (d *countingDriver) runnable(q RunnableQuery) []*countedRun {
	var runs []*countedRun
	for _, r := range d.runs {
		if q.Admits(r.run, r.lease, time.Now()) && (q.After == nil || q.After.Less(RunnablePositionOf(r.run))) {
			runs = append(runs, r)
		}
	}
	slices.SortFunc(runs, func(a, b *countedRun) int { return RunnablePositionOf(a.run).Compare(RunnablePositionOf(b.run)) })
	return runs[:min(len(runs), q.Limit)]
}

func (d *countingDriver) ClaimNextMany(_ context.Context, q RunnableQuery, max int, take func(Current) Change) (int, error) {
	d.claimNextManys.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	q.Limit = max
	runs := d.runnable(q)
	if d.retryClaims && len(runs) > 0 {
		take(runs[0].current()) // an attempt that conflicted: decided, not stored
	}
	for _, r := range runs {
		r.apply(take(r.current()))
	}
	return len(runs), nil
}

// checkRun checks that run id is at version and has one audit event per
// version, numbered 1, 2, ….
func (d *countingDriver) checkRun(t *testing.T, id string, version int64) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.runs[id]
	if r.run.Version != version || len(r.events) != int(version) {
		t.Errorf("run %s: version %d with %d events; want %d with as many", id, r.run.Version, len(r.events), version)
		return
	}
	for i, ev := range r.events {
		if ev.Seq != int64(i+1) {
			t.Errorf("run %s: event %d has Seq %d", id, i, ev.Seq)
		}
	}
}

// waitQueued waits until n requests wait in c's queue.
func waitQueued(c queuer, n int) {
	for c.queued() < n {
		runtime.Gosched()
	}
}

// queuer is a committer, or the committers of claims, whose queued
// requests a test counts.
type queuer interface{ queued() int }

func (c *committer[T]) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := 0
	for _, r := range c.queue {
		if r.state == queued {
			waiting++
		}
	}
	return waiting
}

func (cc *claimCommitters) queued() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	waiting := 0
	for _, kc := range cc.byKey {
		waiting += kc.committer.queued()
	}
	return waiting
}

// createRuns creates n runs named prefix-0 … prefix-(n-1), alone.
func createRuns(t testing.TB, s Store, prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		if _, err := s.CreateRun(context.Background(), runstate.CreateRunParams{RunID: ids[i], WorkflowName: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func start(ctx context.Context, s Store, id string) error {
	_, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: 1, Status: "running"})
	return err
}

// queueBehindAHeldWrite starts first, holds it in the driver, then starts
// each of rest and returns once they all wait in c's queue; release lets
// the held write go, and wait returns every call's error, first's first.
func queueBehindAHeldWrite(d *countingDriver, c queuer, first func() error, rest ...func() error) (release func(), wait func() []error) {
	entered, release := d.holdNext()
	errs := make([]error, 1+len(rest))
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = first() })
	<-entered
	for i, call := range rest {
		wg.Go(func() { errs[i+1] = call() })
	}
	waitQueued(c, len(rest))
	return release, func() []error { wg.Wait(); return errs }
}

// startAllBehindAHeldWrite starts the first run with its write held in the
// driver and the others queued behind it, lets them go, and checks that
// each started.
func startAllBehindAHeldWrite(t *testing.T, d *countingDriver, s Store, ids []string) {
	t.Helper()
	ctx := context.Background()
	var rest []func() error
	for _, id := range ids[1:] {
		rest = append(rest, func() error { return start(ctx, s, id) })
	}
	release, wait := queueBehindAHeldWrite(d, s.(*wrappedCreator).modifies, func() error { return start(ctx, s, ids[0]) }, rest...)
	release()
	for i, err := range wait() {
		if err != nil {
			t.Errorf("run %s: %v", ids[i], err)
		}
	}
}

// alternate updates run id between running and waiting while more says so.
func alternate(ctx context.Context, s Store, id string, more func() bool) error {
	run, err := s.GetRun(ctx, id)
	for i := 0; err == nil && more(); i++ {
		status := []string{"running", "waiting"}[i%2]
		run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: id, ExpectedVersion: run.Version, Status: status})
	}
	return err
}

// Updates queued behind a write in flight go in one ModifyMany, each
// applied once.
func TestGroupCommitCoalescesConcurrentUpdates(t *testing.T) {
	d := newCountingDriver(t)
	s := Wrap(d)
	ids := createRuns(t, s, "run", 50)
	startAllBehindAHeldWrite(t, d, s, ids)
	if m, mm := d.modifies.Load(), d.modifyManys.Load(); m != 1 || mm != 1 {
		t.Errorf("50 updates: %d Modify and %d ModifyMany calls; want 1 and 1", m, mm)
	}
	for _, id := range ids {
		d.checkRun(t, id, 2)
	}
}

// A ModifyMany that fails as a whole is each of its callers' failure, as
// a Modify of their own would be, and none of its changes is sent again:
// a write that failed at its commit may have been stored.
func TestGroupCommitSharedWriteFailureIsEachCallersAndNeverResent(t *testing.T) {
	d := newCountingDriver(t)
	s := Wrap(d)
	ids := createRuns(t, s, "run", 50)
	d.failModifyMany = 1
	ctx := context.Background()
	var rest []func() error
	for _, id := range ids[1:] {
		rest = append(rest, func() error { return start(ctx, s, id) })
	}
	release, wait := queueBehindAHeldWrite(d, s.(*wrappedCreator).modifies, func() error { return start(ctx, s, ids[0]) }, rest...)
	release()
	for i, err := range wait() {
		switch {
		case i == 0 && err != nil:
			t.Errorf("run %s, written alone: %v", ids[i], err)
		case i > 0 && err == nil:
			t.Errorf("run %s: its shared write failed, yet the update succeeded", ids[i])
		}
	}
	if m, mm := d.modifies.Load(), d.modifyManys.Load(); m != 1 || mm != 1 {
		t.Errorf("%d Modify and %d ModifyMany calls; want 1 and 1 (nothing sent again)", m, mm)
	}
	d.checkRun(t, ids[0], 2)
	for _, id := range ids[1:] {
		d.checkRun(t, id, 1)
	}
}

func TestGroupCommitManyWorkersEachUpdateAppliedOnce(t *testing.T) {
	for _, g := range []GroupCommit{{}, {MaxBatch: 3}, {Window: time.Millisecond}, {MaxInFlight: 3}} {
		t.Run(fmt.Sprintf("%+v", g), func(t *testing.T) {
			d := newCountingDriver(t)
			s := WrapWith(d, WrapOptions{GroupCommit: g})
			ids := createRuns(t, s, "run", 16)
			const updates = 20
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Go(func() {
					n := 0
					if err := alternate(context.Background(), s, id, func() bool { n++; return n <= updates }); err != nil {
						t.Errorf("run %s: %v", id, err)
					}
				})
			}
			wg.Wait()
			for _, id := range ids {
				d.checkRun(t, id, 1+updates)
			}
			d.mu.Lock()
			most := d.mostItems
			d.mu.Unlock()
			if most > g.maxBatch() {
				t.Errorf("a ModifyMany of %d items; want at most %d", most, g.maxBatch())
			}
		})
	}
}

func TestGroupCommitNeverSendsARunTwiceInOneWrite(t *testing.T) {
	d := newCountingDriver(t)
	s := Wrap(d)
	ids := createRuns(t, s, "run", 3)
	ctx := context.Background()
	c := s.(*wrappedCreator).modifies
	entered, release := d.holdNext()
	errs := make(chan error, 4)
	go func() { errs <- start(ctx, s, ids[0]) }()
	<-entered
	// Queued in this order: run 1 started, run 1 waiting, run 2 started.
	go func() { errs <- start(ctx, s, ids[1]) }()
	waitQueued(c, 1)
	go func() {
		_, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: ids[1], ExpectedVersion: 2, Status: "waiting"})
		errs <- err
	}()
	waitQueued(c, 2)
	go func() { errs <- start(ctx, s, ids[2]) }()
	waitQueued(c, 3)
	release()
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if mm := d.modifyManys.Load(); mm != 2 {
		t.Errorf("%d ModifyMany calls; want 2, run 1's second update in the second", mm)
	}
	d.checkRun(t, ids[1], 3)
	d.checkRun(t, ids[2], 2)
}

func TestGroupCommitCallerGivingUpWhileQueuedIsNeverSent(t *testing.T) {
	d := newCountingDriver(t)
	s := Wrap(d)
	ids := createRuns(t, s, "run", 2)
	c := s.(*wrappedCreator).modifies
	entered, release := d.holdNext()
	held := make(chan error, 1)
	go func() { held <- start(context.Background(), s, ids[0]) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	queuedErr := make(chan error, 1)
	go func() { queuedErr <- start(ctx, s, ids[1]) }()
	waitQueued(c, 1)
	cancel()
	if err := <-queuedErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the queued caller that gave up: %v", err)
	}
	release()
	if err := <-held; err != nil {
		t.Error(err)
	}
	// The same update again, expecting version 1, succeeds only if the
	// abandoned one was never applied.
	if err := start(context.Background(), s, ids[1]); err != nil {
		t.Error(err)
	}
	d.checkRun(t, ids[1], 2)
}

// A caller that gives up once its change was sent hears its context's
// error, and the shared write goes on for the others, as a single write
// in flight goes on.
func TestGroupCommitCallerGivingUpOnceSentLeavesTheSharedWrite(t *testing.T) {
	d := newCountingDriver(t)
	s := Wrap(d)
	ids := createRuns(t, s, "run", 3)
	ctx, cancel := context.WithCancel(context.Background())
	background := context.Background()
	gaveUp := make(chan error, 1)
	release, wait := queueBehindAHeldWrite(d, s.(*wrappedCreator).modifies, func() error { return start(background, s, ids[0]) },
		func() error { err := start(ctx, s, ids[1]); gaveUp <- err; return err }, func() error { return start(background, s, ids[2]) })
	enteredShared, releaseShared := d.holdNext()
	release()
	<-enteredShared
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that gave up: %v", err)
	}
	releaseShared()
	if errs := wait(); errs[0] != nil || errs[2] != nil {
		t.Errorf("the others: %v", errs)
	}
	if m, mm := d.modifies.Load(), d.modifyManys.Load(); m != 1 || mm != 1 {
		t.Errorf("%d Modify and %d ModifyMany calls; want the shared write to go on, once", m, mm)
	}
	for _, id := range ids {
		d.checkRun(t, id, 2)
	}
}

func TestGroupCommitCoalescesCreatesAndRefusesOnlyTheDuplicate(t *testing.T) {
	d := newCountingDriver(t)
	s := Wrap(d)
	createRuns(t, s, "dup", 1)
	ctx := context.Background()
	create := func(id string) func() error {
		return func() error {
			_, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: id, WorkflowName: "new"})
			return err
		}
	}
	inserts := d.inserts.Load()
	release, wait := queueBehindAHeldWrite(d, s.(*wrappedCreator).inserts, create("first"),
		create("a"), create("b"), create("dup-0"), create("c"))
	release()
	errs := wait()
	for i, err := range errs {
		if i == 3 {
			if runstate.CodeOf(err) != runstate.CodeAlreadyExists {
				t.Errorf("the duplicate: %v", err)
			}
		} else if err != nil {
			t.Errorf("create %d: %v", i, err)
		}
	}
	if n, nm := d.inserts.Load()-inserts, d.insertManys.Load(); n != 1 || nm != 2 {
		t.Errorf("%d Insert and %d InsertMany calls; want the first alone, then one refused and one without the duplicate", n, nm)
	}
	for _, id := range []string{"first", "a", "b", "c"} {
		d.checkRun(t, id, 1)
	}
	if dup, _ := d.Get(ctx, "dup-0"); dup.WorkflowName != "w" {
		t.Errorf("the existing run was replaced: %+v", dup)
	}
}

func TestGroupCommitOffWritesEachCallAlone(t *testing.T) {
	d := newCountingDriver(t)
	s := WrapWith(d, WrapOptions{GroupCommit: GroupCommit{Off: true}})
	ids := createRuns(t, s, "run", 20)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := start(context.Background(), s, id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if m, mm, im := d.modifies.Load(), d.modifyManys.Load(), d.insertManys.Load(); m != 20 || mm != 0 || im != 0 {
		t.Errorf("%d Modify, %d ModifyMany, %d InsertMany calls; want one Modify per update", m, mm, im)
	}
}

// Claim-next calls of one query and owner queued behind one in flight go
// in one ClaimNextMany, each with a run of its own; those left over when
// fewer runs were claimable ask again alone.
func TestGroupCommitCoalescesClaims(t *testing.T) {
	for _, tc := range []struct {
		name              string
		runs, claimers    int
		wantClaimNextMany int64
		retry             bool
	}{
		{"a run for every claimer", 10, 6, 1, false},
		{"fewer runs than claimers", 3, 6, 1, false},
		{"a driver that retries", 10, 6, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newCountingDriver(t)
			d.retryClaims = tc.retry
			var log testlog.Buffer
			s := WrapWith(d, WrapOptions{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			// Each run was leased by x before, and released.
			x := runstate.Owner{Worker: "x", Incarnation: "1"}
			for _, id := range createRuns(t, s, "run", tc.runs) {
				cl, err := s.ClaimRun(context.Background(), runstate.ClaimRunParams{RunID: id, Owner: x, TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.ReleaseLease(context.Background(), runstate.ReleaseLeaseParams{RunID: id, Token: cl.Lease.Token}); err != nil {
					t.Fatal(err)
				}
			}
			claims := make([]runstate.Claim, tc.claimers)
			calls := make([]func() error, tc.claimers)
			for i := range calls {
				calls[i] = func() (err error) {
					claims[i], err = s.ClaimNextRun(context.Background(), runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Minute})
					return err
				}
			}
			release, wait := queueBehindAHeldWrite(d, s.(*wrappedCreator).claims, calls[0], calls[1:]...)
			release()
			claimed := make(map[string]bool)
			for i, err := range wait() {
				switch {
				case runstate.CodeOf(err) == runstate.CodeNotFound: // counted below
				case err != nil:
					t.Errorf("claimer %d: %v", i, err)
				case claimed[claims[i].Run.RunID]:
					t.Errorf("run %s claimed twice", claims[i].Run.RunID)
				default:
					claimed[claims[i].Run.RunID] = true
				}
			}
			// Every claimer claimed a run, or every run was claimed.
			if len(claimed) != min(tc.runs, tc.claimers) {
				t.Errorf("%d runs claimed; want %d", len(claimed), min(tc.runs, tc.claimers))
			}
			if cm := d.claimNextManys.Load(); cm != tc.wantClaimNextMany {
				t.Errorf("%d ClaimNextMany calls; want %d", cm, tc.wantClaimNextMany)
			}
			// Each shared claim is logged with the lease its write ended.
			if n := strings.Count(log.String(), `msg="lease claimed" `); n != tc.runs+len(claimed) {
				t.Errorf("%d claims logged; want %d (x's and the claimers')", n, tc.runs+len(claimed))
			}
			if n := strings.Count(log.String(), ` owner=w/1 `); n != len(claimed) {
				t.Errorf("%d claims of w/1 logged; want %d", n, len(claimed))
			}
			if n := strings.Count(log.String(), `ended_token=1 ended_owner=x/1 ended_expires_at=`); n != len(claimed) || strings.Count(log.String(), "ended_released=true") != n {
				t.Errorf("%d claims logged ending x's released lease; want %d:\n%s", n, len(claimed), log.String())
			}
		})
	}
}

// BenchmarkGroupCommit compares UpdateRun from 16 workers, each on its own
// run, with group commit on (one or four writes in flight) and off, over a driver whose writes cost
// nothing, or 100µs each as a commit's sync might: one at a time (one log)
// or all at once (independent transactions).
func BenchmarkGroupCommit(b *testing.B) {
	costs := []struct {
		name   string
		cost   time.Duration
		serial bool
	}{{"free", 0, false}, {"serial-100µs", 100 * time.Microsecond, true}, {"parallel-100µs", 100 * time.Microsecond, false}}
	for _, c := range costs {
		for _, g := range []GroupCommit{{}, {MaxInFlight: 4}, {Off: true}} {
			b.Run(fmt.Sprintf("cost=%s/inflight=%d/off=%v", c.name, g.MaxInFlight, g.Off), func(b *testing.B) {
				d := newCountingDriver(b)
				s := WrapWith(d, WrapOptions{GroupCommit: g})
				ids := createRuns(b, s, "run", 64)
				d.cost, d.serialCost = c.cost, c.serial
				benchmarkUpdates(b, s, ids)
				b.ReportMetric(float64(d.modifies.Load()+d.modifyManys.Load())/float64(b.N), "writes/op")
			})
		}
	}
}

// benchmarkUpdates runs b.N updates from 8 workers per CPU, each worker
// on a run of its own from ids.
func benchmarkUpdates(b *testing.B, s Store, ids []string) {
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		if err := alternate(context.Background(), s, ids[next.Add(1)-1], pb.Next); err != nil {
			b.Error(err)
		}
	})
}

// Claims share a write only when they ask for the same thing: another
// owner, incarnation, TTL, status or label is another key.
func TestClaimKeySeparatesEveryAsk(t *testing.T) {
	owner := runstate.Owner{Worker: "w", Incarnation: "1"}
	base := func() (RunnableQuery, claimRequest) {
		return RunnableQuery{Statuses: []runstate.RunStatus{runstate.StatusQueued}, WorkflowName: "wf", Labels: map[string]string{"a": "1", "b": "2"}},
			claimRequest{Owner: owner, TTL: time.Minute, Statuses: []runstate.RunStatus{runstate.StatusQueued}}
	}
	q, req := base()
	key := claimKey(q, req)
	if q2, req2 := base(); claimKey(q2, req2) != key {
		t.Errorf("the same ask has two keys")
	}
	for name, change := range map[string]func(*RunnableQuery, *claimRequest){
		"worker":      func(_ *RunnableQuery, r *claimRequest) { r.Owner.Worker = "w2" },
		"incarnation": func(_ *RunnableQuery, r *claimRequest) { r.Owner.Incarnation = "2" },
		"ttl":         func(_ *RunnableQuery, r *claimRequest) { r.TTL = time.Hour },
		"status":      func(q *RunnableQuery, _ *claimRequest) { q.Statuses = []runstate.RunStatus{runstate.StatusWaiting} },
		"workflow":    func(q *RunnableQuery, _ *claimRequest) { q.WorkflowName = "other" },
		"label value": func(q *RunnableQuery, _ *claimRequest) { q.Labels = map[string]string{"a": "1", "b": "3"} },
		"label split": func(q *RunnableQuery, _ *claimRequest) { q.Labels = map[string]string{"a": "1\"b\"2"} },
	} {
		q, req := base()
		change(&q, &req)
		if claimKey(q, req) == key {
			t.Errorf("another %s, the same key", name)
		}
	}
}
