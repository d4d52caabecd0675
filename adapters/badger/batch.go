package badger

import (
	"context"
	"errors"
	"slices"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

var (
	_ driver.BatchInserter    = (*storage)(nil)
	_ driver.BatchModifier    = (*storage)(nil)
	_ driver.BatchNextClaimer = (*storage)(nil)
	_ runstate.BatchCreator   = (*Store)(nil)
)

// CreateRuns implements runstate.BatchCreator: all runs or none, in one
// transaction.
func (s *Store) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return s.Store.Features().BatchCreator.CreateRuns(ctx, p)
}

// InsertMany implements driver.BatchInserter: every run in one
// transaction, which an existing id aborts (BATCH-001).
func (s *storage) InsertMany(ctx context.Context, runs []driver.InsertParams) error {
	return s.update(ctx, func(txn *tx) error {
		for i, r := range runs {
			if err := insert(txn, r); err != nil {
				if errors.Is(err, runstate.ErrAlreadyExists) {
					return &runstate.BatchItemError{Index: i, Err: err}
				}
				return err
			}
		}
		return nil
	})
}

// ModifyMany implements driver.BatchModifier: it holds the lock of every
// run of the batch, taken in run_id order so that two batches cannot wait
// for each other, and writes all changes in one transaction (BATCH-004).
func (s *storage) ModifyMany(ctx context.Context, items []driver.ModifyItem) error {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.RunID
	}
	slices.Sort(ids)
	for i, id := range ids {
		if err := s.locks.lock(ctx, id); err != nil {
			s.locks.unlock(ids[:i]...)
			return err
		}
	}
	defer s.locks.unlock(ids...)
	return s.update(ctx, func(txn *tx) error {
		for i := range items {
			items[i].Err = nil // a retry decides afresh
			cur, lease, err := s.current(txn, items[i].RunID)
			if errors.Is(err, runstate.ErrNotFound) {
				items[i].Err = err
				continue
			}
			if err != nil {
				return err
			}
			change := items[i].Change(driver.Current{Run: cur.Run, Lease: lease, LastSeq: cur.LastSeq, Now: s.now()})
			if err := write(txn, cur, lease, change); err != nil {
				return err
			}
		}
		return nil
	})
}

// ClaimNextMany implements driver.BatchNextClaimer as ClaimNext does, for
// up to max runs in one transaction: it passes over runs whose lock another
// call holds, and waits for them only when that leaves nothing, so that it
// never answers 0 while a matching run was runnable (BATCH-007).
func (s *storage) ClaimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	for {
		n, busy, err := s.claimNextMany(ctx, q, max, take)
		if n > 0 || err != nil || len(busy) == 0 {
			return n, err
		}
		for _, done := range busy {
			select {
			case <-done:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
}

// claimNextMany makes one attempt. It locks each run it takes and keeps
// those locks across Badger's conflict retries; runs locked by others are
// passed over, so concurrent claimers never take one run (BATCH-006).
func (s *storage) claimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (n int, busy []<-chan struct{}, err error) {
	locked := map[string]bool{}
	defer func() {
		for id := range locked {
			s.locks.unlock(id)
		}
	}()
	var statuses []runstate.RunStatus
	q.Limit = max
	err = s.update(ctx, func(txn *tx) error {
		busy, n, statuses = nil, 0, nil
		now := s.now()
		best, err := runnableRuns(txn.Txn, &s.head, q, now, func(c leasedRun) bool {
			id := c.run.Run.RunID
			if held := s.locks.heldBy(id); held != nil && !locked[id] {
				busy = append(busy, held)
				return false
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, c := range best {
			id := c.run.Run.RunID
			if !locked[id] {
				if held := s.locks.tryLock(id); held != nil {
					// Taken between the look and the lock: passed over as
					// one held at the look, so that a claim that finds
					// nothing else waits for it (BATCH-007), never 0.
					busy = append(busy, held)
					continue
				}
				locked[id] = true
			}
			if err := write(txn, c.run, c.lease, take(driver.Current{Run: c.run.Run, Lease: c.lease, LastSeq: c.run.LastSeq, Now: now})); err != nil {
				return err
			}
			n++
			statuses = append(statuses, c.run.Run.Status)
		}
		return nil
	})
	if err != nil {
		return 0, busy, err
	}
	for _, st := range slices.Compact(statuses) {
		s.head.advance(s.db, layout.Queue(st))
	}
	return n, busy, nil
}
