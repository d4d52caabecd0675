package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/sqlstore"
)

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

// together is one statement of parts, each a SELECT of candidates in claim
// order: every part gets q's filters and then tail. The parts are common
// table expressions of one statement, so the whole reads one snapshot of
// the table, and each part may lock its rows (a locking clause is not
// allowed on a part of a UNION itself).
func together(parts []statement, q driver.RunnableQuery, tail statement) statement {
	var b strings.Builder
	var args []any
	b.WriteString("WITH ")
	for i, part := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "part%d AS (%s", i, part.query)
		args = selection(&b, append(args, part.args...), q.WorkflowName, q.Labels)
		b.WriteString(tail.query + ")")
		args = append(args, tail.args...)
	}
	for i := range parts {
		if i > 0 {
			b.WriteString(" UNION ALL")
		}
		fmt.Fprintf(&b, " SELECT * FROM part%d", i)
	}
	return statement{numbered(b.String()), args}
}

// claimCandidates returns the statement of claim-next that reads its
// candidates: the head of the unleased queue, and the first of the leased
// runs that are expired or held by an earlier incarnation of the
// claimant's worker. lock is forClaimSkipping (lock each candidate,
// passing over rows that other transactions hold) or forClaimReading (a
// plain read of the latest committed rows, locking nothing).
func (s *storage) claimCandidates(q driver.RunnableQuery, lock string) statement {
	owner := *q.Claimant
	shift := s.clockParam()
	return together([]statement{
		{qUnleasedHead, []any{shift, statusArgs(q)}},
		{qTakeable, []any{shift, statusArgs(q), shift, owner.Worker, owner.Incarnation, owner.Worker, owner.Incarnation}},
	}, q, statement{query: lock})
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
	skipping := s.claimCandidates(q, forClaimSkipping)
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
			return s.claimRow(ctx, tx, rows[best], take)
		})
		return found, taken, err
	})
}

// claimRow claims a locked row with take.
func (s *storage) claimRow(ctx context.Context, tx *sqlx.Tx, row sqlstore.Row, take func(driver.Current) driver.Change) error {
	cur, err := row.Current()
	if err != nil {
		return err
	}
	return s.write(ctx, tx, row, cur, take(cur))
}

// claimWaiting is claim-next's second pass: it reads the candidates without
// locking, then locks the best one by its key, waiting at most
// claimWaitLimit, and claims it if it is still claimable. found reports a
// claim; taken, that the best candidate was no longer claimable once
// locked (nothing is written then).
func (s *storage) claimWaiting(ctx context.Context, tx *sqlx.Tx, q driver.RunnableQuery, take func(driver.Current) driver.Change) (found, taken bool, err error) {
	// Built here, not with the first pass's statement: under load this
	// pass rarely runs.
	reading := s.claimCandidates(q, forClaimReading)
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
	return true, false, s.claimRow(ctx, tx, row, take)
}

// claimWaitLimit bounds how long claim-next's second pass waits for a row
// another transaction holds. A run's row is held for milliseconds by a
// write; one held longer is answered UNAVAILABLE, never "nothing runnable".
const claimWaitLimit = 3 * time.Second

// lockRunWaiting locks run id like lockRun, with lock waits bounded by
// claimWaitLimit for the rest of the transaction, which writes only the
// row it locks.
func (s *storage) lockRunWaiting(ctx context.Context, tx *sqlx.Tx, id string) (sqlstore.Row, error) {
	if _, err := tx.ExecContext(ctx, qSetLockWait, strconv.FormatInt(claimWaitLimit.Milliseconds(), 10)+"ms"); err != nil {
		return sqlstore.Row{}, err
	}
	row, err := s.lockRun(ctx, tx, id)
	if hasState(err, stateLockNotAvailable) {
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
		heads = append(heads, statement{qListEarlierLife, []any{o.Worker, o.Incarnation, o.Worker, o.Incarnation, statusArgs(q)}})
	}
	tail := statement{query: byClaimOrder + limitRows, args: []any{q.Limit}}
	if a := q.After; a != nil {
		tail = statement{afterClaimPos + tail.query, []any{a.Priority, a.Priority, a.CreatedAt, a.RunID, q.Limit}}
	}
	// One statement: every head is read at one instant (LEASE-017).
	all := together(heads, q, tail)
	runs, err := s.selectSnapshots(ctx, all.query, all.args)
	if err != nil {
		return nil, err
	}
	return sqlstore.MergeRunnable(runs, q.Limit), nil
}
