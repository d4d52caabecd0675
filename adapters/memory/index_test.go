package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
)

// TestOrderedKeepsItsKeysInOrder: random inserts and deletes, enough to
// split and empty chunks, leave the set holding what a sorted slice holds,
// read from the start or from any key.
func TestOrderedKeepsItsKeysInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	o := newOrdered(cmp.Compare[int])
	model := map[int]bool{}
	for i := range 20000 {
		k := rng.IntN(3000)
		if rng.IntN(3) == 0 {
			o.delete(k)
			delete(model, k)
		} else {
			o.insert(k)
			model[k] = true
		}
		if i%1000 == 0 {
			checkOrdered(t, o, model)
		}
	}
	checkOrdered(t, o, model)
	for _, k := range rng.Perm(3000) { // down to empty, chunk by chunk
		o.delete(k)
		delete(model, k)
		if k%100 == 0 {
			checkOrdered(t, o, model)
		}
	}
	if len(o.chunks) != 0 {
		t.Errorf("every key deleted: want no chunk left, got %d", len(o.chunks))
	}
}

func checkOrdered(t *testing.T, o *ordered[int], model map[int]bool) {
	t.Helper()
	want := slices.Sorted(maps.Keys(model))
	if got := slices.Collect(o.from(nil)); !slices.Equal(got, want) {
		t.Fatalf("all: want %d keys in order, got %d: %v", len(want), len(got), got[:min(len(got), 20)])
	}
	for i, c := range o.chunks {
		if len(c) == 0 || len(c) > maxChunk {
			t.Fatalf("chunk %d holds %d keys, want 1 to %d", i, len(c), maxChunk)
		}
	}
	for _, from := range []int{-1, 0, 1, 1499, 1500, 2999, 3000} {
		i, _ := slices.BinarySearch(want, from)
		if got := slices.Collect(o.from(&from)); !slices.Equal(got, want[i:]) {
			t.Fatalf("from %d: want %d keys, got %d", from, len(want)-i, len(got))
		}
	}
}

// TestIndexesFollowEveryWrite drives the store through random creations,
// updates (status, priority, labels), claims, claim-nexts, renewals and
// releases while the clock moves, and checks after each step that the
// indexes are those rebuilt from the runs, and that listings and the
// runnable listing return what a scan of every run returns.
func TestIndexesFollowEveryWrite(t *testing.T) {
	ctx := context.Background()
	clock := conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := Open(ctx, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := workload{t: t, s: s, rng: rand.New(rand.NewPCG(27, 2)), clock: clock, tokens: map[string]int64{}}
	for range 40 {
		w.create()
	}
	for step := range 1500 {
		w.step()
		checkIndexes(t, s.data)
		for range 3 {
			w.compareRunnable()
			w.compareListRuns()
		}
		if t.Failed() {
			t.Fatalf("after step %d", step)
		}
	}
}

var (
	testOwners   = []runstate.Owner{{Worker: "w1", Incarnation: "a"}, {Worker: "w1", Incarnation: "b"}, {Worker: "w1", Incarnation: "c"}, {Worker: "w2", Incarnation: "a"}}
	testStatuses = runstate.RunStatuses()
)

type workload struct {
	t      *testing.T
	s      *Store
	rng    *rand.Rand
	clock  *conformance.ManualClock
	ids    []string
	tokens map[string]int64 // the last token each run was leased with
}

func (w *workload) create() {
	labels := map[string]string{"k": fmt.Sprint(w.rng.IntN(2))}
	r, err := w.s.CreateRun(context.Background(), runstate.CreateRunParams{
		WorkflowName: []string{"wf-a", "wf-b"}[w.rng.IntN(2)], Priority: w.rng.IntN(3), Labels: labels})
	if err != nil {
		w.t.Fatal(err)
	}
	w.ids = append(w.ids, r.RunID)
}

// step makes one random write, refused or not, or moves the clock.
func (w *workload) step() {
	ctx := context.Background()
	id := w.ids[w.rng.IntN(len(w.ids))]
	owner := testOwners[w.rng.IntN(len(testOwners))]
	ttl := time.Duration(1+w.rng.IntN(5)) * time.Second
	switch w.rng.IntN(8) {
	case 0:
		w.create()
	case 1:
		w.clock.Advance(time.Duration(w.rng.IntN(3000)) * time.Millisecond)
	case 2:
		if c, err := w.s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: id, Owner: owner, TTL: ttl}); err == nil {
			w.tokens[id] = c.Lease.Token
		}
	case 3:
		if c, err := w.s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: ttl}); err == nil {
			w.tokens[c.Run.RunID] = c.Lease.Token
		}
	case 4:
		_, _ = w.s.RenewLease(ctx, runstate.RenewLeaseParams{RunID: id, Token: w.tokens[id], TTL: ttl})
	case 5:
		_ = w.s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: id, Token: w.tokens[id]})
	default:
		run, err := w.s.GetRun(ctx, id)
		if err != nil {
			w.t.Fatal(err)
		}
		p := runstate.UpdateRunParams{RunID: id, ExpectedVersion: run.Version, Status: string(testStatuses[w.rng.IntN(len(testStatuses))])}
		if w.rng.IntN(2) == 0 {
			p.LeaseToken = w.tokens[id]
		}
		if w.rng.IntN(3) == 0 {
			prio := w.rng.IntN(3)
			p.Priority, p.Status = &prio, ""
		}
		_, _ = w.s.UpdateRun(ctx, p)
	}
}

