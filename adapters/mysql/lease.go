package mysql

import (
	"context"
	"errors"
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

// claimCandidates returns a statement of claim-next that reads its
// candidates: the head of the unleased queue, the first expired lease and
// the first lease of an earlier incarnation of owner's worker. lock is
// forClaimSkipping (lock each candidate, passing over rows that other
// transactions hold) or forClaimReading (a plain read of the latest
// committed rows, locking nothing).
func (s *Store) claimCandidates(q spec.RunnableQuery, owner spec.Owner, lock string) (statement, error) {
	shift := s.clockParam()
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

// maxClaimRounds bounds how often one claim-next call looks again after
// another call took the run it waited for. Each such round is another
// claimer's success, so the bound is reached only under a storm of claims.
const maxClaimRounds = 64

// ClaimNextRun implements spec.LeaseStore, in up to two passes.
//
// The first locks the best candidate of each kind, skipping rows that
// other transactions hold, and claims the best of those: under load it
// nearly always finds a run, and claimers never queue on the head of the
// queue. SKIP LOCKED also skips a matching run that a writer, or a claimer
// with another filter, holds only for an instant, so when the first pass
// finds nothing claimable, a second one reads the candidates without
// locking (the latest committed rows, so a run held by a writer is still
// seen as it is), locks the best by its primary key, waiting at most
// claimWaitLimit, and claims it if it is still claimable. Only when that
// read finds nothing does claim-next answer that nothing is runnable
// (LEASE-017). The second pass holds one row lock at a time, so it cannot
// deadlock with writers, which lock one run each.
//
// When the run it waited for was taken meanwhile (another claimer won
// it), the transaction ends having written nothing and claim-next looks
// again from the start.
func (s *Store) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	q, err := spec.PrepareClaimNext(p)
	if err != nil {
		return spec.Claim{}, err
	}
	skipping, err := s.claimCandidates(q, p.Owner, forClaimSkipping)
	if err != nil {
		return spec.Claim{}, err
	}
	claim := spec.PreparedClaim{Owner: p.Owner, TTL: p.TTL, Statuses: q.Statuses}
	for range maxClaimRounds {
		var out spec.Claim
		var found, taken bool
		err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			found, taken = false, false
			var rows []runRow
			if err := tx.SelectContext(ctx, &rows, skipping.query, skipping.args...); err != nil {
				return err
			}
			best, err := bestClaimable(rows, q, p.Owner)
			if err != nil || best < 0 {
				if err == nil {
					found, taken, err = s.claimWaiting(ctx, tx, q, claim, &out)
				}
				return err
			}
			found = true
			out, err = claimLocked(ctx, tx, rows[best], claim)
			return err
		})
		switch {
		case err != nil:
			return spec.Claim{}, err
		case found:
			return out, nil
		case !taken:
			return spec.Claim{}, &spec.Error{Code: spec.CodeNotFound, Message: "no runnable run matches the filter"} // LEASE-013
		}
	}
	return spec.Claim{}, spec.Unavailable(fmt.Sprintf("claim-next: other claimers took the run it waited for %d times in a row; try again", maxClaimRounds), nil)
}

// claimWaiting is claim-next's second pass: it reads the candidates without
// locking, then locks the best one by its key, waiting at most
// claimWaitLimit, and claims it into out if it is still claimable. found
// reports a claim; taken, that the best candidate was no longer claimable
// once locked (nothing is written then).
func (s *Store) claimWaiting(ctx context.Context, tx *sqlx.Tx, q spec.RunnableQuery, c spec.PreparedClaim, out *spec.Claim) (found, taken bool, err error) {
	// Built here, not with the first pass's statement: under load this
	// pass rarely runs.
	reading, err := s.claimCandidates(q, c.Owner, forClaimReading)
	if err != nil {
		return false, false, err
	}
	var rows []runRow
	if err := tx.SelectContext(ctx, &rows, reading.query, reading.args...); err != nil {
		return false, false, err
	}
	best, err := bestClaimable(rows, q, c.Owner)
	if err != nil || best < 0 {
		return false, false, err
	}
	row, err := s.lockRunWaiting(ctx, tx, rows[best].RunID)
	if errors.Is(err, spec.ErrNotFound) {
		return false, true, nil
	}
	if err != nil {
		return false, false, err
	}
	run, err := row.run()
	if err != nil {
		return false, false, err
	}
	if !q.ClaimableBy(run, row.lease(), c.Owner, spec.Timestamp(row.Now)) {
		return false, true, nil
	}
	*out, err = claimLocked(ctx, tx, row, c)
	return err == nil, false, err
}

// claimWaitLimit bounds how long claim-next's second pass waits for a row
// another transaction holds. A run's row is held for milliseconds by a
// write; one held longer is answered UNAVAILABLE, never "nothing runnable".
const claimWaitLimit = 3 * time.Second

// lockRunWaiting locks run id like lockRun, with lock waits bounded by
// claimWaitLimit for this statement only.
func (s *Store) lockRunWaiting(ctx context.Context, tx *sqlx.Tx, id string) (runRow, error) {
	if _, err := tx.ExecContext(ctx, qSetLockWait, int(claimWaitLimit/time.Second)); err != nil {
		return runRow{}, err
	}
	defer tx.ExecContext(context.WithoutCancel(ctx), qResetLockWait)
	row, err := s.lockRun(ctx, tx, id)
	if isErrorNumber(err, errLockWaitTimeout) {
		// Not retried: the row stayed locked for the whole limit.
		return row, spec.Unavailable(fmt.Sprintf("claim-next: a matching run's row stayed locked by another transaction for %v; try again", claimWaitLimit), nil)
	}
	return row, err
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
