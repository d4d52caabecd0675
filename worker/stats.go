package worker

import "sync/atomic"

// Stats count what a worker did since it was made.
type Stats struct {
	// Claimed counts the runs claimed.
	Claimed int64
	// Succeeded … Unwritten count the runs by their Outcome.
	Succeeded, Failed, Retried, HandedBack, Settled, Lost, Unwritten int64
	// LateRenewals counts renewals sent after their lease's expiry (as this
	// process tells it) that the store still took.
	LateRenewals int64
	// FailedRenewals counts renewals the store did not take for a reason
	// other than a lost lease (it was away, say).
	FailedRenewals int64
}

type counters struct {
	claimed, lateRenewals, failedRenewals atomic.Int64
	byOutcome                             [7]atomic.Int64
}

var outcomes = [...]Outcome{Succeeded, Failed, Retried, HandedBack, Settled, Lost, Unwritten}

func (c *counters) count(o Outcome) {
	for i, known := range outcomes {
		if known == o {
			c.byOutcome[i].Add(1)
		}
	}
}

// Stats returns the worker's counts so far.
func (w *Worker) Stats() Stats {
	c := &w.stats
	n := func(o int) int64 { return c.byOutcome[o].Load() }
	return Stats{Claimed: c.claimed.Load(), Succeeded: n(0), Failed: n(1), Retried: n(2), HandedBack: n(3), Settled: n(4),
		Lost: n(5), Unwritten: n(6), LateRenewals: c.lateRenewals.Load(), FailedRenewals: c.failedRenewals.Load()}
}
