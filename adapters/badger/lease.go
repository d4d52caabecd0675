package badger

import (
	"bytes"
	"context"
	"slices"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/internal/kvindex"
	"github.com/runstate/runstate/driver"
)

// leasedRun is a run read together with its lease.
type leasedRun struct {
	run   storedRun
	lease driver.LeaseState
}

// runnableRuns returns, in claim order and after q.After, up to q.Limit
// runs that q admits at now and accept takes. It reads the head of each
// status's claim-order index, the expired part of its expiry index and,
// for a claimant, the leases held by the claimant's worker (an earlier
// incarnation's leases do not bind it).
func runnableRuns(txn *bdb.Txn, head *queueHead, q driver.RunnableQuery, now time.Time, accept func(leasedRun) bool) ([]leasedRun, error) {
	limit := q.Limit
	var out []leasedRun
	seen := map[string]bool{}
	consider := func(id string) (bool, error) {
		if seen[id] {
			return false, nil
		}
		seen[id] = true
		r, err := mustGetRun(txn, id)
		if err != nil {
			return false, err
		}
		l, err := getLease(txn, id)
		if err != nil {
			return false, err
		}
		c := leasedRun{r, l}
		if (q.After != nil && !q.After.Less(driver.RunnablePositionOf(r.Run))) || !q.Admits(r.Run, l, now) || !accept(c) {
			return false, nil
		}
		out = append(out, c)
		return true, nil
	}
	var statuses []runstate.RunStatus
	for _, st := range q.Statuses {
		if !slices.Contains(statuses, st) {
			statuses = append(statuses, st)
		}
	}
	for _, st := range statuses {
		prefix := layout.Queue(st)
		seek := head.seek(prefix)
		if q.After != nil {
			if after := kvindex.QueuePosAfter(prefix, *q.After); bytes.Compare(after, seek) > 0 {
				seek = after
			}
		}
		taken := 0
		err := scanKeys(txn, prefix, seek, func(k []byte) (bool, error) {
			ok, err := consider(kvindex.RunIDOf(k, len(prefix)+16))
			if ok {
				taken++
			}
			return taken < limit, err
		})
		if err != nil {
			return nil, err
		}
		// Expired leases come in expiry order, and due parked runs in wake
		// order, not claim order: take them all (WAKE-001).
		for _, tp := range [][]byte{layout.Expiry(st), layout.Parked(st)} {
			err = scanKeys(txn, tp, tp, func(k []byte) (bool, error) {
				if now.Before(kvindex.ParseMicros(k[len(tp) : len(tp)+8])) {
					return false, nil // the rest are later
				}
				_, err := consider(kvindex.RunIDOf(k, len(tp)+8))
				return true, err
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if q.Claimant != nil {
		if err := otherIncarnations(txn, *q.Claimant, func(id string) error {
			_, err := consider(id)
			return err
		}); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b leasedRun) int {
		return driver.RunnablePositionOf(a.run.Run).Compare(driver.RunnablePositionOf(b.run.Run))
	})
	return out[:min(len(out), limit)], nil
}

// otherIncarnations visits the runs leased to owner's worker under any
// incarnation but owner's own, seeking past the owner's own leases.
func otherIncarnations(txn *bdb.Txn, owner runstate.Owner, visit func(runID string) error) error {
	worker, own := layout.Owner(owner.Worker), layout.OwnerIncarnation(owner)
	it := txn.NewIterator(bdb.IteratorOptions{Prefix: worker})
	defer it.Close()
	for it.Seek(worker); it.Valid(); {
		k := it.Item().Key()
		if bytes.HasPrefix(k, own) {
			// own ends in 0x00; 0x01 in its place is the first key after its range.
			it.Seek(append(own[:len(own)-1:len(own)-1], 1))
			continue
		}
		inc := bytes.IndexByte(k[len(worker):], 0)
		if inc < 0 {
			return runstate.Unavailable("badger owner index key is malformed: the directory is damaged", nil)
		}
		if err := visit(string(k[len(worker)+inc+1:])); err != nil {
			return err
		}
		it.Next()
	}
	return nil
}

// ClaimNext implements driver.NextClaimer. It passes over runs whose lock
// another call holds (a writer, another claimer) and locks the one it
// takes. When passing over leaves nothing, it waits for those locks and
// looks again, so that it never answers that nothing is runnable while a
// matching run was runnable (LEASE-017).
func (s *storage) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	for {
		found, busy, err := s.claimNext(ctx, q, take)
		if found || err != nil || len(busy) == 0 {
			return found, err
		}
		for _, done := range busy {
			select {
			case <-done:
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
	}
}

// claimNext makes one attempt of claim-next. When it finds nothing, busy
// holds the locks of matching runs it passed over. It locks only the run it
// takes, and keeps that lock across Badger's conflict retries, so that a
// retry of the same pick cannot lose to the same writer again. Concurrent
// claimers never take the same run (LEASE-002).
func (s *storage) claimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (found bool, busy []<-chan struct{}, err error) {
	var locked string
	defer func() {
		if locked != "" {
			s.locks.unlock(locked)
		}
	}()
	var status runstate.RunStatus
	err = s.update(ctx, func(txn *tx) error {
		for {
			busy, found = nil, false
			now := s.now()
			best, err := runnableRuns(txn.Txn, &s.head, q, now, func(c leasedRun) bool {
				id := c.run.Run.RunID
				if held := s.locks.heldBy(id); held != nil && id != locked {
					busy = append(busy, held)
					return false
				}
				return true
			})
			if err != nil || len(best) == 0 {
				return err
			}
			id := best[0].run.Run.RunID
			if id != locked {
				if locked != "" {
					s.locks.unlock(locked)
					locked = ""
				}
				if s.locks.tryLock(id) != nil {
					continue // taken between the look and the lock: pick again
				}
				locked = id
			}
			found, status = true, best[0].run.Run.Status
			c := best[0]
			return write(txn, c.run, c.lease, take(driver.Current{Run: c.run.Run, Lease: c.lease, LastSeq: c.run.LastSeq, Now: now}))
		}
	})
	if err == nil && found {
		s.head.advance(s.db, layout.Queue(status))
	}
	return found, busy, err
}

// Runnable implements driver.Driver.
func (s *storage) Runnable(ctx context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	var out []runstate.RunSnapshot
	err := s.view(ctx, func(txn *bdb.Txn) error {
		found, err := runnableRuns(txn, &s.head, q, s.now(), func(leasedRun) bool { return true })
		for _, c := range found {
			out = append(out, c.run.Run)
		}
		return err
	})
	return out, err
}
