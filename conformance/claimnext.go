package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

func init() {
	register("LEASE-017", "Claim-next never answers NOT_FOUND while a run matching its filter was runnable for the whole call, even while writers and other claimers hold that run.", leases, checkClaimNextNeverFalselyEmpty)
}

// call is one claim-next call as a claimer saw it: when it started and
// ended, and for a successful claim when its release returned (the run was
// leased at most from start to released).
type call struct {
	claimer       int
	start, end    time.Time
	claimed       bool
	released      time.Time
	token         int64
	notFoundError error
}

// checkClaimNextNeverFalselyEmpty reproduces the SKIP LOCKED hazard with the
// public API only. Run H is the only run the claimers' filter matches.
// Around it: writers rewrite H's message in a loop (each write locks or
// conflicts with H), decoy claimers whose filter matches nothing scan the
// queue where H sits, and the claimers loop claim-next and release. H is
// queued throughout and leased only between a claim and its release. In a
// first round one claimer races the writers and decoys alone: H is
// runnable for each of its calls, and every NOT_FOUND is a false empty. In
// a second round three claimers race each other too; a NOT_FOUND is then
// allowed only while another claimer's claim-to-release span overlaps the
// call.
func checkClaimNextNeverFalselyEmpty(c *checkState) {
	h := c.create(runstate.CreateRunParams{Labels: map[string]string{"probe": "h"}})
	for range 3 { // queued runs the filter does not match, ranked before and after H
		c.create(runstate.CreateRunParams{Labels: map[string]string{"probe": "other"}, Priority: 1})
		c.create(runstate.CreateRunParams{Labels: map[string]string{"probe": "other"}, Priority: -1})
	}
	for _, claimers := range []int{1, 3} {
		calls := c.raceClaimNext(h, claimers, 2, 2)
		claims, falseEmpty := 0, 0
		var example string
		for _, k := range calls {
			if k.claimed {
				claims++
				continue
			}
			if !heldByAnother(calls, k) {
				falseEmpty++
				if example == "" {
					example = fmt.Sprintf("claimer %d's call of %v answered %s", k.claimer, k.end.Sub(k.start), describeErr(k.notFoundError))
				}
			}
		}
		if claims == 0 {
			c.Errorf(fmt.Sprintf("%d claimers to claim H at least once", claimers), "%d calls, none claimed", len(calls))
		}
		if falseEmpty > 0 {
			c.Errorf(fmt.Sprintf("no NOT_FOUND while H was queued and unleased for the whole call (%d claimers)", claimers),
				"%d of %d calls answered NOT_FOUND with no other claimer holding H (%d claims); e.g. %s", falseEmpty, len(calls), claims, example)
		}
	}
}

// raceClaimNext runs claimers, decoy claimers and writers of run h at once
// and returns the claimers' calls. Each claimer makes callsPerClaimer calls
// or stops at the budget, whichever comes first; decoys and writers stop
// with the last claimer.
func (c *checkState) raceClaimNext(h runstate.RunSnapshot, claimers, decoys, writers int) []call {
	const callsPerClaimer = 300
	budget := 1200 * time.Millisecond
	match := runstate.RunnableFilter{Labels: map[string]string{"probe": "h"}}
	nothing := runstate.RunnableFilter{Labels: map[string]string{"probe": "none"}}
	stores := c.handles(claimers + decoys + writers)
	deadline := time.Now().Add(budget)
	var claiming sync.WaitGroup
	claiming.Add(claimers)
	stop := make(chan struct{})
	go func() { claiming.Wait(); close(stop) }()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return c.ctx.Err() != nil
		}
	}

	var mu sync.Mutex
	var calls []call
	c.parallel(claimers+decoys+writers, func(i int) {
		store := stores[i]
		switch {
		case i < claimers:
			defer claiming.Done()
			ls := c.leaseStoreOf(store)
			o := owner(fmt.Sprintf("claimer-%d", i))
			for n := 0; n < callsPerClaimer && time.Now().Before(deadline) && c.ctx.Err() == nil; n++ {
				k := call{claimer: i, start: time.Now()}
				cl, err := ls.ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: o, TTL: runstate.DefaultRecoveryLeaseTTL, Filter: match})
				k.end = time.Now()
				switch {
				case errors.Is(err, runstate.ErrNotFound):
					k.notFoundError = err
				case err != nil:
					c.Fatalf("claim-next to claim H or answer NOT_FOUND", "%s", describeErr(err))
				case cl.Run.RunID != h.RunID:
					c.Fatalf("claim-next to claim the only matching run "+h.RunID, "claimed %s", cl.Run.RunID)
				default:
					k.claimed, k.token = true, cl.Lease.Token
					err := ls.ReleaseLease(c.ctx, runstate.ReleaseLeaseParams{RunID: h.RunID, Token: cl.Lease.Token})
					if err != nil {
						c.Fatalf("releasing the claimer's own live lease to succeed", "%s", describeErr(err))
					}
					k.released = time.Now()
				}
				mu.Lock()
				calls = append(calls, k)
				mu.Unlock()
			}
		case i < claimers+decoys:
			ls := c.leaseStoreOf(store)
			o := owner(fmt.Sprintf("decoy-%d", i))
			for !stopped() {
				_, err := ls.ClaimNextRun(c.ctx, runstate.ClaimNextParams{Owner: o, TTL: runstate.DefaultRecoveryLeaseTTL, Filter: nothing})
				if !errors.Is(err, runstate.ErrNotFound) {
					c.Fatalf("claim-next with a filter no run matches to answer NOT_FOUND", "%s", describeErr(err))
				}
			}
		default:
			for n := 0; !stopped(); n++ {
				cur, err := store.GetRun(c.ctx, h.RunID)
				if err != nil {
					c.Fatalf("GetRun of H to succeed", "%s", describeErr(err))
				}
				msg := fmt.Sprintf("rewritten by writer %d, round %d", i, n)
				_, err = store.UpdateRun(c.ctx, runstate.UpdateRunParams{RunID: h.RunID, ExpectedVersion: cur.Version, Message: &msg})
				if err != nil && !errors.Is(err, runstate.ErrVersionConflict) {
					c.Fatalf("the writer's compare-and-set to succeed or conflict", "%s", describeErr(err))
				}
			}
		}
	})
	return calls
}

// heldByAnother reports whether another claimer's claim-to-release span
// overlaps call k: only then may H have been leased during k.
func heldByAnother(calls []call, k call) bool {
	for _, o := range calls {
		if o.claimed && o.claimer != k.claimer && o.start.Before(k.end) && k.start.Before(o.released) {
			return true
		}
	}
	return false
}