// compareRunnable checks a random runnable query against a scan.
func (w *workload) compareRunnable() {
	nonTerminal := []runstate.RunStatus{runstate.StatusQueued, runstate.StatusRunning, runstate.StatusWaiting}
	q := driver.RunnableQuery{Limit: 1 + w.rng.IntN(6)}
	for _, st := range nonTerminal {
		if w.rng.IntN(2) == 0 {
			q.Statuses = append(q.Statuses, st)
		}
	}
	if len(q.Statuses) == 0 {
		q.Statuses = nonTerminal[:1]
	}
	if w.rng.IntN(4) == 0 {
		q.WorkflowName = "wf-a"
	}
	if w.rng.IntN(4) == 0 {
		q.Labels = map[string]string{"k": "1"}
	}
	if w.rng.IntN(2) == 0 {
		q.Claimant = &testOwners[w.rng.IntN(len(testOwners))]
	}
	d := w.s.data
	if w.rng.IntN(2) == 0 {
		pos := driver.RunnablePositionOf(d.runs[w.ids[w.rng.IntN(len(w.ids))]].run)
		q.After = &pos
	}
	got, err := d.Runnable(context.Background(), q)
	if err != nil {
		w.t.Fatal(err)
	}
	now := d.now()
	want := scanned(d, func(r *record) bool {
		return q.Admits(r.run, r.lease, now) && (q.After == nil || q.After.Less(driver.RunnablePositionOf(r.run)))
	}, byClaimOrder, q.Limit)
	if g := runIDs(got); !slices.Equal(g, want) {
		w.t.Errorf("Runnable %+v at %v: want %v (a scan of every run), got %v", q, now, want, g)
	}
}

// compareListRuns checks a random ListRuns query against a scan.
func (w *workload) compareListRuns() {
	d := w.s.data
	randomPos := func() driver.RunPosition { return driver.PositionOf(d.runs[w.ids[w.rng.IntN(len(w.ids))]].run) }
	q := driver.RunQuery{Limit: 1 + w.rng.IntN(8)}
	for _, st := range testStatuses {
		if w.rng.IntN(4) == 0 {
			q.Filter.Statuses = append(q.Filter.Statuses, st)
		}
	}
	if w.rng.IntN(4) == 0 {
		q.Filter.WorkflowName = "wf-b"
	}
	if w.rng.IntN(4) == 0 {
		q.Filter.Labels = map[string]string{"k": "0"}
	}
	if w.rng.IntN(3) == 0 {
		q.Filter.CreatedFrom = randomPos().CreatedAt
	}
	if w.rng.IntN(3) == 0 {
		q.Filter.CreatedBefore = randomPos().CreatedAt
	}
	if w.rng.IntN(2) == 0 {
		pos := randomPos()
		q.After = &pos
	}
	got, err := d.ListRuns(context.Background(), q)
	if err != nil {
		w.t.Fatal(err)
	}
	want := scanned(d, func(r *record) bool {
		return q.Filter.Matches(r.run) && (q.After == nil || q.After.Less(driver.PositionOf(r.run)))
	}, byListOrder, q.Limit)
	if g := runIDs(got); !slices.Equal(g, want) {
		w.t.Errorf("ListRuns %+v: want %v (a scan of every run), got %v", q, want, g)
	}
}

