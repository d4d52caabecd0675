package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/worker"
)

// finishHimself moves a run claimed as it was (not started) to success
// through the store, under the job's lease, and settles it.
func finishHimself(ctx context.Context, s runstate.Store, job *worker.Job) error {
	run, lease := job.Run(), job.Lease()
	run, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: lease.Token,
		Status: string(runstate.StatusRunning), Reason: "resumed by its handler"})
	if err != nil {
		return err
	}
	run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, LeaseToken: lease.Token,
		Status: string(runstate.StatusSuccess), ReleaseLease: true})
	if err != nil {
		return err
	}
	job.Settled(run)
	return nil
}

// Claim order holds across statuses: a waiting run ahead of a queued one
// is claimed first, as it is (Start names queued only), the queued one
// next, started.
func TestClaimOrderHoldsAcrossStatuses(t *testing.T) {
	s := openMemory(t, nil)
	ctx := t.Context()
	queued := createRuns(t, s, 1)[0]
	waiting, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w", Priority: 5})
	if err != nil {
		t.Fatal(err)
	}
	for v, to := range []runstate.RunStatus{runstate.StatusRunning, runstate.StatusWaiting} {
		if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: waiting.RunID, ExpectedVersion: int64(v + 1), Status: string(to)}); err != nil {
			t.Fatal(err)
		}
	}
	type seen struct {
		id      string
		started bool
		status  runstate.RunStatus
	}
	var mu sync.Mutex
	var order []seen
	log := newDoneLog(2)
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Slots: 1, Start: []string{"queued"}, OnDone: log.add,
		Handler: func(ctx context.Context, job *worker.Job) error {
			mu.Lock()
			order = append(order, seen{job.Run().RunID, job.Started(), job.Run().Status})
			mu.Unlock()
			if job.Started() {
				return nil
			}
			return finishHimself(ctx, s, job)
		}})
	if err != nil {
		t.Fatal(err)
	}
	started(t, w)
	log.wait(t, 2)
	mu.Lock()
	defer mu.Unlock()
	want := []seen{{waiting.RunID, false, runstate.StatusWaiting}, {queued, true, runstate.StatusRunning}}
	if len(order) != 2 || order[0] != want[0] || order[1] != want[1] {
		t.Fatalf("handled %+v, want %+v", order, want)
	}
	if d := log.of(waiting.RunID); len(d) != 1 || d[0].Outcome != worker.Settled || d[0].Run.Status != runstate.StatusSuccess {
		t.Fatalf("the waiting run reported %+v", d)
	}
}

// A handler that returns without settling a run it was given not started
// leaves the run as it was, its lease released.
func TestARunGivenNotStartedAndLeftUnsettledIsReleased(t *testing.T) {
	s := openMemory(t, nil)
	ctx := t.Context()
	run := createRuns(t, s, 1)[0]
	for v, to := range []runstate.RunStatus{runstate.StatusRunning, runstate.StatusWaiting} {
		if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run, ExpectedVersion: int64(v + 1), Status: string(to)}); err != nil {
			t.Fatal(err)
		}
	}
	log := newDoneLog(1000) // released, the run is claimable again: it may come round more than once before the stop
	w, err := worker.New(worker.Config{Store: s, Owner: owner("w1"), Start: []string{"queued"}, OnDone: log.add,
		Handler: func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	log.wait(t, 1)
	stop()
	for _, d := range log.of(run) {
		if d.Outcome != worker.Unwritten || d.Err == nil {
			t.Fatalf("reported %+v", d)
		}
	}
	got, err := s.GetRun(ctx, run)
	if err != nil || got.Status != runstate.StatusWaiting || got.Version != 3 {
		t.Fatalf("run %s v%d, %v; want it waiting as it was", got.Status, got.Version, err)
	}
	if page, err := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{}); err != nil || len(page.Runs) != 1 {
		t.Fatalf("runnable: %d, %v; want the run, released", len(page.Runs), err)
	}
}

// startsConflict is a store without batch claims whose updates all conflict.
type startsConflict struct{ runstate.Store }

func (s startsConflict) Features() runstate.Features {
	f := runstate.Resolve(s.Store)
	f.BatchClaimer, f.BatchUpdater = nil, nil
	return f
}

func (startsConflict) UpdateRun(context.Context, runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return runstate.RunSnapshot{}, runstate.ErrVersionConflict
}

// On a store without batch claims the start is a second write; a start it
// refuses names the run, whose lease is released: it is claimable again.
func TestARefusedStartLeavesTheRunClaimable(t *testing.T) {
	mem := openMemory(t, nil)
	run := createRuns(t, mem, 1)[0]
	reports := make(chan worker.ClaimReport, 16)
	var calls int
	w, err := worker.New(worker.Config{Store: startsConflict{mem}, Owner: owner("w1"),
		OnClaim: func(r worker.ClaimReport) {
			select {
			case reports <- r:
			default:
			}
		},
		Handler: func(context.Context, *worker.Job) error { calls++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := started(t, w)
	r := <-reports
	stop()
	if !errors.Is(r.Err, runstate.ErrVersionConflict) || r.Claimed != 0 || calls != 0 {
		t.Fatalf("the claim: %+v, handler called %d times; want the refused start, no run handled", r, calls)
	}
	var e *runstate.Error
	if !errors.As(r.Err, &e) || e.RunID != run {
		t.Fatalf("the refused start's error %v names no run %s", r.Err, run)
	}
	if page, err := mem.ListRunnableRuns(t.Context(), runstate.ListRunnableParams{}); err != nil || len(page.Runs) != 1 {
		t.Fatalf("runnable: %d, %v; want the run, released", len(page.Runs), err)
	}
}
