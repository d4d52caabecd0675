package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/runstate/runstate"
)

// renewPeriodically renews the leases of every run in hand each
// RenewEvery until ctx ends.
func (w *Worker) renewPeriodically(ctx context.Context) {
	t := time.NewTicker(w.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.renewAll(ctx)
	}
}

// renewAll sends the renewals of every run in hand at once, so that a
// store with group commit writes them as one, and waits for them; each
// gets at most RenewEvery, so that a store that hangs delays no tick
// beyond that.
func (w *Worker) renewAll(ctx context.Context) {
	w.mu.Lock()
	jobs := make([]*Job, 0, len(w.inHand))
	for _, j := range w.inHand {
		jobs = append(jobs, j)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.RenewEvery)
	defer cancel()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { w.renew(ctx, j) })
	}
	wg.Wait()
}

// renew renews one job's lease and acts on the answer: a lost lease ends
// the handler's context, and a lease whose renewals failed until its
// expiry is treated as lapsed. Every failed or late renewal is logged with
// its margin, not only the first.
func (w *Worker) renew(ctx context.Context, j *Job) {
	lease, expires, holding := j.renewal()
	if !holding {
		return
	}
	sent := time.Now()
	renewed, err := w.store.RenewLease(ctx, runstate.RenewLeaseParams{RunID: j.id, Token: lease.Token, TTL: w.cfg.LeaseTTL})
	switch {
	case err == nil:
		if late := j.renewed(renewed, sent); late > 0 {
			w.stats.lateRenewals.Add(1)
			w.log.Warn("a lease renewal was sent after the lease's expiry; the store still took it, as no one had claimed the run",
				"run_id", j.id, "late_by", late.Round(time.Millisecond))
		}
	case errors.Is(err, runstate.ErrLeaseLost):
		// A completion that released the lease meanwhile says the same:
		// the completer, which knows, reports the run then.
		if j.is(inHandler) {
			w.log.Warn("the run's lease was lost: another worker owns it now; stopping its handler", "run_id", j.id)
			j.lose()
		}
	default:
		w.stats.failedRenewals.Add(1)
		// The job's lapse timer stops the handler once the lease's time is
		// up, whatever the renewals still in flight.
		w.log.Warn("a lease renewal failed; it is tried again at the next renewal", "run_id", j.id, "error", err,
			"lease_left", time.Until(expires).Round(time.Millisecond))
	}
}