// scanned is what the store answered before it had indexes: every run
// keep selects, in order, the first limit.
func scanned(d *storage, keep func(*record) bool, order func(a, b runstate.RunSnapshot) int, limit int) []string {
	var match []runstate.RunSnapshot
	for _, r := range d.runs {
		if keep(r) {
			match = append(match, r.run)
		}
	}
	slices.SortFunc(match, order)
	return runIDs(match[:min(len(match), limit)])
}

func runIDs(runs []runstate.RunSnapshot) []string {
	ids := []string{}
	for _, r := range runs {
		ids = append(ids, r.RunID)
	}
	return ids
}

// checkIndexes compares d's indexes with those rebuilt from its runs.
func checkIndexes(t *testing.T, d *storage) {
	t.Helper()
	rebuilt := newIndexes()
	for _, r := range d.runs {
		rebuilt.add(r)
	}
	if got, want := indexContents(&d.index), indexContents(&rebuilt); !maps.EqualFunc(got, want, slices.Equal) {
		for name := range want {
			if !slices.Equal(got[name], want[name]) {
				t.Errorf("index %s: want %v (rebuilt from the runs), got %v", name, want[name], got[name])
			}
		}
	}
}

func indexContents(x *indexes) map[string][]string {
	out := map[string][]string{"created": keysOf(x.created), "owner": keysOf(x.owner)}
	for _, st := range testStatuses {
		out["status "+string(st)] = keysOf(x.byStatus(st))
		out["queue "+string(st)] = keysOf(x.queueOf(st))
		out["expiry "+string(st)] = keysOf(x.expiryOf(st))
	}
	return out
}

func keysOf[K any](o *ordered[K]) []string {
	out := []string{}
	for k := range o.from(nil) {
		out = append(out, fmt.Sprint(k))
	}
	return out
}

// TestReadsFollowWhatIsReturned: with 10,000 runs no claim may take (half
// leased for the longest TTL, half finished), claim-next, a runnable page
// and a ListRuns page deep in the store each read about the runs they
// return, counted, not timed.
func TestReadsFollowWhatIsReturned(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Clock: conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const held = 10000
	holder, taker := runstate.Owner{Worker: "holder", Incarnation: "1"}, runstate.Owner{Worker: "taker", Incarnation: "1"}
	for i := range held {
		r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
		if err == nil && i%2 == 0 {
			_, err = s.ClaimRun(ctx, runstate.ClaimRunParams{RunID: r.RunID, Owner: holder, TTL: runstate.MaxLeaseTTL})
		} else if err == nil {
			if r, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: string(runstate.StatusRunning)}); err == nil {
				_, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: string(runstate.StatusSuccess)})
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const claimable = 3
	for range claimable {
		if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"}); err != nil {
			t.Fatal(err)
		}
	}
	var deep string // the cursor nine tenths into the store
	for depth := 0; depth < held*9/10; {
		page, err := s.ListRuns(ctx, runstate.ListRunsParams{Limit: runstate.MaxPageLimit, Cursor: deep})
		if err != nil || page.NextCursor == "" {
			t.Fatalf("page to nine tenths of the store: %v, at %d runs", err, depth)
		}
		deep, depth = page.NextCursor, depth+len(page.Runs)
	}

	reads := func(what string, op func() (returned int, err error)) {
		t.Helper()
		before := s.data.reads
		n, err := op()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		read := s.data.reads - before
		t.Logf("%s: %d runs returned, %d read, %d runs in the store", what, n, read, held+claimable)
		if n == 0 || read > int64(claimable+10) {
			t.Errorf("%s: want runs returned, reading at most %d runs, got %d returned, %d read", what, claimable+10, n, read)
		}
	}
	reads("runnable page", func() (int, error) {
		page, err := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{Limit: 10})
		return len(page.Runs), err
	})
	reads("ListRuns page nine tenths deep", func() (int, error) {
		page, err := s.ListRuns(ctx, runstate.ListRunsParams{Limit: 10, Cursor: deep})
		return len(page.Runs), err
	})
	reads("ListRuns page of queued runs", func() (int, error) {
		page, err := s.ListRuns(ctx, runstate.ListRunsParams{Limit: 10, Statuses: []string{string(runstate.StatusQueued)}})
		return len(page.Runs), err
	})
	reads("claim-next", func() (int, error) {
		_, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: taker, TTL: time.Minute})
		return 1, err
	})
}
