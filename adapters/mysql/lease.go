package mysql

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate/spec"
)

// writeLease stores the lease state l of a locked run.
func writeLease(ctx context.Context, tx *sqlx.Tx, run spec.RunSnapshot, l spec.LeaseState) error {
	_, err := tx.ExecContext(ctx, qUpdateLease, l.Token, l.Owner.Worker, l.Owner.Incarnation,
		nullTime(l.AcquiredAt), nullTime(l.ExpiresAt), l.Released, queueOf(run, l), run.RunID)
	return err
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// claimLocked applies the claim rules to a locked row and stores the lease.
func claimLocked(ctx context.Context, tx *sqlx.Tx, row runRow, c spec.PreparedClaim) (spec.Claim, error) {
	run, err := row.run()
	if err != nil {
		return spec.Claim{}, err
	}
	l, err := row.lease().Claim(run, c.Owner, c.TTL, c.Statuses, spec.Timestamp(row.Now))
	if err != nil {
		return spec.Claim{}, err
	}
	if err := writeLease(ctx, tx, run, l); err != nil {
		return spec.Claim{}, err
	}
	return spec.Claim{Lease: l.Lease(run.RunID), Run: run}, nil
}

// ClaimRun implements spec.LeaseStore.
func (s *Store) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	c, err := spec.PrepareClaimRun(p)
	if err != nil {
		return spec.Claim{}, err
	}
	var out spec.Claim
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		row, err := s.lockRun(ctx, tx, c.RunID)
		if err != nil {
			return err
		}
		out, err = claimLocked(ctx, tx, row, c)
		return err
	})
	return out, err
}

// runnableFilter appends the status, workflow and label conditions of q.
func runnableFilter(b *strings.Builder, args []any, q spec.RunnableQuery) []any {
	if q.WorkflowName != "" {
		b.WriteString(byWorkflow)
		args = append(args, q.WorkflowName, q.WorkflowName)
	}
	for _, k := range slices.Sorted(maps.Keys(q.Labels)) {
		b.WriteString(hasLabel)
		args = append(args, k, q.Labels[k], q.Labels[k])
	}
	return args
}

func statusArgs(q spec.RunnableQuery) []string {
	out := make([]string, len(q.Statuses))
	for i, st := range q.Statuses {
		out[i] = string(st)
	}
	return out
}

type statement struct {
	query string
	args  []any
}

// claimCandidates returns the statement of claim-next that locks and reads
// its candidates: the head of the unleased queue, the first expired lease
// and the first lease of an earlier incarnation of owner's worker. With
// skipLocked it passes over rows that other transactions hold; without, it
// waits for them.
func (s *Store) claimCandidates(q spec.RunnableQuery, owner spec.Owner, skipLocked bool) (statement, error) {
	shift := s.clockParam()
	lock := forClaimWaiting
	if skipLocked {
		lock = forClaimSkipping
	}
	var b strings.Builder
	var args []any
	for i, part := range []statement{
		{qUnleasedHead, []any{shift, statusArgs(q)}},
		{qExpiredLease, []any{shift, shift, statusArgs(q)}},
		{qEarlierLife, []any{shift, owner.Worker, owner.Incarnation, statusArgs(q)}},
	} {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("(" + part.query)
		args = runnableFilter(&b, append(args, part.args...), q)
		b.WriteString(lock + ")")
	}
	query, args, err := sqlx.In(b.String(), args...)
	if err != nil {
		return statement{}, err
	}
	return statement{s.db.Rebind(query), args}, nil
}

// ClaimNextRun implements spec.LeaseStore. A first statement locks the best
// candidate of each kind, skipping rows that other transactions hold, and
// the best of those is claimed. SKIP LOCKED also skips a matching run that
// a writer or a claimer with another filter holds only for an instant, so
// when the first statement finds nothing, a second one waits (at most
// claimWaitLimit) for the held rows before claim-next answers that nothing
// is runnable (LEASE-017).
func (s *Store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	q, err := spec.PrepareClaimNext(p)
	if err != nil {
		return spec.Claim{}, err
	}
	var passes [2]statement
	for i, skipLocked := range []bool{true, false} {
		if passes[i], err = s.claimCandidates(q, p.Owner, skipLocked); err != nil {
			return spec.Claim{}, err
		}
	}
	var out spec.Claim
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		for i, candidates := range passes {
			var rows []runRow
			if i == 1 {
				waited, err := s.selectWaiting(ctx, tx, candidates)
				if err != nil {
					return err
				}
				rows = waited
			} else if err := tx.SelectContext(ctx, &rows, candidates.query, candidates.args...); err != nil {
				return err
			}
			best, err := bestClaimable(rows, q, p.Owner)
			if err != nil {
				return err
			}
			if best >= 0 {
				out, err = claimLocked(ctx, tx, rows[best], spec.PreparedClaim{Owner: p.Owner, TTL: p.TTL, Statuses: q.Statuses})
				return err
			}
		}
		return &spec.Error{Code: spec.CodeNotFound, Message: "no runnable run matches the filter"} // LEASE-013
	})
	return out, err
}

