package worker_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/worker"
)

// With runs waiting, a worker whose slots free a few at a time claims once
// for all of them when they free within about one claim's time: a claim
// costs a store a read and a write whatever it takes.
func TestABacklogIsClaimedForEverySlotAtOnce(t *testing.T) {
	// A claim takes this long, so that the slots freeing one group at a
	// time below all free well within one claim's time.
	const claimTime = 300 * time.Millisecond
	s := &recording{Store: openMemory(t, nil), claimDelay: claimTime}
	createRuns(t, s, 40)
	release := make(chan struct{}, 40)
	var inHandler atomic.Int64
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 8,
		Handler: func(context.Context, *worker.Job) error {
			inHandler.Add(1)
			defer inHandler.Add(-1)
			<-release
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	waitFor(t, "the first claim's 8 runs in their handlers", func() bool { return inHandler.Load() == 8 })
	// Free half the slots, then the other half a little later: a worker
	// that claimed as soon as half were free would ask for 4.
	for range 4 {
		release <- struct{}{}
	}
	waitFor(t, "4 handlers returned", func() bool { return inHandler.Load() == 4 })
	time.Sleep(claimTime / 10)
	for range 4 {
		release <- struct{}{}
	}
	waitFor(t, "the second claim", func() bool { return len(s.asked()) >= 2 })
	if got := s.asked(); got[0] != 8 || got[1] != 8 {
		t.Fatalf("the claims asked for %v runs; want 8 and then 8 (every slot, freed within one claim's time)", got)
	}
	close(release) // the rest return at once
}

// With a linger, outcomes that come apart share a write: a lone outcome
// waits for the others up to CompleteLinger, and once the linger is up it
// goes without them.
func TestOutcomesLingerToShareAWrite(t *testing.T) {
	s := &recording{Store: openMemory(t, nil)}
	ids := createRuns(t, s, 6)
	const linger = 2 * time.Second
	gate := map[string]chan struct{}{}
	for _, id := range ids {
		gate[id] = make(chan struct{})
	}
	log := newDoneLog(len(ids))
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 6, CompleteLinger: linger, OnDone: log.add,
		Handler: func(_ context.Context, job *worker.Job) error {
			<-gate[job.Run().RunID]
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	// Five outcomes, a few milliseconds apart, well within the linger.
	began := time.Now()
	for _, id := range ids[:5] {
		close(gate[id])
		time.Sleep(5 * time.Millisecond)
	}
	log.wait(t, 5)
	if waited := time.Since(began); waited < linger {
		t.Fatalf("the outcomes were written %v after the first came; want the linger, %v", waited, linger)
	}
	if got := s.sizes(); !slices.Equal(got, []int{5}) {
		t.Fatalf("completion writes of %v outcomes; want one of 5", got)
	}
	// The last one, alone, goes once its own linger is up.
	close(gate[ids[5]])
	log.wait(t, 1)
	if got := s.sizes(); !slices.Equal(got, []int{5, 1}) {
		t.Fatalf("completion writes of %v outcomes; want 5, then 1", got)
	}
	for _, id := range ids {
		if d := log.of(id); len(d) != 1 || d[0].Outcome != worker.Succeeded || d[0].Run.Status != runstate.StatusSuccess {
			t.Fatalf("run %s: reported %+v", id, d)
		}
	}
}

// A drain does not wait out the linger: the outcomes in hand are written
// at once when the worker stops.
func TestADrainWritesLingeringOutcomesAtOnce(t *testing.T) {
	s := &recording{Store: openMemory(t, nil)}
	ids := createRuns(t, s, 3)
	log := newDoneLog(len(ids))
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 3, LeaseTTL: 10 * time.Minute, CompleteLinger: 2 * hangGuard,
		OnDone: log.add, Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	waitFor(t, "3 runs claimed", func() bool { return w.Stats().Claimed == 3 })
	time.Sleep(50 * time.Millisecond) // their handlers return at once; their outcomes linger
	if got := s.sizes(); len(got) != 0 {
		t.Fatalf("completion writes of %v outcomes before the linger was up", got)
	}
	if err := stop(); err != nil { // within hangGuard, half the linger
		t.Fatal(err)
	}
	log.wait(t, 3)
	if got := s.sizes(); !slices.Equal(got, []int{3}) {
		t.Fatalf("completion writes of %v outcomes; want one of 3", got)
	}
}

// Without a linger a store slower than the handlers holds the slots
// back: while completion writes hang, the worker claims no more than its
// handlers, the outcomes waiting (a slot's worth), the completer's queue
// (another) and the write in flight can hold, instead of every run.
func TestASlowStoreHoldsTheSlotsBack(t *testing.T) {
	const slots, runs = 2, 20
	s := &recording{Store: openMemory(t, nil), writes: make(chan struct{})}
	createRuns(t, s, runs)
	log := newDoneLog(runs)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: slots, LeaseTTL: 10 * time.Minute, OnDone: log.add,
		Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	waitFor(t, "a completion write", func() bool { return len(s.sizes()) > 0 })
	time.Sleep(300 * time.Millisecond) // time enough to claim every run, were nothing holding the slots
	claimed, most := w.Stats().Claimed, int64(4*slots)
	close(s.writes)
	if claimed > most {
		t.Fatalf("%d of %d runs claimed while the store took no outcome; want at most %d", claimed, runs, most)
	}
	log.wait(t, runs)
}

// A full batch goes at once, whatever the linger.
func TestAFullBatchDoesNotWaitOutTheLinger(t *testing.T) {
	s := &recording{Store: openMemory(t, nil)}
	ids := createRuns(t, s, 3)
	log := newDoneLog(len(ids))
	// A linger longer than this test's wait for the outcomes (hangGuard).
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 3, CompleteBatch: 3, LeaseTTL: 10 * time.Minute,
		CompleteLinger: 2 * hangGuard, OnDone: log.add, Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, len(ids))
	if got := s.sizes(); !slices.Equal(got, []int{3}) {
		t.Fatalf("completion writes of %v outcomes; want one of 3", got)
	}
}

// recording is a store that records how many runs each batch claim
// asked for and how many outcomes each completion write carried, delays
// each claim by claimDelay, and, when writes is set, holds each
// completion write until it is closed.
type recording struct {
	runstate.Store
	claimDelay time.Duration
	writes     chan struct{}
	mu         sync.Mutex
	claims     []int
	batches    []int
}

func (r *recording) Features() runstate.Features {
	feat := runstate.Resolve(r.Store)
	feat.BatchClaimer, feat.BatchUpdater = r, r
	return feat
}

func (r *recording) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	r.record(&r.claims, p.Max)
	time.Sleep(r.claimDelay)
	inner, _ := runstate.As[runstate.BatchClaimer](r.Store)
	return inner.ClaimRuns(ctx, p)
}

func (r *recording) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	r.record(&r.batches, len(p.Updates))
	if r.writes != nil {
		<-r.writes
	}
	inner, _ := runstate.As[runstate.BatchUpdater](r.Store)
	return inner.UpdateRuns(ctx, p)
}

func (r *recording) record(into *[]int, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*into = append(*into, n)
}

// asked is the runs each claim asked for; sizes the outcomes each
// completion write carried.
func (r *recording) asked() []int { return r.read(&r.claims) }
func (r *recording) sizes() []int { return r.read(&r.batches) }

func (r *recording) read(from *[]int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(*from)
}
