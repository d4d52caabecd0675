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

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/sqlstore"
)

// runnableFilter appends the status, workflow and label conditions of q.
func runnableFilter(b *strings.Builder, args []any, q driver.RunnableQuery) []any {
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

func statusArgs(q driver.RunnableQuery) []string {
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
// candidates: the head of the unleased queue, and the first of the leased
// runs that are expired or held by an earlier incarnation of the
// claimant's worker. lock is
// forClaimSkipping (lock each candidate, passing over rows that other
// transactions hold) or forClaimReading (a plain read of the latest
// committed rows, locking nothing).
func (s *storage) claimCandidates(q driver.RunnableQuery, lock string) (statement, error) {
	owner := *q.Claimant
	shift := s.clockParam()
	query, args, err := s.union([]statement{
		{qUnleasedHead, []any{shift, statusArgs(q)}},
		{qTakeable, []any{shift, statusArgs(q), shift, owner.Worker, owner.Incarnation}},
	}, q, statement{query: lock})
	if err != nil {
		return statement{}, err
	}
	return statement{query, args}, nil
}

// union is one statement of parts, each a SELECT of candidates in claim
// order: every part gets q's filters and then tail, and the whole reads
// one snapshot of the table.
func (s *storage) union(parts []statement, q driver.RunnableQuery, tail statement) (string, []any, error) {
	var b strings.Builder
	var args []any
	for i, part := range parts {
		if i > 0 {
			b.WriteString(unionAll)
		}
		b.WriteString("(" + part.query)
		args = runnableFilter(&b, append(args, part.args...), q)
		b.WriteString(tail.query + ")")
		args = append(args, tail.args...)
	}
	query, args, err := sqlx.In(b.String(), args...)
	return s.db.Rebind(query), args, err
}

// ClaimNext implements driver.NextClaimer, in up to two passes.
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
func (s *storage) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	skipping, err := s.claimCandidates(q, forClaimSkipping)
	if err != nil {
		return false, err
	}
	return sqlstore.ClaimRounds(func() (found, taken bool, err error) {
		err = s.inTx(ctx, func(tx *sqlx.Tx) error {
			found, taken = false, false
			var rows []sqlstore.Row
			if err := tx.SelectContext(ctx, &rows, skipping.query, skipping.args...); err != nil {
				return err
			}
			best, err := sqlstore.FirstClaimable(rows, q)
			if err != nil || best < 0 {
				if err == nil {
					found, taken, err = s.claimWaiting(ctx, tx, q, take)
				}
				return err
			}
			found = true
			return claimRow(ctx, tx, rows[best], take)
		})
		return found, taken, err
	})
}

// claimRow claims a locked row with take.
func claimRow(ctx context.Context, tx *sqlx.Tx, row sqlstore.Row, take func(driver.Current) driver.Change) error {
	cur, err := row.Current()
	if err != nil {
		return err
	}
	return write(ctx, tx, row, cur, take(cur))
}

// claimWaiting is claim-next's second pass: it reads the candidates without
// locking, then locks the best one by its key, waiting at most
// claimWaitLimit, and claims it if it is still claimable. found reports a
// claim; taken, that the best candidate was no longer claimable once
// locked (nothing is written then).
func (s *storage) claimWaiting(ctx context.Context, tx *sqlx.Tx, q driver.RunnableQuery, take func(driver.Current) driver.Change) (found, taken bool, err error) {
	// Built here, not with the first pass's statement: under load this
	// pass rarely runs.
	reading, err := s.claimCandidates(q, forClaimReading)
	if err != nil {
		return false, false, err
	}
	var rows []sqlstore.Row
	if err := tx.SelectContext(ctx, &rows, reading.query, reading.args...); err != nil {
		return false, false, err
	}
	best, err := sqlstore.FirstClaimable(rows, q)
	if err != nil || best < 0 {
		return false, false, err
	}
	row, err := s.lockRunWaiting(ctx, tx, rows[best].RunID)
	if errors.Is(err, runstate.ErrNotFound) {
		return false, true, nil
	}
	if err != nil {
		return false, false, err
	}
	if i, err := sqlstore.FirstClaimable([]sqlstore.Row{row}, q); err != nil || i < 0 {
		return false, err == nil, err
	}
	return true, false, claimRow(ctx, tx, row, take)
}

// claimWaitLimit bounds how long claim-next's second pass waits for a row
// another transaction holds. A run's row is held for milliseconds by a
// write; one held longer is answered UNAVAILABLE, never "nothing runnable".
const claimWaitLimit = 3 * time.Second

// lockRunWaiting locks run id like lockRun, with lock waits bounded by
// claimWaitLimit for this statement only.
func (s *storage) lockRunWaiting(ctx context.Context, tx *sqlx.Tx, id string) (sqlstore.Row, error) {
	if _, err := tx.ExecContext(ctx, qSetLockWait, int(claimWaitLimit/time.Second)); err != nil {
		return sqlstore.Row{}, err
	}
	defer tx.ExecContext(context.WithoutCancel(ctx), qResetLockWait)
	row, err := s.lockRun(ctx, tx, id)
	if isErrorNumber(err, errLockWaitTimeout) {
		// Not retried: the row stayed locked for the whole limit.
		return row, runstate.Unavailable(fmt.Sprintf("claim-next: a matching run's row stayed locked by another transaction for %v; try again", claimWaitLimit), nil)
	}
	return row, err
}

// Runnable implements driver.Driver: the unleased runs in claim order, the
// runs whose lease has expired and, for a claimant, those its worker's
// earlier incarnations hold, merged.
func (s *storage) Runnable(ctx context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	heads := []statement{
		{qListUnleased, []any{statusArgs(q)}},
		{qListExpired, []any{s.clockParam(), statusArgs(q)}},
	}
	if o := q.Claimant; o != nil { // leases of its worker's earlier incarnations (LEASE-012)
		heads = append(heads, statement{qListEarlierLife, []any{o.Worker, o.Incarnation, statusArgs(q)}})
	}
	tail := statement{query: byClaimOrder + limitRows, args: []any{q.Limit}}
	if a := q.After; a != nil {
		tail = statement{afterClaimPos + tail.query, []any{a.Priority, a.Priority, a.CreatedAt, a.CreatedAt, a.RunID, q.Limit}}
	}
	query, args, err := s.union(heads, q, tail)
	if err != nil {
		return nil, err
	}
	// One statement: every head is read at one instant (LEASE-017).
	runs, err := s.selectSnapshots(ctx, query, args)
	if err != nil {
		return nil, err
	}
	return sqlstore.MergeRunnable(runs, q.Limit), nil
}
