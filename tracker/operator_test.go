package tracker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/tracker"
)

var alice = tracker.Operator{Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "alice"}}

// waitingRun makes a run that waits in step approve, after step build.
func waitingRun(t *testing.T, store runstate.RunStateStore) runstate.RunSnapshot {
	t.Helper()
	ctx := context.Background()
	tr := tracker.New(store, tracker.Options{})
	s, err := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf", Labels: map[string]string{"team": "infra"},
		Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1"}}, {Name: "approve"}, {Name: "deploy", Hosts: []string{"h1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := tr.Attach(s, tracker.Lease{})
	for _, err := range []error{run.Begin(ctx), run.StepStarted(ctx, "build"), run.StepFinished(ctx, "build", runstate.StepSuccess),
		run.StepStarted(ctx, "approve"), run.Wait(ctx, "waiting in step approve for a signal")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return run.Snapshot()
}

func TestCancelEndsTheStepsTheRunWasExecutingAndLeavesNothingStale(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	op := alice
	op.Store = store
	s := waitingRun(t, store)
	if _, err := op.Signal(ctx, s.RunID); err != nil {
		t.Fatal(err)
	}
	got, err := op.Cancel(ctx, s.RunID, "wrong branch")
	if err != nil {
		t.Fatal(err)
	}
	build, _ := got.Step("build")
	approve, _ := got.Step("approve")
	deploy, _ := got.Step("deploy")
	if got.Status != runstate.StatusCanceled || approve.Status != runstate.StepCanceled || build.Status != runstate.StepSuccess || deploy.Status != runstate.StepQueued {
		t.Errorf("after cancel: run %s, steps %+v", got.Status, got.Steps)
	}
	if got.Message != "canceled: wrong branch" || got.Labels[tracker.LabelSignal] != "" || got.Labels["team"] != "infra" {
		t.Errorf("stale state after cancel: message %q labels %v", got.Message, got.Labels)
	}
	evs, _ := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: s.RunID})
	last := evs.Events[len(evs.Events)-1]
	if last.To != runstate.StatusCanceled || last.Reason != "wrong branch" || last.Actor.ID != "alice" {
		t.Errorf("the cancel's audit event: %+v", last)
	}
}

// An operator action a run cannot take is refused before anything is
// written: no rejected transition, no run moved to failed.
func TestOperatorActionsARunCannotTakeWriteNothing(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	op := alice
	op.Store = store
	queued, _ := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	finished := waitingRun(t, store)
	if _, err := op.Cancel(ctx, finished.RunID, "first"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		want error
		id   string
	}{
		{"signal a queued run", func() error { _, err := op.Signal(ctx, queued.RunID); return err }, tracker.ErrNotWaiting, queued.RunID},
		{"signal a finished run", func() error { _, err := op.Signal(ctx, finished.RunID); return err }, tracker.ErrFinished, finished.RunID},
		{"cancel a finished run", func() error { _, err := op.Cancel(ctx, finished.RunID, "again"); return err }, tracker.ErrFinished, finished.RunID},
	} {
		before, _ := store.GetRun(ctx, tc.id)
		evsBefore, _ := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: tc.id})
		if err := tc.do(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		after, _ := store.GetRun(ctx, tc.id)
		evsAfter, _ := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: tc.id})
		if after.Version != before.Version || len(evsAfter.Events) != len(evsBefore.Events) {
			t.Errorf("%s wrote: version %d -> %d, %d -> %d events", tc.name, before.Version, after.Version, len(evsBefore.Events), len(evsAfter.Events))
		}
	}
}

// A signal does not move the run: only the lease holder resumes it, with
// a fenced write that consumes the signal.
func TestASignalIsActedOnByTheLeaseHolder(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	op := alice
	op.Store = store
	s := waitingRun(t, store)
	signalled, err := op.Signal(ctx, s.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if signalled.Status != runstate.StatusWaiting || !tracker.Signalled(signalled, "approve") || signalled.Message != "step approve signalled by operator alice" {
		t.Fatalf("after the signal: %s labels %v message %q", signalled.Status, signalled.Labels, signalled.Message)
	}
	again, err := op.Signal(ctx, s.RunID)
	if err != nil || again.Version != signalled.Version {
		t.Fatalf("a second signal: %v, version %d -> %d", err, signalled.Version, again.Version)
	}
	cl, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "w"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := tracker.New(store, tracker.Options{Leases: store}).Attach(signalled, tracker.Lease{Token: cl.Lease.Token, TTL: time.Minute})
	if err := run.Resume(ctx, "approve"); err != nil {
		t.Fatal(err)
	}
	got, _ := store.GetRun(ctx, s.RunID)
	approve, _ := got.Step("approve")
	if got.Status != runstate.StatusRunning || approve.Status != runstate.StepSuccess || got.Labels[tracker.LabelSignal] != "" || got.Labels["team"] != "infra" {
		t.Fatalf("after the resume: %s, approve %s, labels %v", got.Status, approve.Status, got.Labels)
	}
	evs, _ := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: s.RunID})
	last := evs.Events[len(evs.Events)-1]
	if last.From != runstate.StatusWaiting || last.To != runstate.StatusRunning || last.LeaseToken != cl.Lease.Token || last.Reason != "resumed: step approve signalled by operator alice" {
		t.Fatalf("the resume's audit event: %+v", last)
	}
}
