package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// The claimers of FAULT-005: each fault's pool of runs is drained by
// claim-next with long leases, so that no lease expires during the check.
const (
	faultClaimers = 4
	faultPool     = 40
	faultClaimTTL = 10 * time.Minute
)

// claimLedger is what the claimers of one fault saw.
type claimLedger struct {
	queue string   // the workflow name of the fault's pool
	ids   []string // the pool's runs

	mu       sync.Mutex
	claims   map[string][]runstate.Lease // acknowledged claims by run
	odd      []string                    // claims that failed otherwise than by a fault
	gaveUp   []string                    // claimers still claiming recoveryLimit after the end
	hung     bool                        // a claimer stopped on a call that did not return
	notFound int                         // answers NOT_FOUND while the fault lasted
}

// claimThroughFault fills a pool for fault f, has the claimers drain it
// over their handles while f starts and ends, and returns once it ended.
func (c *checkState) claimThroughFault(f Fault, handles []runstate.RunStateStore) *claimLedger {
	l := &claimLedger{queue: "fault-" + string(f), claims: map[string][]runstate.Lease{}}
	for range faultPool {
		l.ids = append(l.ids, c.create(runstate.CreateRunParams{WorkflowName: l.queue}).RunID)
	}
	span := c.faultWhile(f, 100*time.Millisecond)
	c.parallel(faultClaimers, func(w int) {
		c.claimUntilDrained(f, l, handles[w], owner(fmt.Sprintf("claimer-%d", w)), span.endedAt)
	})
	for span.endedAt().IsZero() {
		time.Sleep(10 * time.Millisecond)
	}
	return l
}

// claimUntilDrained is one claimer: it claims from the pool until, the
// fault over, claim-next answers NOT_FOUND, or recoveryLimit has passed.
func (c *checkState) claimUntilDrained(f Fault, l *claimLedger, handle runstate.RunStateStore, me runstate.Owner, endedAt func() time.Time) {
	ls := c.leaseStoreOf(handle)
	for {
		var cl runstate.Claim
		err, ok := c.faultCall("ClaimNextRun", f, func(ctx context.Context) (err error) {
			cl, err = ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: me, TTL: faultClaimTTL, Filter: runstate.RunnableFilter{WorkflowName: l.queue}})
			return
		})
		if !ok {
			l.mu.Lock()
			l.hung = true
			l.mu.Unlock()
			return
		}
		end := endedAt()
		switch {
		case err == nil:
			l.mu.Lock()
			l.claims[cl.Run.RunID] = append(l.claims[cl.Run.RunID], cl.Lease)
			l.mu.Unlock()
			// Paced, so that the pool lasts through the fault.
			time.Sleep(150 * time.Millisecond)
		case errors.Is(err, runstate.ErrNotFound) && !end.IsZero():
			return
		case errors.Is(err, runstate.ErrNotFound):
			l.mu.Lock()
			l.notFound++
			l.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		case !faultError(err):
			l.mu.Lock()
			l.odd = append(l.odd, describeErr(err))
			l.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		default:
			time.Sleep(20 * time.Millisecond)
		}
		if !end.IsZero() && time.Since(end) > recoveryLimit {
			l.mu.Lock()
			l.gaveUp = append(l.gaveUp, me.String())
			l.mu.Unlock()
			return
		}
	}
}
