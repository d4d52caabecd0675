package badger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// Claims skip the deletion markers at the head of the claim-order index
// through an in-memory queue head. If the head ever passed a live run, that
// run would never be claimed again. Creators, releases (which put runs back
// in the queue) and claimers race here; at the end every run must have left
// the queue for good, as the status index, which the head does not touch,
// must confirm.
func TestQueueHeadNeverSkipsARun(t *testing.T) {
	ctx := context.Background()
	s, err := openForCrash(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const creators, claimers, perCreator = 4, 4, 150
	var created, creating atomic.Int64
	creating.Store(creators)
	var mu sync.Mutex
	finished := map[string]bool{}
	var wg sync.WaitGroup
	for c := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer creating.Add(-1)
			for i := range perCreator {
				if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "q", Priority: rand.IntN(5),
					RunID: fmt.Sprintf("c%d-%03d", c, i)}); err != nil {
					t.Error(err)
					return
				}
				created.Add(1)
			}
		}()
	}
	for w := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
			for {
				cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
				if errors.Is(err, runstate.ErrNotFound) {
					if creating.Load() == 0 {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if rand.IntN(3) == 0 { // hand it back: it re-enters the queue
					if err := s.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: cl.Run.RunID, Token: cl.Lease.Token}); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				_, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: cl.Run.RunID, ExpectedVersion: cl.Run.Version,
					LeaseToken: cl.Lease.Token, Status: "canceled"})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if finished[cl.Run.RunID] {
					t.Errorf("run %s finished twice", cl.Run.RunID)
				}
				finished[cl.Run.RunID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The claimers stop at the first empty queue after the creators are done;
	// whatever a release put back after that is claimed here, one by one.
	for {
		cl, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: "sweeper"}, TTL: time.Hour})
		if errors.Is(err, runstate.ErrNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: cl.Run.RunID, ExpectedVersion: cl.Run.Version, Status: "canceled"}); err != nil {
			t.Fatal(err)
		}
		finished[cl.Run.RunID] = true
	}
	left, err := s.ListRuns(ctx, runstate.ListRunsParams{Statuses: []string{"queued"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Runs) != 0 || len(finished) != creators*perCreator || created.Load() != creators*perCreator {
		t.Fatalf("%d runs still queued (first: %v), %d of %d finished", len(left.Runs), left.Runs[:min(1, len(left.Runs))], len(finished), creators*perCreator)
	}
}
