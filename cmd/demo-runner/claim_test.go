package main

import (
	"context"
	"errors"
	"testing"

	"github.com/runstate/runstate"
)

// A worker claims a queued run and starts it in the claim's one write: the
// claim's run is running at version 2, its start event by this worker,
// fenced by the claim's lease.
func TestAWorkerStartsAQueuedRunInItsClaim(t *testing.T) {
	a := apiApp(t)
	ctx := context.Background()
	run, err := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	cls, err := a.claimNext(ctx, []string{"queued", "waiting"}, 1)
	if err != nil || len(cls) != 1 {
		t.Fatalf("claim: %d claims, %v", len(cls), err)
	}
	cl := cls[0]
	if !cl.Started || cl.Run.RunID != run.RunID || cl.Run.Status != runstate.StatusRunning || cl.Run.Version != 2 {
		t.Fatalf("claim: started %v, %s %s v%d: %v", cl.Started, cl.Run.RunID, cl.Run.Status, cl.Run.Version, err)
	}
	audit, err := a.runs.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: run.RunID})
	if err != nil {
		t.Fatal(err)
	}
	last := audit.Events[len(audit.Events)-1]
	if last.To != runstate.StatusRunning || last.Actor != a.workerActor() || last.LeaseToken != cl.Lease.Token {
		t.Errorf("the start's event: %+v", last)
	}
}

// Claim order holds across statuses: a waiting run ahead of a queued one is
// claimed first and as it is, waiting for its signal; the queued one next,
// started.
func TestAWorkerClaimsAWaitingRunAheadWithoutStartingIt(t *testing.T) {
	a := apiApp(t)
	ctx := context.Background()
	queued, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	waiting, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf", Priority: 5})
	for v, to := range []runstate.RunStatus{runstate.StatusRunning, runstate.StatusWaiting} {
		if _, err := a.runs.UpdateRun(ctx, runstate.UpdateRunParams{RunID: waiting.RunID, ExpectedVersion: int64(v + 1), Status: string(to)}); err != nil {
			t.Fatal(err)
		}
	}
	statuses := []string{"queued", "waiting"}
	firsts, err := a.claimNext(ctx, statuses, 1)
	if err != nil || len(firsts) != 1 {
		t.Fatalf("first claim: %d claims, %v", len(firsts), err)
	}
	first := firsts[0]
	if first.Started || first.Run.RunID != waiting.RunID || first.Run.Status != runstate.StatusWaiting {
		t.Fatalf("first claim: started %v, %s %s: %v", first.Started, first.Run.RunID, first.Run.Status, err)
	}
	seconds, err := a.claimNext(ctx, statuses, 1)
	if err != nil || len(seconds) != 1 {
		t.Fatalf("second claim: %d claims, %v", len(seconds), err)
	}
	second := seconds[0]
	if !second.Started || second.Run.RunID != queued.RunID {
		t.Fatalf("second claim: started %v, %s: %v", second.Started, second.Run.RunID, err)
	}
	if _, err := a.claimNext(ctx, statuses, 1); !errors.Is(err, runstate.ErrNotFound) {
		t.Errorf("a claim with nothing runnable: %v", err)
	}
}

// startsConflict is a store without batch claims whose updates all conflict.
type startsConflict struct{ runstate.Store }

func (s startsConflict) Features() runstate.Features {
	f := runstate.Resolve(s.Store)
	f.BatchClaimer = nil
	return f
}

func (startsConflict) UpdateRun(context.Context, runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return runstate.RunSnapshot{}, runstate.ErrVersionConflict
}

// On a store without batch claims the start is a second write; a start it
// refuses names the run, whose lease is released: it is claimable again.
func TestARefusedStartNamesTheRunAndLeavesItClaimable(t *testing.T) {
	a := apiApp(t)
	ctx := context.Background()
	run, _ := a.tracker.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	store := a.leases
	a.leases = startsConflict{store}
	_, err := a.claimNext(ctx, []string{"queued"}, 1)
	var refused startRefused
	if !errors.As(err, &refused) || refused.runID != run.RunID || !errors.Is(err, runstate.ErrVersionConflict) || claimResult(err) != claimClaimed {
		t.Fatalf("a refused start: %v", err)
	}
	if page, err := store.ListRunnableRuns(ctx, runstate.ListRunnableParams{}); err != nil || len(page.Runs) != 1 {
		t.Errorf("the run is not claimable again: %+v %v", page.Runs, err)
	}
}
