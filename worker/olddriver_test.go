package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/worker"
)

// queuesOneAndTwo is a driver as written against the kit before parked
// runs (b2bef89): its claim search reads the unleased queue and the
// expired leases and nothing else, as SQL over driver.QueueOf's queues 1
// and 2 does, and it states nothing of what it keeps (no driver.Keeper).
// Compiled against today's kit, it must be refused a parking, never handed
// one it would strand.
type queuesOneAndTwo struct {
	clock runstate.Clock
	mu    sync.Mutex
	runs  map[string]*oldRecord
}

type oldRecord struct {
	run    runstate.RunSnapshot
	lease  driver.LeaseState
	events []runstate.AuditEvent
}

func newQueuesOneAndTwo(clock runstate.Clock) *queuesOneAndTwo {
	return &queuesOneAndTwo{clock: clock, runs: map[string]*oldRecord{}}
}

func (d *queuesOneAndTwo) Now(context.Context) (time.Time, error) { return d.clock.Now(), nil }

func (d *queuesOneAndTwo) Insert(_ context.Context, p driver.InsertParams) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.runs[p.Run.RunID]; ok {
		return runstate.ErrAlreadyExists
	}
	d.runs[p.Run.RunID] = &oldRecord{run: p.Run.Clone(), events: []runstate.AuditEvent{p.Created}}
	return nil
}

func (d *queuesOneAndTwo) Modify(_ context.Context, id string, change func(driver.Current) driver.Change) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[id]
	if !ok {
		return runstate.ErrNotFound
	}
	c := change(driver.Current{Run: r.run.Clone(), Lease: r.lease, LastSeq: int64(len(r.events)), Now: d.clock.Now()})
	if c.Run != nil {
		r.run = c.Run.Clone()
	}
	if c.Lease != nil {
		r.lease = *c.Lease
	}
	r.events = append(r.events, c.Events...)
	return nil
}

func (d *queuesOneAndTwo) Get(_ context.Context, id string) (runstate.RunSnapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.runs[id]; ok {
		return r.run.Clone(), nil
	}
	return runstate.RunSnapshot{}, runstate.ErrNotFound
}

func (d *queuesOneAndTwo) ListAudit(_ context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runs[q.RunID]
	if !ok {
		return nil, runstate.ErrNotFound
	}
	events := r.events[min(int(q.AfterSeq), len(r.events)):]
	return slices.Clone(events[:min(len(events), q.Limit)]), nil
}

func (d *queuesOneAndTwo) ListRuns(_ context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	return d.find(q.Limit, func(r *oldRecord) bool {
		return q.Filter.Matches(r.run) && (q.After == nil || q.After.Less(driver.PositionOf(r.run)))
	}, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
}

// Runnable reads the two queues the kit had before parking: a parked run
// (queue 3) is never a candidate, due or not.
func (d *queuesOneAndTwo) Runnable(_ context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	now := d.clock.Now()
	return d.find(q.Limit, func(r *oldRecord) bool {
		queue := driver.QueueOf(r.run, r.lease)
		return (queue == driver.QueueUnleased || queue == driver.QueueLeased) && q.Admits(r.run, r.lease, now) &&
			(q.After == nil || q.After.Less(driver.RunnablePositionOf(r.run)))
	}, func(a, b runstate.RunSnapshot) int {
		return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
	})
}

func (d *queuesOneAndTwo) find(limit int, keep func(*oldRecord) bool, order func(a, b runstate.RunSnapshot) int) ([]runstate.RunSnapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []runstate.RunSnapshot
	for _, r := range d.runs {
		if keep(r) {
			out = append(out, r.run.Clone())
		}
	}
	slices.SortFunc(out, order)
	return out[:min(len(out), limit)], nil
}

// parked reports the runs whose snapshot holds a wake time: none
// may, as the driver would strand them.
func (d *queuesOneAndTwo) parked() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id, r := range d.runs {
		if !r.run.WakeAt.IsZero() {
			ids = append(ids, id)
		}
	}
	return ids
}

