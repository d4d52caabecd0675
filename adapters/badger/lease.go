package badger

import (
	"bytes"
	"context"
	"slices"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate/spec"
)

// leasedRun is a run read together with its lease.
type leasedRun struct {
	run   storedRun
	lease spec.LeaseState
}

// runnableRuns walks the claim-order index of every status in q from the
// cursor on and returns, merged in claim order, up to perStatus runs of each
// status that accept takes.
func runnableRuns(txn *bdb.Txn, q spec.RunnableQuery, perStatus int, accept func(leasedRun) bool) ([]leasedRun, error) {
	var out []leasedRun
	var seen [][]byte
	for _, st := range q.Statuses {
		prefix := queuePrefix(st)
		if slices.ContainsFunc(seen, func(x []byte) bool { return bytes.Equal(x, prefix) }) {
			continue
		}
		seen = append(seen, prefix)
		seek := prefix
		if q.After != nil {
			seek = queuePosAfter(prefix, *q.After)
		}
		n := 0
		err := scanKeys(txn, prefix, seek, func(k []byte) (bool, error) {
			id := runIDOf(k, len(prefix)+16)
			r, err := mustGetRun(txn, id)
			if err != nil {
				return false, err
			}
			l, err := getLease(txn, id)
			if err != nil {
				return false, err
			}
			if c := (leasedRun{r, l}); accept(c) {
				out = append(out, c)
				n++
			}
			return n < perStatus, nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b leasedRun) int {
		return spec.RunnablePositionOf(a.run.Run).Compare(spec.RunnablePositionOf(b.run.Run))
	})
	return out, nil
}

// ClaimRun implements spec.LeaseStore.
func (s *Store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	c, err := spec.PrepareClaimRun(p)
	if err != nil {
		return spec.Claim{}, err
	}
	var out spec.Claim
	err = s.update(ctx, func(txn *bdb.Txn) error {
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
func (s *Store) take(txn *bdb.Txn, c leasedRun, p spec.PreparedClaim) (spec.Claim, error) {
	l, err := c.lease.Claim(c.run.Run, p.Owner, p.TTL, p.Statuses, s.now())
	if err != nil {
		return spec.Claim{}, err
	}
	id := c.run.Run.RunID
	if err := setJSON(txn, leaseKey(id), l); err != nil {
		return spec.Claim{}, err
	}
	return spec.Claim{Lease: l.Lease(id), Run: c.run.Run}, nil
}

// ClaimNextRun implements spec.LeaseStore.
func (s *Store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	q, err := spec.PrepareClaimNext(p)
	if err != nil {
		return spec.Claim{}, err
	}
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	var out spec.Claim
	err = s.update(ctx, func(txn *bdb.Txn) error {
		now := s.now()
		best, err := runnableRuns(txn, q, 1, func(c leasedRun) bool { return q.ClaimableBy(c.run.Run, c.lease, p.Owner, now) })
		if err != nil {
			return err
		}
		if len(best) == 0 {
			return &spec.Error{Code: spec.CodeNotFound, Message: "no runnable run matches the filter"}
		}
		out, err = s.take(txn, best[0], spec.PreparedClaim{Owner: p.Owner, TTL: p.TTL, Statuses: q.Statuses})
		return err
	})
	return out, err
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
	return s.update(ctx, func(txn *bdb.Txn) error {
		if _, ok, err := getRun(txn, runID); err != nil || !ok {
			if err == nil {
				err = spec.NotFound(runID)
			}
			return err
		}
		l, err := getLease(txn, runID)
		if err != nil {
			return err
		}
		if l, err = change(l); err != nil {
			return err
		}
		return setJSON(txn, leaseKey(runID), l)
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
		found, err := runnableRuns(txn, q, q.Limit+1, func(c leasedRun) bool { return q.Runnable(c.run.Run, c.lease, now) })
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
