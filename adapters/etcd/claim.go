package etcd

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// opsPerClaim bounds the operations one claim adds to a transaction: the
// run key, a start's audit event, and the index moves of a status change
// and a lease (status, queue, expiry, owner).
const opsPerClaim = 12

// expiryPage is how many keys of the expiry index one read takes.
const expiryPage = 64

// runnable returns, in claim order and after q.After, up to q.Limit runs
// that q admits at now, read at one revision. It reads the head of each
// status's claim-order index, the expired part of its expiry index, the
// due part of its parked index and,
// for a claimant, the leases held by the claimant's worker under other
// incarnations (which do not bind it, LEASE-012): all of them in one
// round trip, and their runs in a second.
func (s *storage) runnable(snap *snapshot, q driver.RunnableQuery, now time.Time) ([]record, error) {
	limit := q.Limit
	var out []record
	seen := map[string]bool{}
	consider := func(r record) bool {
		if seen[r.Run.RunID] {
			return false
		}
		seen[r.Run.RunID] = true
		if (q.After != nil && !q.After.Less(driver.RunnablePositionOf(r.Run))) || !q.Admits(r.Run, r.Lease, now) {
			return false
		}
		out = append(out, r)
		return true
	}
	considerAll := func(r record) bool { consider(r); return true }
	var statuses []runstate.RunStatus
	for _, st := range q.Statuses {
		if !slices.Contains(statuses, st) {
			statuses = append(statuses, st)
		}
	}
	var ranges []indexRange
	for _, st := range statuses {
		prefix := s.k.queue(st)
		from := prefix
		if q.After != nil {
			from = queuePosAfter(prefix, *q.After)
		}
		taken := 0
		ranges = append(ranges, indexRange{from: from, end: prefixEnd(prefix), page: limit,
			idOf: func(k string) string { return k[len(prefix)+16:] },
			visit: func(r record) bool {
				if consider(r) {
					taken++
				}
				return taken < limit
			}})
		// Expired leases come in expiry order, not claim order: take them
		// all. A lease has expired from its ExpiresAt on (LEASE-018).
		xp := s.k.expiry(st)
		ranges = append(ranges, indexRange{from: xp, end: xp + micros(now.Add(time.Microsecond)), page: expiryPage,
			idOf: func(k string) string { return k[len(xp)+8:] }, visit: considerAll})
		// So do parked runs that are due, in wake order (WAKE-001).
		pp := s.k.parked(st)
		ranges = append(ranges, indexRange{from: pp, end: pp + micros(now.Add(time.Microsecond)), page: expiryPage,
			idOf: func(k string) string { return k[len(pp)+8:] }, visit: considerAll})
	}
	if q.Claimant != nil {
		worker, own := s.k.owner(q.Claimant.Worker), s.k.ownerIncarnation(*q.Claimant)
		idOf := func(k string) string {
			rest := k[len(worker):] // incarnation 0 run_id
			return rest[strings.IndexByte(rest, 0)+1:]
		}
		// The worker's keys before its own incarnation's, then after them.
		ranges = append(ranges,
			indexRange{from: worker, end: own, page: expiryPage, idOf: idOf, visit: considerAll},
			indexRange{from: prefixEnd(own), end: prefixEnd(worker), page: expiryPage, idOf: idOf, visit: considerAll})
	}
	if err := snap.walkAll(ranges); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b record) int {
		return driver.RunnablePositionOf(a.Run).Compare(driver.RunnablePositionOf(b.Run))
	})
	return out[:min(len(out), limit)], nil
}

// Runnable implements driver.Driver.
func (s *storage) Runnable(ctx context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	var out []runstate.RunSnapshot
	err := s.read(ctx, func() error {
		found, err := s.runnable(&snapshot{s: s, ctx: ctx}, q, s.now())
		out = make([]runstate.RunSnapshot, len(found))
		for i, r := range found {
			out[i] = r.Run
		}
		return err
	})
	return out, err
}

// ClaimNext implements driver.NextClaimer: it finds the first run in claim
// order at one revision and claims it in a transaction that compares the
// run's revision. A claimer that loses the run to another write looks
// again, so concurrent claimers never take the same run (LEASE-002), and
// it answers false only when a read found nothing runnable (LEASE-017).
func (s *storage) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	n, err := s.claim(ctx, q, 1, take)
	return n == 1, err
}

// ClaimNextMany implements driver.BatchNextClaimer as ClaimNext does, for
// up to max runs in one transaction (BATCH-006, BATCH-007). A transaction
// holds at most Options.MaxTxnOps operations, so one call claims at most
// MaxTxnOps/opsPerClaim runs; the caller asks again for more.
func (s *storage) ClaimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	return s.claim(ctx, q, max, take)
}

// claimCandidates is how many runs a search for one claim keeps: when
// another claimer takes the first, the next is tried without a search.
const claimCandidates = 8

// claim claims up to want runs in one transaction. A search keeps the
// runs it found admitted, in claim order. When the transaction finds a
// run changed, it reads the runs again in the same round trip: if they
// are still admitted at the same place in claim order (a writer changed
// a message, say), the next attempt claims them at once; if a single
// claim's run was taken, the next attempt tries another of the runs the
// search found, picked at random so that racing claimers spread over
// them, and only when none is left does it search again. A claim thus
// races a writer or another claimer with one round trip, not a search.
func (s *storage) claim(ctx context.Context, q driver.RunnableQuery, want int, take func(driver.Current) driver.Change) (int, error) {
	perTxn := max(1, min(want, s.maxTxnOps/opsPerClaim))
	q.Limit = perTxn
	if perTxn == 1 {
		q.Limit = claimCandidates
	}
	var n int
	var found []record // admitted at the search, the ones to claim first
	err := s.retry(ctx, func() error {
		n = 0
		now := s.now()
		if len(found) == 0 {
			var err error
			if found, err = s.runnable(&snapshot{s: s, ctx: ctx}, q, now); err != nil || len(found) == 0 {
				return err
			}
		}
		best := found[:min(perTxn, len(found))]
		cmps := make([]clientv3.Cmp, len(best))
		ids := make([]string, len(best))
		var ops []clientv3.Op
		for i, c := range best {
			more, _, err := s.writeOps(&c.storedRun, c.storedRun, take(c.current(now)))
			if err != nil {
				return err
			}
			cmps[i], ids[i], ops = s.unchanged(c), c.Run.RunID, append(ops, more...)
		}
		fresh, err := s.commit(ctx, cmps, ops, ids...)
		if err == nil {
			n = len(best)
			return nil
		}
		switch again := stillClaimable(q, best, fresh, s.now()); {
		case again != nil:
			found = append(again, found[len(best):]...)
		case perTxn == 1 && len(found) > 1:
			found = found[1:]
			pick := rand.IntN(len(found))
			found[0], found[pick] = found[pick], found[0]
		default:
			found = nil
		}
		return err
	})
	return n, err
}

// stillClaimable returns the runs as fresh read them when every one is
// still admitted at its place in claim order, else nil (search again).
func stillClaimable(q driver.RunnableQuery, was []record, fresh []*record, now time.Time) []record {
	if len(fresh) != len(was) {
		return nil
	}
	out := make([]record, len(was))
	for i, r := range fresh {
		if r == nil || driver.RunnablePositionOf(r.Run).Compare(driver.RunnablePositionOf(was[i].Run)) != 0 || !q.Admits(r.Run, r.Lease, now) {
			return nil
		}
		out[i] = *r
	}
	return out
}
