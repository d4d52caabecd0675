package runstate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
)

// singleCalls hides a store's batch features, so that the package
// functions take their fallback.
type singleCalls struct{ runstate.Store }

func (s singleCalls) Features() runstate.Features {
	f := s.Store.Features()
	f.BatchCreator, f.BatchUpdater, f.BatchClaimer = nil, nil, nil
	return f
}

func TestCreateRunsFallbackStopsAtTheRefusedItem(t *testing.T) {
	ctx := context.Background()
	s := memorytest.Open(t, nil)
	if _, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: "taken", WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	p := runstate.CreateRunsParams{Runs: []runstate.CreateRunParams{
		{RunID: "a", WorkflowName: "w"}, {RunID: "taken", WorkflowName: "w"}, {RunID: "c", WorkflowName: "w"},
	}}
	res, err := runstate.CreateRuns(ctx, singleCalls{s}, p)
	var itemErr *runstate.BatchItemError
	if !errors.As(err, &itemErr) || itemErr.Index != 1 || !errors.Is(err, runstate.ErrAlreadyExists) || !strings.Contains(err.Error(), "item 1") {
		t.Fatalf("fallback: %v, want item 1 already exists", err)
	}
	if len(res.Runs) != 1 || res.Runs[0].RunID != "a" {
		t.Errorf("fallback result %+v, want run a, created before the refusal", res.Runs)
	}
	if _, err := s.GetRun(ctx, "c"); !errors.Is(err, runstate.ErrNotFound) {
		t.Errorf("run c after the refusal: %v, want not found", err)
	}
	// With BatchCreator: nothing stored.
	p.Runs[0].RunID = "a2"
	if _, err := runstate.CreateRuns(ctx, s, p); !errors.Is(err, runstate.ErrAlreadyExists) {
		t.Fatalf("native: %v", err)
	}
	if _, err := s.GetRun(ctx, "a2"); !errors.Is(err, runstate.ErrNotFound) {
		t.Errorf("native batch stored run a2 of a refused batch: %v", err)
	}
}

func TestUpdateRunsFallbackDecidesEachItem(t *testing.T) {
	ctx := context.Background()
	s := memorytest.Open(t, nil)
	a, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	b, _ := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	res, err := runstate.UpdateRuns(ctx, singleCalls{s}, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		{RunID: a.RunID, ExpectedVersion: 1, Status: "running"},
		{RunID: b.RunID, ExpectedVersion: 7, Status: "running"},
		{RunID: "missing", ExpectedVersion: 1, Status: "running"},
	}})
	if err != nil || len(res.Items) != 3 {
		t.Fatalf("%v, %d items", err, len(res.Items))
	}
	if res.Items[0].Err != nil || res.Items[0].Run.Status != runstate.StatusRunning ||
		!errors.Is(res.Items[1].Err, runstate.ErrVersionConflict) || !errors.Is(res.Items[2].Err, runstate.ErrNotFound) {
		t.Errorf("items %+v", res.Items)
	}
	_, err = runstate.UpdateRuns(ctx, singleCalls{s}, runstate.UpdateRunsParams{Updates: []runstate.UpdateRunParams{
		{RunID: b.RunID, ExpectedVersion: 1, Status: "running"}, {RunID: b.RunID, ExpectedVersion: 1, Message: new(string)},
	}})
	if !errors.Is(err, runstate.ErrInvalidArgument) || !strings.Contains(err.Error(), "items 0 and 1") {
		t.Errorf("a run updated twice: %v", err)
	}
	if got, _ := s.GetRun(ctx, b.RunID); got.Version != 1 {
		t.Errorf("run b at version %d after refused batches, want 1", got.Version)
	}
	for _, n := range []int{0, runstate.MaxBatchItems + 1} {
		_, err := runstate.UpdateRuns(ctx, singleCalls{s}, runstate.UpdateRunsParams{Updates: make([]runstate.UpdateRunParams, n)})
		if !errors.Is(err, runstate.ErrInvalidArgument) {
			t.Errorf("%d updates: %v", n, err)
		}
	}
}

// unstartable refuses every write, so that a claim's start fails.
type unstartable struct{ singleCalls }

func (unstartable) UpdateRun(context.Context, runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return runstate.RunSnapshot{}, runstate.Unavailable("writes refused", nil)
}

func TestClaimRunsFallback(t *testing.T) {
	ctx := context.Background()
	s := memorytest.Open(t, nil)
	for range 3 {
		if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	owner := runstate.Owner{Worker: "w1", Incarnation: "i1"}
	res, err := runstate.ClaimRuns(ctx, singleCalls{s}, runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Max: 2, Start: true})
	if err != nil || len(res.Claims) != 2 {
		t.Fatalf("%v, %d claims", err, len(res.Claims))
	}
	for _, cl := range res.Claims {
		if cl.Run.Status != runstate.StatusRunning || cl.Run.Version != 2 || cl.Lease.Owner != owner {
			t.Errorf("claim %+v, want the run started under the lease", cl)
		}
	}
	// A start that fails releases its lease and says so.
	_, err = runstate.ClaimRuns(ctx, unstartable{singleCalls{s}}, runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Max: 5, Start: true})
	if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "released") {
		t.Fatalf("failed start: %v", err)
	}
	page, _ := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{})
	if len(page.Runs) != 1 {
		t.Errorf("%d runnable runs after a failed start, want its run released", len(page.Runs))
	}
	res, err = runstate.ClaimRuns(ctx, singleCalls{s}, runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Max: 5})
	if err != nil || len(res.Claims) != 1 {
		t.Errorf("%v, %d claims of the one run left", err, len(res.Claims))
	}
	bad := runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Max: 1, Start: true, Filter: runstate.RunnableFilter{Statuses: []string{"running"}}}
	if _, err := runstate.ClaimRuns(ctx, singleCalls{s}, bad); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("Start with status running: %v", err)
	}
}