// A driver that states nothing of parked runs is refused every parking, by
// name and changing nothing, and today's worker still ends every run it is
// given: a handler that fails once and then succeeds ends in success, its
// retry taken at once instead of parked for the backoff.
func TestADriverWithoutParkingRefusesWakeTimesAndEveryRetryEnds(t *testing.T) {
	d := newQueuesOneAndTwo(driver.SystemClock{})
	s := driver.Wrap(d)

	// Parking and waking, alone and in a batch, are refused by name.
	run, err := s.CreateRun(t.Context(), runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	for _, wake := range []time.Time{later, {}} {
		_, err := s.UpdateRun(t.Context(), runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &wake})
		if !errors.Is(err, runstate.ErrUnsupported) || !strings.Contains(err.Error(), "driver.Keeps.Parking") {
			t.Fatalf("UpdateRun with WakeAt %v: %v; want ErrUnsupported naming driver.Keeps.Parking", wake, err)
		}
		res, err := s.UpdateRuns(t.Context(), runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
			{RunID: run.RunID, ExpectedVersion: run.Version, WakeAt: &wake}}})
		if err != nil || !errors.Is(res.Items[0].Err, runstate.ErrUnsupported) {
			t.Fatalf("UpdateRuns with WakeAt %v: %v, %+v; want the item refused with ErrUnsupported", wake, err, res)
		}
	}
	if got, err := s.GetRun(t.Context(), run.RunID); err != nil || got.Version != run.Version || !got.WakeAt.IsZero() {
		t.Fatalf("after the refused parkings: %+v, %v; want version %d, no wake time", got, err, run.Version)
	}

	const n = 40
	ids := append(createRuns(t, s, n-1), run.RunID)
	var attempts sync.Map
	log := newDoneLog(n)
	var mu sync.Mutex
	outcomes := map[string][]worker.Outcome{} // every outcome reported, by run
	onDone := func(d worker.Done) {
		mu.Lock()
		outcomes[d.Run.RunID] = append(outcomes[d.Run.RunID], d.Outcome)
		mu.Unlock()
		if d.Outcome == worker.Succeeded {
			log.add(d)
		}
	}
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 4, OnDone: onDone,
		Backoff: func(int) time.Duration { return time.Hour },
		Handler: func(ctx context.Context, job *worker.Job) error {
			attempts.Store(job.Run().RunID, job.Attempt())
			if job.Attempt() == 1 {
				return errors.New("the first attempt fails")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	log.wait(t, n)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		got, err := s.GetRun(t.Context(), id)
		if err != nil || got.Status != runstate.StatusSuccess {
			t.Fatalf("run %s: %v, %v; want success after its retry", id, got.Status, err)
		}
		if a, _ := attempts.Load(id); a != 2 {
			t.Fatalf("run %s: last attempt %v; want 2", id, a)
		}
		mu.Lock()
		o := outcomes[id]
		mu.Unlock()
		if !slices.Equal(o, []worker.Outcome{worker.Retried, worker.Succeeded}) {
			t.Fatalf("run %s: outcomes %v; want a retry, then success", id, o)
		}
	}
	if p := d.parked(); len(p) > 0 {
		t.Fatalf("runs %v hold a wake time the driver does not keep", p)
	}
}

// The parking profile of a driver that does not keep parked runs is
// reported as lacking WakeAt, with the reason, in every rule: certify's
// verdict names what the store lacks instead of a failed rule.
func TestTheParkingProfileOfADriverWithoutParkingIsLacking(t *testing.T) {
	target := conformance.Target{
		Name:         "a driver without parking",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
		NewHarness: func(context.Context) (conformance.Harness, error) {
			clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			return &oldDriverHarness{store: driver.Wrap(newQueuesOneAndTwo(clock)), clock: clock}, nil
		},
	}
	results := conformance.RunRules(t.Context(), target, conformance.ProfileRules(conformance.ProfileWake), nil)
	if len(results) == 0 {
		t.Fatal("the parking profile has no rules")
	}
	for _, r := range results {
		if r.Outcome != conformance.Skip || r.Lacks != "runstate.UpdateRunParams.WakeAt" || !strings.Contains(r.Detail, "driver.Keeps.Parking") {
			t.Errorf("%s: %s, lacks %q, %s; want a skip lacking WakeAt that names driver.Keeps.Parking", r.Rule.ID, r.Outcome, r.Lacks, r.Detail)
		}
	}
	verdicts := conformance.Verdicts([]conformance.Profile{profileNamed(t, conformance.ProfileWake)},
		[]conformance.ModeResults{{Mode: "controlled-clock", Capabilities: target.Capabilities, Results: results}}, nil)
	if v := verdicts[0]; len(v.Failed) > 0 || !slices.Contains(v.Lacks, "runstate.UpdateRunParams.WakeAt") {
		t.Errorf("verdict %q, lacks %v, failed %v; want lacking WakeAt, nothing failed", v.Verdict, v.Lacks, v.Failed)
	}
}

func profileNamed(t *testing.T, id string) conformance.Profile {
	t.Helper()
	ps, err := conformance.SelectProfiles([]string{id})
	if err != nil || len(ps) != 1 {
		t.Fatalf("profile %s: %v, %v", id, ps, err)
	}
	return ps[0]
}

type oldDriverHarness struct {
	store runstate.Store
	clock *conformance.ManualClock
}

func (h *oldDriverHarness) Store() runstate.RunStateStore { return h.store }
func (h *oldDriverHarness) OpenHandle(context.Context) (runstate.RunStateStore, error) {
	return h.store, nil
}
func (h *oldDriverHarness) Advance(d time.Duration)     { h.clock.Advance(d) }
func (h *oldDriverHarness) Close(context.Context) error { return nil }
