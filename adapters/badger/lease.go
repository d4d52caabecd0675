package badger

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate/spec"
)

// leasedRun is a run read together with its lease.
type leasedRun struct {
	run   storedRun
	lease spec.LeaseState
}

// runnableRuns returns, in claim order and after q.After, up to limit runs
// in q's statuses that accept takes. It reads the head of each status's
// claim-order index, the expired part of its expiry index and, for a
// claimant, the leases held by claimant's worker (an earlier incarnation's
// leases do not bind it).
func runnableRuns(txn *bdb.Txn, head *queueHead, q spec.RunnableQuery, now time.Time, claimant *spec.Owner, limit int, accept func(leasedRun) bool) ([]leasedRun, error) {
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
		if (q.After != nil && !q.After.Less(spec.RunnablePositionOf(r.Run))) || !accept(c) {
			return false, nil
		}
		out = append(out, c)
		return true, nil
	}
	var statuses []spec.RunStatus
	for _, st := range q.Statuses {
		if !slices.Contains(statuses, st) {
			statuses = append(statuses, st)
		}
	}
	for _, st := range statuses {
		prefix := queuePrefix(st)
		seek := head.seek(prefix)
		if q.After != nil {
			if after := queuePosAfter(prefix, *q.After); bytes.Compare(after, seek) > 0 {
				seek = after
			}
		}
		taken := 0
		err := scanKeys(txn, prefix, seek, func(k []byte) (bool, error) {
			ok, err := consider(runIDOf(k, len(prefix)+16))
			if ok {
				taken++
			}
			return taken < limit, err
		})
		if err != nil {
			return nil, err
		}
		// Expired leases come in expiry order, not claim order: take them all.
		xp := expiryPrefix(st)
		err = scanKeys(txn, xp, xp, func(k []byte) (bool, error) {
			if now.Before(parseMicros(k[len(xp) : len(xp)+8])) {
				return false, nil // the rest are live
			}
			_, err := consider(runIDOf(k, len(xp)+8))
			return true, err
		})
		if err != nil {
			return nil, err
		}
	}
	if claimant != nil {
		if err := otherIncarnations(txn, *claimant, func(id string) error {
			_, err := consider(id)
			return err
		}); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b leasedRun) int {
		return spec.RunnablePositionOf(a.run.Run).Compare(spec.RunnablePositionOf(b.run.Run))
	})
	return out[:min(len(out), limit)], nil
}

// otherIncarnations visits the runs leased to owner's worker under any
// incarnation but owner's own, seeking past the owner's own leases.
func otherIncarnations(txn *bdb.Txn, owner spec.Owner, visit func(runID string) error) error {
	worker, own := ownerPrefix(owner.Worker), ownerIncarnationPrefix(owner)
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
			return spec.Unavailable("badger owner index key is malformed: the directory is damaged", nil)
		}
		if err := visit(string(k[len(worker)+inc+1:])); err != nil {
			return err
		}
		it.Next()
	}
	return nil
}

// ClaimRun implements spec.LeaseStore.
func (s *Store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	c, err := spec.PrepareClaimRun(p)
	if err != nil {
		return spec.Claim{}, err
	}
	var out spec.Claim
	err = s.updateRun(ctx, c.RunID, func(txn *tx) error {
		r, ok, err := getRun(txn, c.RunID)
		if err != nil {
			return err
		}
		if !ok {
			return spec.NotFound(c.RunID)
		}
		l, err := getLease(txn, c.RunID)
		if err != nil {
			return err
		}
		out, err = s.take(txn, leasedRun{r, l}, c)
		return err
	})
	return out, err
}

// take applies the claim rules to a run read in txn and stores the new lease.
func (s *Store) take(txn *tx, c leasedRun, p spec.PreparedClaim) (spec.Claim, error) {
	l, err := c.lease.Claim(c.run.Run, p.Owner, p.TTL, p.Statuses, s.now())
	if err != nil {
		return spec.Claim{}, err
	}
	id := c.run.Run.RunID
	if err := writeLease(txn, c.run.Run, c.lease, l); err != nil {
		return spec.Claim{}, err
	}
	return spec.Claim{Lease: l.Lease(id), Run: c.run.Run}, nil
}

