package memory

import (
	"context"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// retriedClaims makes one attempt of a batch claim that it throws away,
// as a store that retries a conflict does, before the one it keeps.
type retriedClaims struct{ *storage }

func (r retriedClaims) ClaimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	q.Limit = max
	thrownAway, err := r.storage.Runnable(ctx, q)
	if err != nil {
		return 0, err
	}
	for _, run := range thrownAway {
		take(driver.Current{Run: run, Now: r.now()})
	}
	return r.storage.ClaimNextMany(ctx, q, max, take)
}

// The kit reports the claims of the attempt the driver kept.
func TestBatchClaimsAfterARetryAreTheKeptAttempts(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		if _, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	store := driver.Wrap(retriedClaims{s.data})
	owner := runstate.Owner{Worker: "w1"}
	for _, want := range []int{2, 1, 0} {
		res, err := store.ClaimRuns(ctx, runstate.ClaimRunsParams{Owner: owner, TTL: time.Minute, Max: 2})
		if err != nil || len(res.Claims) != want {
			t.Fatalf("%v, %d claims; want %d", err, len(res.Claims), want)
		}
		seen := map[string]bool{}
		for _, cl := range res.Claims {
			if l, err := s.GetLease(ctx, cl.Run.RunID); err != nil || l.Token != cl.Lease.Token || seen[cl.Run.RunID] {
				t.Errorf("claim %+v: stored lease %+v, %v", cl, l, err)
			}
			seen[cl.Run.RunID] = true
		}
	}
}
