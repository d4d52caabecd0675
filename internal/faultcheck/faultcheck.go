// Package faultcheck runs the same fault checks on every network-backed
// store that its tests put behind a faultproxy: a call during a partition
// returns by its deadline, a write cut off is applied wholly or not at
// all, and the store works again once the fault heals, without reopening.
package faultcheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/spec"
)

// hangLimit is how long past its deadline a call may take to return before
// the check calls it hung; far above any scheduling delay.
const hangLimit = 5 * time.Second

// Run disturbs the path between store and its server through p.
func Run(t *testing.T, store spec.RunStateStore, p *faultproxy.Proxy) {
	t.Helper()
	ctx := context.Background()
	run, err := store.CreateRun(ctx, spec.CreateRunParams{WorkflowName: "faults"})
	if err != nil {
		t.Fatal(err)
	}
	events := func() int {
		page, err := store.ListAuditEvents(ctx, spec.ListAuditParams{RunID: run.RunID, Limit: spec.MaxPageLimit})
		if err != nil {
			t.Fatalf("audit after the fault healed: %v", err)
		}
		return len(page.Events)
	}

	// A partition: the call returns by its deadline, with the context's
	// error or UNAVAILABLE.
	p.Partition()
	deadline := 2 * time.Second
	callCtx, cancel := context.WithTimeout(ctx, deadline)
	began := time.Now()
	_, err = store.UpdateRun(callCtx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: "running"})
	took := time.Since(began)
	cancel()
	if err == nil {
		t.Fatal("an update across a partition succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, spec.ErrUnavailable) {
		t.Errorf("an update across a partition: %v, want the deadline's error or UNAVAILABLE", err)
	}
	if took > deadline+hangLimit {
		t.Errorf("an update across a partition returned after %v, its deadline was %v", took, deadline)
	}
	t.Logf("during the partition: %v after %v", err, took.Round(time.Millisecond))
	p.Heal()

	// The update was applied wholly or not at all: version, status and
	// audit trail agree.
	after := settle(t, ctx, store, run.RunID)
	n := events()
	switch after.Version {
	case run.Version:
		if after.Status != run.Status || n != 1 {
			t.Fatalf("not applied, yet status %s and %d events", after.Status, n)
		}
	case run.Version + 1:
		if after.Status != spec.StatusRunning || n != 2 {
			t.Fatalf("applied, yet status %s and %d events", after.Status, n)
		}
	default:
		t.Fatalf("version %d after one update from %d", after.Version, run.Version)
	}

	// Connections cut: the store works again without reopening.
	p.Reset()
	msg := "after the reset"
	var updated spec.RunSnapshot
	for attempt := 1; ; attempt++ {
		updated, err = store.UpdateRun(ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: after.Version, Message: &msg})
		if err == nil {
			break
		}
		if !errors.Is(err, spec.ErrUnavailable) || attempt == 3 {
			t.Fatalf("update %d after the reset: %v", attempt, err)
		}
		// A call on a connection that was cut may fail once; its write
		// did not happen if the version did not move.
		after = settle(t, ctx, store, run.RunID)
	}
	if updated.Version != after.Version+1 || updated.Message != msg {
		t.Fatalf("after the reset: version %d %q; want %d", updated.Version, updated.Message, after.Version+1)
	}
}

// settle reads the run once the store answers again.
func settle(t *testing.T, ctx context.Context, store spec.RunStateStore, id string) spec.RunSnapshot {
	t.Helper()
	var err error
	for range 5 {
		var s spec.RunSnapshot
		if s, err = store.GetRun(ctx, id); err == nil {
			return s
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the store did not answer after the fault healed: %v", err)
	return spec.RunSnapshot{}
}