// ClaimNextRun implements spec.LeaseStore. It passes over runs whose lock
// another call holds (a writer, another claimer) and locks the one it
// takes. When passing over leaves nothing, it waits for those locks and
// looks again, so that it never answers that nothing is runnable while a
// matching run was runnable (LEASE-017).
func (s *Store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	q, err := spec.PrepareClaimNext(p)
	if err != nil {
		return spec.Claim{}, err
	}
	for {
		out, busy, err := s.claimNext(ctx, q, p)
		if len(busy) == 0 || !errors.Is(err, spec.ErrNotFound) {
			return out, err
		}
		for _, done := range busy {
			select {
			case <-done:
			case <-ctx.Done():
				return spec.Claim{}, ctx.Err()
			}
		}
	}
}

// claimNext makes one attempt of claim-next. When it finds nothing, busy
// holds the locks of matching runs it passed over. It locks only the run it
// takes, and keeps that lock across Badger's conflict retries, so that a
// retry of the same pick cannot lose to the same writer again. Concurrent
// claimers never take the same run (LEASE-002).
func (s *Store) claimNext(ctx context.Context, q spec.RunnableQuery, p spec.ClaimNextParams) (out spec.Claim, busy []<-chan struct{}, err error) {
	var locked string
	defer func() {
		if locked != "" {
			s.locks.unlock(locked)
		}
	}()
	err = s.update(ctx, func(txn *tx) error {
		for {
			busy = nil
			now := s.now()
			best, err := runnableRuns(txn.Txn, &s.head, q, now, &p.Owner, 1, func(c leasedRun) bool {
				id := c.run.Run.RunID
				if !q.ClaimableBy(c.run.Run, c.lease, p.Owner, now) {
					return false
				}
				if held := s.locks.heldBy(id); held != nil && id != locked {
					busy = append(busy, held)
					return false
				}
				return true
			})
			if err != nil {
				return err
			}
			if len(best) == 0 { // LEASE-013
				return &spec.Error{Code: spec.CodeNotFound, Message: "no runnable run matches the filter"}
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
			out, err = s.take(txn, best[0], spec.PreparedClaim{Owner: p.Owner, TTL: p.TTL, Statuses: q.Statuses})
			return err
		}
	})
	if err == nil {
		s.head.advance(s.db, queuePrefix(out.Run.Status))
	}
	return out, busy, err
}

// RenewLease implements spec.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, p spec.RenewLeaseParams) (spec.Lease, error) {
	if err := spec.PrepareRenew(p); err != nil {
		return spec.Lease{}, err
	}
	var out spec.Lease
	err := s.changeLease(ctx, p.RunID, func(l spec.LeaseState) (spec.LeaseState, error) {
		next, err := l.Renew(p.RunID, p.Token, p.TTL, s.now())
		out = next.Lease(p.RunID)
		return next, err
	})
	return out, err
}

// ReleaseLease implements spec.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, p spec.ReleaseLeaseParams) error {
	if err := spec.PrepareRelease(p); err != nil {
		return err
	}
	return s.changeLease(ctx, p.RunID, func(l spec.LeaseState) (spec.LeaseState, error) { return l.Release(p.RunID, p.Token) })
}

// changeLease reads a run's lease, applies change and stores the result.
func (s *Store) changeLease(ctx context.Context, runID string, change func(spec.LeaseState) (spec.LeaseState, error)) error {
	return s.updateRun(ctx, runID, func(txn *tx) error {
		r, ok, err := getRun(txn, runID)
		if err != nil {
			return err
		}
		if !ok {
			return spec.NotFound(runID)
		}
		old, err := getLease(txn, runID)
		if err != nil {
			return err
		}
		next, err := change(old)
		if err != nil {
			return err
		}
		return writeLease(txn, r.Run, old, next)
	})
}

// ListRunnableRuns implements spec.LeaseStore.
func (s *Store) ListRunnableRuns(ctx context.Context, p spec.ListRunnableParams) (spec.RunPage, error) {
	q, err := spec.PrepareRunnable(p.Filter, p.Limit, p.Cursor)
	if err != nil {
		return spec.RunPage{}, err
	}
	var page spec.RunPage
	err = s.view(ctx, func(txn *bdb.Txn) error {
		now := s.now()
		found, err := runnableRuns(txn, &s.head, q, now, nil, q.Limit+1, func(c leasedRun) bool { return q.Runnable(c.run.Run, c.lease, now) })
		if err != nil {
			return err
		}
		if len(found) > q.Limit {
			found = found[:q.Limit]
			page.NextCursor = spec.RunnablePositionOf(found[len(found)-1].run.Run).Cursor()
		}
		for _, c := range found {
			page.Runs = append(page.Runs, c.run.Run)
		}
		return nil
	})
	return page, err
}
