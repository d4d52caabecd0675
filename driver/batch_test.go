package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/featuretest"
)

// interfaces lists which optional features s has.
func interfaces(s runstate.RunStateStore) (creator, updater, claimer, reader bool) {
	creator = s.Features().BatchCreator != nil
	updater = s.Features().BatchUpdater != nil
	claimer = s.Features().BatchClaimer != nil
	reader = s.Features().LeaseReader != nil
	return
}

func TestCheckedBatchesCheckInput(t *testing.T) {
	ctx := context.Background()
	m := memorytest.Open(t, nil)
	checked := driver.Checked(m)
	run, err := checked.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = featuretest.Must(runstate.As[runstate.BatchCreator](checked)).CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{{WorkflowName: "w"}, {RunID: "bad/id", WorkflowName: "w"}}})
	var itemErr *runstate.BatchItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("a bad item: %v", err)
	}
	res, err := featuretest.Must(runstate.As[runstate.BatchUpdater](checked)).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		{RunID: run.RunID, ExpectedVersion: 0, Status: "running"},
		{RunID: run.RunID + "x", ExpectedVersion: 1, Status: "started"},
		{RunID: run.RunID + "y", ExpectedVersion: 1, Status: "running"},
	}})
	if err != nil || !errors.Is(res.Items[0].Err, runstate.ErrInvalidArgument) || !errors.Is(res.Items[1].Err, runstate.ErrInvalidArgument) ||
		!errors.Is(res.Items[2].Err, runstate.ErrNotFound) {
		t.Errorf("%v; items %+v", err, res.Items)
	}
	_, err = featuretest.Must(runstate.As[runstate.BatchClaimer](checked)).ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w"}, Max: 1})
	if !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("a claim without a TTL: %v", err)
	}
}

func TestWrapIsABatchCreatorOnlyOverABatchInserter(t *testing.T) {
	m := memorytest.Open(t, nil)
	if c, u, k, _ := interfaces(m); !c || !u || !k {
		t.Errorf("the memory store: creator %v, updater %v, claimer %v; want all", c, u, k)
	}
	plain := driver.Wrap(struct{ driver.Driver }{nil})
	if c, u, k, _ := interfaces(plain); c || !u || !k {
		t.Errorf("over a plain driver: creator %v, updater %v, claimer %v; want updater and claimer", c, u, k)
	}
}