// claimWaitLimit bounds how long claim-next's second pass waits for a row
// another transaction holds. A run's row is held for milliseconds by a
// write; one held longer is answered UNAVAILABLE, never "nothing runnable".
const claimWaitLimit = 3 * time.Second

// selectWaiting runs the waiting pass with lock waits bounded by
// claimWaitLimit for this statement only.
func (s *Store) selectWaiting(ctx context.Context, tx *sqlx.Tx, candidates statement) ([]runRow, error) {
	if _, err := tx.ExecContext(ctx, qSetLockWait, int(claimWaitLimit/time.Second)); err != nil {
		return nil, err
	}
	defer tx.ExecContext(context.WithoutCancel(ctx), qResetLockWait)
	var rows []runRow
	err := tx.SelectContext(ctx, &rows, candidates.query, candidates.args...)
	if isErrorNumber(err, errLockWaitTimeout) {
		// Not retried: the row stayed locked for the whole limit.
		return nil, spec.Unavailable(fmt.Sprintf("claim-next: a matching run's row stayed locked by another transaction for %v; try again", claimWaitLimit), nil)
	}
	return rows, err
}

// bestClaimable returns the index of the row owner may claim that comes
// first in claim order, or -1.
func bestClaimable(rows []runRow, q spec.RunnableQuery, owner spec.Owner) (int, error) {
	best := -1
	var bestPos spec.RunnablePosition
	for i, row := range rows {
		run, err := row.run()
		if err != nil {
			return -1, err
		}
		if !q.ClaimableBy(run, row.lease(), owner, spec.Timestamp(row.Now)) {
			continue
		}
		if pos := spec.RunnablePositionOf(run); best < 0 || pos.Less(bestPos) {
			best, bestPos = i, pos
		}
	}
	return best, nil
}

// RenewLease implements spec.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, p spec.RenewLeaseParams) (spec.Lease, error) {
	if err := spec.PrepareRenew(p); err != nil {
		return spec.Lease{}, err
	}
	var out spec.Lease
	err := s.changeLease(ctx, p.RunID, func(l spec.LeaseState, row runRow) (spec.LeaseState, error) {
		next, err := l.Renew(p.RunID, p.Token, p.TTL, spec.Timestamp(row.Now))
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
	return s.changeLease(ctx, p.RunID, func(l spec.LeaseState, _ runRow) (spec.LeaseState, error) {
		return l.Release(p.RunID, p.Token)
	})
}

func (s *Store) changeLease(ctx context.Context, runID string, change func(spec.LeaseState, runRow) (spec.LeaseState, error)) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		row, err := s.lockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		run, err := row.run()
		if err != nil {
			return err
		}
		next, err := change(row.lease(), row)
		if err != nil {
			return err
		}
		return writeLease(ctx, tx, run, next)
	})
}

// ListRunnableRuns implements spec.LeaseStore: the unleased runs in claim
// order and the runs whose lease has expired, merged.
func (s *Store) ListRunnableRuns(ctx context.Context, p spec.ListRunnableParams) (spec.RunPage, error) {
	q, err := spec.PrepareRunnable(p.Filter, p.Limit, p.Cursor)
	if err != nil {
		return spec.RunPage{}, err
	}
	if err := s.open(); err != nil {
		return spec.RunPage{}, err
	}
	var runs []spec.RunSnapshot
	for _, head := range []struct {
		sql  string
		args []any
	}{
		{qListUnleased, []any{statusArgs(q)}},
		{qListExpired, []any{s.clockParam(), statusArgs(q)}},
	} {
		var b strings.Builder
		b.WriteString(head.sql)
		args := runnableFilter(&b, head.args, q)
		if a := q.After; a != nil {
			b.WriteString(afterClaimPos)
			args = append(args, a.Priority, a.Priority, a.CreatedAt, a.CreatedAt, a.RunID)
		}
		b.WriteString(byClaimOrder + ` LIMIT ?`)
		query, args, err := sqlx.In(b.String(), append(args, q.Limit+1)...)
		if err != nil {
			return spec.RunPage{}, err
		}
		found, err := s.selectSnapshots(ctx, s.db.Rebind(query), args)
		if err != nil {
			return spec.RunPage{}, err
		}
		runs = append(runs, found...)
	}
	slices.SortFunc(runs, func(a, b spec.RunSnapshot) int {
		return spec.RunnablePositionOf(a).Compare(spec.RunnablePositionOf(b))
	})
	page := spec.RunPage{Runs: runs}
	if len(runs) > q.Limit {
		page.Runs = runs[:q.Limit]
		page.NextCursor = spec.RunnablePositionOf(page.Runs[q.Limit-1]).Cursor()
	}
	return page, nil
}
