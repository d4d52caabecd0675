package benchutil

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// Cost is what one call sent: its commits and statements.
type Cost struct{ Commits, Statements int64 }

func (c Cost) String() string {
	return fmt.Sprintf("%d commits, %d statements", c.Commits, c.Statements)
}

// Cost runs call and returns what it sent, as counted on c; nothing else
// may use the counted store meanwhile.
func (c *Counter) Cost(call func() error) (Cost, error) {
	commits, statements := c.Commits(), c.Statements()
	err := call()
	return Cost{c.Commits() - commits, c.Statements() - statements}, err
}

// BatchStore is a store with every batch interface.
type BatchStore interface {
	runstate.Store
	runstate.BatchCreator
	runstate.BatchUpdater
	runstate.BatchClaimer
}

// BatchCosts creates n labelled runs in one batch, claims and starts them
// in another and moves them all to waiting in a third, and returns what
// each batch cost on c, by the batch interface's method name.
func BatchCosts(t testing.TB, s BatchStore, c *Counter, n int) map[string]Cost {
	t.Helper()
	ctx := context.Background()
	costs := map[string]Cost{}
	create := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, n)}
	for i := range create.Runs {
		create.Runs[i] = runstate.CreateRunParams{WorkflowName: "cost", Labels: map[string]string{"team": "a", "n": fmt.Sprint(i)}}
	}
	var err error
	if costs["CreateRuns"], err = c.Cost(func() error { _, err := s.CreateRuns(ctx, create); return err }); err != nil {
		t.Fatal(err)
	}
	var claimed runstate.ClaimRunsResult
	claim := runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w", Incarnation: "1"}, TTL: time.Hour, Max: n, Start: true}
	if costs["ClaimRuns"], err = c.Cost(func() error { claimed, err = s.ClaimRuns(ctx, claim); return err }); err != nil {
		t.Fatal(err)
	}
	if len(claimed.Claims) != n {
		t.Fatalf("claimed %d runs of %d", len(claimed.Claims), n)
	}
	update := runstate.UpdateRunsParams{Updates: make([]runstate.UpdateRunParams, n)}
	for i, cl := range claimed.Claims {
		update.Updates[i] = runstate.UpdateRunParams{RunID: cl.Run.RunID, ExpectedVersion: cl.Run.Version, LeaseToken: cl.Lease.Token,
			Status: string(runstate.StatusWaiting)}
	}
	var updated runstate.UpdateRunsResult
	if costs["UpdateRuns"], err = c.Cost(func() error { updated, err = s.UpdateRuns(ctx, update); return err }); err != nil {
		t.Fatal(err)
	}
	for i, item := range updated.Items {
		if item.Err != nil || item.Run.Status != runstate.StatusWaiting {
			t.Fatalf("update %d: %v, %s", i, item.Err, item.Run.Status)
		}
	}
	return costs
}

// RacingCreates has two CreateRuns race, rounds times, over batches that
// share one run_id (item 3 of the first, item 7 of the second): one must
// win whole, and the other fail whole with a *runstate.BatchItemError
// naming its shared item and matching runstate.ErrAlreadyExists.
func RacingCreates(t testing.TB, s BatchStore, rounds int) {
	t.Helper()
	ctx := context.Background()
	for round := range rounds {
		shared := fmt.Sprintf("shared-%d", round)
		batches := [2]runstate.CreateRunsParams{}
		at := [2]int{3, 7}
		for b := range batches {
			for i := range 10 {
				id := fmt.Sprintf("race-%d-%d-%d", round, b, i)
				if i == at[b] {
					id = shared
				}
				batches[b].Runs = append(batches[b].Runs, runstate.CreateRunParams{RunID: id, WorkflowName: "race"})
			}
		}
		var errs [2]error
		done := make(chan int)
		for b := range batches {
			go func() { _, errs[b] = s.CreateRuns(ctx, batches[b]); done <- b }()
		}
		<-done
		<-done
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: want one batch created and one refused, got %v and %v", round, errs[0], errs[1])
		}
		loser := 0
		if errs[0] == nil {
			loser = 1
		}
		var itemErr *runstate.BatchItemError
		if !errors.As(errs[loser], &itemErr) || itemErr.Index != at[loser] || !errors.Is(errs[loser], runstate.ErrAlreadyExists) {
			t.Fatalf("round %d: the refused batch's error is %v; want item %d, ALREADY_EXISTS", round, errs[loser], at[loser])
		}
		if _, err := s.GetRun(ctx, batches[loser].Runs[0].RunID); !errors.Is(err, runstate.ErrNotFound) {
			t.Fatalf("round %d: a run of the refused batch: %v; want NOT_FOUND", round, err)
		}
	}
}

// CheckBatchCosts fails t unless each batch of BatchCosts, of n runs,
// sent exactly want[name].Commits commits and at most want[name].Statements
// statements. A store whose write is one statement outside a transaction
// (it commits alone) sends no COMMIT: 0 commits.
func CheckBatchCosts(t testing.TB, s BatchStore, c *Counter, n int, want map[string]Cost) {
	t.Helper()
	for name, cost := range BatchCosts(t, s, c, n) {
		t.Logf("%s of %d: %v", name, n, cost)
		if cost.Commits != want[name].Commits || cost.Statements > want[name].Statements {
			t.Errorf("%s of %d sent %v; want %d commits and at most %d statements", name, n, cost, want[name].Commits, want[name].Statements)
		}
	}
}

// CreateLargestBatch creates runstate.MaxBatchItems runs of
// runstate.MaxLabels labels each in one CreateRuns, more label values
// than one statement binds, and checks that every label was stored.
func CreateLargestBatch(t testing.TB, s BatchStore) {
	t.Helper()
	ctx := context.Background()
	p := runstate.CreateRunsParams{Runs: make([]runstate.CreateRunParams, runstate.MaxBatchItems)}
	for i := range p.Runs {
		labels := make(map[string]string, runstate.MaxLabels)
		for l := range runstate.MaxLabels {
			labels[fmt.Sprintf("k%d", l)] = fmt.Sprintf("run%d", i)
		}
		p.Runs[i] = runstate.CreateRunParams{WorkflowName: "largest", Labels: labels}
	}
	created, err := s.CreateRuns(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	last := runstate.MaxBatchItems - 1
	page, err := s.ListRuns(ctx, runstate.ListRunsParams{Labels: map[string]string{
		fmt.Sprintf("k%d", runstate.MaxLabels-1): fmt.Sprintf("run%d", last)}})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != created.Runs[last].RunID {
		t.Fatalf("the last label of the last run: %v, %v; want run %s", page.Runs, err, created.Runs[last].RunID)
	}
}
