package etcd

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// InsertMany implements driver.BatchInserter: every run in one
// transaction that compares that none of them exists (BATCH-001).
func (s *storage) InsertMany(ctx context.Context, runs []driver.InsertParams) error {
	cmps := make([]clientv3.Cmp, len(runs))
	var ops []clientv3.Op
	for i, r := range runs {
		cmp, more, err := s.insertOps(r)
		if err != nil {
			return err
		}
		cmps[i], ops = cmp, append(ops, more...)
	}
	return s.retry(ctx, func() error {
		_, err := s.commit(ctx, cmps, ops)
		if !errors.Is(err, errConflict) {
			return err
		}
		return s.existing(ctx, runs)
	})
}

// existing names the first of runs that exists, after an insert of them
// found one; with none (which cannot be, as runs are never deleted) the
// insert is made again.
func (s *storage) existing(ctx context.Context, runs []driver.InsertParams) error {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.Run.RunID
	}
	found, err := (&snapshot{s: s, ctx: ctx}).lookup(ids)
	if err != nil {
		return err
	}
	for i, r := range found {
		if r != nil {
			return &runstate.BatchItemError{Index: i, Err: runstate.ErrAlreadyExists}
		}
	}
	return errConflict
}
