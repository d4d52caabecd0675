package badger_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/badger/badgertest"
)

// A batch of the largest size fits one transaction of the smallest
// configuration the tests use: creations, a claim that starts every run,
// and an update of each.
func TestLargestBatchesFitOneTransaction(t *testing.T) {
	ctx := context.Background()
	s, err := badger.Open(ctx, badger.Options{Dir: t.TempDir(), Tune: badgertest.Small, GCInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	items := make([]runstate.CreateRunParams, runstate.MaxBatchItems)
	for i := range items {
		items[i] = runstate.CreateRunParams{RunID: fmt.Sprintf("run-%04d", i), WorkflowName: "w", Labels: map[string]string{"batch": "1"}}
	}
	created, err := s.CreateRuns(ctx, runstate.CreateRunsParams{Runs: items})
	if err != nil || len(created.Runs) != len(items) {
		t.Fatalf("CreateRuns: %v, %d runs", err, len(created.Runs))
	}
	claimed, err := s.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w1"}, TTL: time.Minute, Max: runstate.MaxBatchItems, Start: true})
	if err != nil || len(claimed.Claims) != len(items) {
		t.Fatalf("ClaimRuns: %v, %d claims", err, len(claimed.Claims))
	}
	updates := make([]runstate.UpdateRunParams, len(claimed.Claims))
	for i, cl := range claimed.Claims {
		updates[i] = runstate.UpdateRunParams{RunID: cl.Run.RunID, ExpectedVersion: cl.Run.Version, LeaseToken: cl.Lease.Token, Status: "success"}
	}
	res, err := s.UpdateRuns(ctx, runstate.UpdateRunsParams{Updates: updates})
	if err != nil {
		t.Fatalf("UpdateRuns: %v", err)
	}
	for i, item := range res.Items {
		if item.Err != nil || item.Run.Status != runstate.StatusSuccess {
			t.Fatalf("item %d: %+v", i, item)
		}
	}
}
