package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/driver"
)

// interfaces lists which optional interfaces s has.
func interfaces(s any) (creator, updater, claimer, reader bool) {
	_, creator = s.(runstate.BatchCreator)
	_, updater = s.(runstate.BatchUpdater)
	_, claimer = s.(runstate.BatchClaimer)
	_, reader = s.(runstate.LeaseReader)
	return
}

// Stores with some of the optional interfaces, over the memory store.
type (
	runsOnly          struct{ runstate.RunStateStore }
	runsWithCreator   struct{ runstate.RunStateStore }
	storeOnly         struct{ runstate.Store }
	storeWithUpdater  struct{ runstate.Store }
	storeWithClaimer  struct{ runstate.Store }
	storeWithAllBatch struct {
		runstate.Store
		runstate.LeaseReader
	}
)

func (s runsWithCreator) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.RunStateStore.(runstate.BatchCreator).CreateRuns(ctx, p)
}

func (s storeWithUpdater) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	return runstate.UpdateRuns(ctx, s.Store, p)
}

func (s storeWithClaimer) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	return runstate.ClaimRuns(ctx, s.Store, p)
}

func (s storeWithAllBatch) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return runstate.CreateRuns(ctx, s.Store, p)
}

func (s storeWithAllBatch) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	return runstate.UpdateRuns(ctx, s.Store, p)
}

func (s storeWithAllBatch) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	return runstate.ClaimRuns(ctx, s.Store, p)
}

// TestCheckedPassesOptionalInterfacesFaithfully: the checked store has an
// optional interface exactly when the store it wraps has it.
func TestCheckedPassesOptionalInterfacesFaithfully(t *testing.T) {
	m := memorytest.Open(t, nil)
	for _, inner := range []runstate.RunStateStore{
		m, runsOnly{m}, runsWithCreator{m}, storeOnly{m}, storeWithUpdater{m}, storeWithClaimer{m}, storeWithAllBatch{m, m},
	} {
		c1, u1, k1, r1 := interfaces(inner)
		checked := driver.Checked(inner)
		c2, u2, k2, r2 := interfaces(checked)
		if c1 != c2 || u1 != u2 || k1 != k2 || r1 != r2 {
			t.Errorf("%T: creator, updater, claimer, reader %v %v %v %v; checked %T: %v %v %v %v", inner, c1, u1, k1, r1, checked, c2, u2, k2, r2)
		}
		_, isStore := inner.(runstate.Store)
		if _, ok := checked.(runstate.Store); ok != isStore {
			t.Errorf("%T: a Store %v, checked %v", inner, isStore, ok)
		}
	}
}

func TestCheckedBatchesCheckInput(t *testing.T) {
	ctx := context.Background()
	m := memorytest.Open(t, nil)
	checked := driver.Checked(m)
	run, err := checked.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = checked.(runstate.BatchCreator).CreateRuns(ctx, runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{{WorkflowName: "w"}, {RunID: "bad/id", WorkflowName: "w"}}})
	var itemErr *runstate.BatchItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("a bad item: %v", err)
	}
	res, err := checked.(runstate.BatchUpdater).UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		{RunID: run.RunID, ExpectedVersion: 0, Status: "running"},
		{RunID: run.RunID + "x", ExpectedVersion: 1, Status: "started"},
		{RunID: run.RunID + "y", ExpectedVersion: 1, Status: "running"},
	}})
	if err != nil || !errors.Is(res.Items[0].Err, runstate.ErrInvalidArgument) || !errors.Is(res.Items[1].Err, runstate.ErrInvalidArgument) ||
		!errors.Is(res.Items[2].Err, runstate.ErrNotFound) {
		t.Errorf("%v; items %+v", err, res.Items)
	}
	_, err = checked.(runstate.BatchClaimer).ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w"}, Max: 1})
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
