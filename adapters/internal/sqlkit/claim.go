package sqlkit

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
)

// ClaimNext implements driver.NextClaimer, the way New chose (writeWay).
func (k *Driver) ClaimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	return k.writes.claimNext(ctx, q, take)
}

// claimNext is ClaimNext the locking way, in up to two passes.
//
// The first locks the best candidate of each kind, skipping rows that
// other transactions hold, and claims the best of those: under load it
// nearly always finds a run, and claimers never queue on the head of the
// queue. SKIP LOCKED also skips a matching run that a writer, or a claimer
// with another filter, holds only for an instant, so when the first pass
// finds nothing claimable, a second one reads the candidates without
// locking (the latest committed rows, so a run held by a writer is still
// seen as it is), locks the best by its primary key, waiting at most
// ClaimWaitLimit, and claims it if it is still claimable. Only when that
// read finds nothing does claim-next answer that nothing is runnable
// (LEASE-017). The second pass holds one row lock at a time, so it cannot
// deadlock with writers, which lock one run each.
//
// When another claimer won the run the second pass waited for, the
// transaction ends having written nothing and claim-next looks again from
// the start.
func (k lockingWay) claimNext(ctx context.Context, q driver.RunnableQuery, take func(driver.Current) driver.Change) (bool, error) {
	skipping, err := k.ClaimCandidates(q, true)
	if err != nil {
		return false, err
	}
	return claimRounds(func() (round claimRound, err error) {
		err = k.InTx(ctx, func(tx *sqlx.Tx) error {
			round = claimRound{}
			var rows []row
			if err := tx.SelectContext(ctx, &rows, skipping.Query, skipping.Args...); err != nil {
				return err
			}
			best, err := firstClaimable(rows, q)
			if err != nil {
				return err
			}
			if best < 0 {
				round, err = k.claimWaiting(ctx, tx, q, take)
				return err
			}
			round.Claimed = true
			return k.change(ctx, tx, rows[best], take)
		})
		return round, err
	})
}

// claimRound is what one round of claim-next found.
type claimRound struct {
	// Claimed: a run was claimed.
	Claimed bool
	// LostToAnotherClaimer: the run the round waited for was no longer
	// claimable once locked (another claimer won it); nothing was written.
	LostToAnotherClaimer bool
}

// MaxClaimRounds bounds how often one claim-next call looks again after
// another call took the run it waited for. Each such round is another
// claimer's success, so the bound is reached only under a storm of claims.
const MaxClaimRounds = 64

// claimRounds runs claim-next's rounds until one claims a run or finds
// none, looking again while they lose their run to another claimer.
func claimRounds(round func() (claimRound, error)) (claimed bool, err error) {
	for range MaxClaimRounds {
		r, err := round()
		switch {
		case err != nil:
			return false, err
		case r.Claimed || !r.LostToAnotherClaimer:
			return r.Claimed, nil
		}
	}
	return false, runstate.Unavailable(fmt.Sprintf("claim-next: other claimers took the run it waited for %d times in a row; try again", MaxClaimRounds), nil)
}

// claimWaiting is claim-next's second pass: it reads the candidates without
// locking, then locks the best one by its key, waiting at most
// ClaimWaitLimit, and claims it if it is still claimable.
func (k *Driver) claimWaiting(ctx context.Context, tx *sqlx.Tx, q driver.RunnableQuery, take func(driver.Current) driver.Change) (claimRound, error) {
	// Built here, not with the first pass's statement: under load this
	// pass rarely runs.
	reading, err := k.ClaimCandidates(q, false)
	if err != nil {
		return claimRound{}, err
	}
	var rows []row
	if err := tx.SelectContext(ctx, &rows, reading.Query, reading.Args...); err != nil {
		return claimRound{}, err
	}
	best, err := firstClaimable(rows, q)
	if err != nil || best < 0 {
		return claimRound{}, err
	}
	locked, err := k.lockRunWaiting(ctx, tx, rows[best].RunID)
	if errors.Is(err, runstate.ErrNotFound) {
		return claimRound{LostToAnotherClaimer: true}, nil
	}
	if err != nil {
		return claimRound{}, err
	}
	if i, err := firstClaimable([]row{locked}, q); err != nil || i < 0 {
		return claimRound{LostToAnotherClaimer: err == nil}, err
	}
	return claimRound{Claimed: true}, k.change(ctx, tx, locked, take)
}

// ClaimWaitLimit bounds how long claim-next's second pass waits for a row
// another transaction holds. A run's row is held for milliseconds by a
// write; one held longer is answered UNAVAILABLE, never "nothing runnable".
const ClaimWaitLimit = 3 * time.Second

// lockRunWaiting locks run id like lockRun, with lock waits bounded by
// ClaimWaitLimit.
func (k *Driver) lockRunWaiting(ctx context.Context, tx *sqlx.Tx, id string) (row, error) {
	if _, err := tx.ExecContext(ctx, k.sql.SetLockWait, k.dialect.LockWaitArg(ClaimWaitLimit)); err != nil {
		return row{}, err
	}
	if k.sql.ResetLockWait != "" {
		defer tx.ExecContext(context.WithoutCancel(ctx), k.sql.ResetLockWait)
	}
	locked, err := k.lockRun(ctx, tx, id)
	if k.dialect.LockTimedOut(err) {
		// Not retried: the row stayed locked for the whole limit.
		return locked, runstate.Unavailable(fmt.Sprintf("claim-next: a matching run's row stayed locked by another transaction for %v; try again", ClaimWaitLimit), nil)
	}
	return locked, err
}

// ClaimCandidates returns the statement of claim-next that reads its
// candidates: the head of the unleased queue, the first of the leased
// runs that are expired or held by an earlier incarnation of the
// claimant's worker, and the first of the parked runs that are due.
// skipLocked: the first pass's read (Statements.ClaimSkipping), else the
// second's (ClaimReading).
func (k *Driver) ClaimCandidates(q driver.RunnableQuery, skipLocked bool) (Statement, error) {
	if skipLocked {
		return k.claimCandidates(q, partTail{sql: k.sql.ClaimSkipping, locks: true})
	}
	return k.claimCandidates(q, partTail{sql: k.sql.ClaimReading})
}

// partTail ends each part of a candidate or Runnable read: its SQL,
// which binds args, and whether it locks the part's rows (so that the
// rows read by key, Dialect.ReadByKey, are read locked too, never an older
// version).
type partTail struct {
	sql   string
	args  []any
	locks bool
}

// claimCandidates is ClaimCandidates with any tail.
func (k *Driver) claimCandidates(q driver.RunnableQuery, tail partTail) (Statement, error) {
	owner, clock, statuses := *q.Claimant, k.clockParam(), statusArgs(q)
	parts := k.unleasedParts(k.sql.UnleasedHead, q, clock)
	parts = append(parts, part{k.sql.Takeable, []any{clock, statuses, owner.Worker, owner.Incarnation}},
		part{k.sql.Due, []any{clock, statuses}})
	return k.union(parts, q, tail, CandidateRows)
}

// unleasedParts are the parts that read the unleased queue's head with
// clause (UnleasedHead or ListUnleased), which binds lead (UnleasedHead's
// clock) and then the statuses q admits: one part of them all, or with
// Dialect.UnleasedByStatus one part per status.
func (k *Driver) unleasedParts(clause Clause, q driver.RunnableQuery, lead ...any) []part {
	if !k.dialect.UnleasedByStatus {
		return []part{{clause, append(lead, statusArgs(q))}}
	}
	parts := make([]part, len(q.Statuses))
	for i, st := range q.Statuses {
		parts[i] = part{clause, append(slices.Clip(lead), string(st))}
	}
	return parts
}

// Runnable implements driver.Driver: the unleased runs in claim order, the
// runs whose lease has expired, the parked runs that are due and, for a
// claimant, those its worker's earlier incarnations hold, merged.
func (k *Driver) Runnable(ctx context.Context, q driver.RunnableQuery) ([]runstate.RunSnapshot, error) {
	if err := k.CheckOpen(); err != nil {
		return nil, err
	}
	all, err := k.runnableSQL(q)
	if err != nil {
		return nil, err
	}
	// One statement: every head is read at one instant (LEASE-017).
	runs, err := k.selectSnapshots(ctx, all)
	if err != nil {
		return nil, err
	}
	return mergeRunnable(runs, q.Limit), nil
}

// runnableSQL is Runnable's one statement: every head is read at one
// instant (LEASE-017).
func (k *Driver) runnableSQL(q driver.RunnableQuery) (Statement, error) {
	statuses := statusArgs(q)
	heads := append(k.unleasedParts(k.sql.ListUnleased, q), part{k.sql.ListExpired, []any{k.clockParam(), statuses}},
		part{k.sql.ListDue, []any{k.clockParam(), statuses}})
	if o := q.Claimant; o != nil { // leases of its worker's earlier incarnations (LEASE-012)
		heads = append(heads, part{k.sql.ListEarlierLife, []any{o.Worker, o.Incarnation, statuses}})
	}
	var tail strings.Builder
	var tailArgs []any
	if a := q.After; a != nil {
		tailArgs = k.sql.AfterClaimPos.write(&tail, nil, a.Priority, a.CreatedAt, a.RunID)
	}
	tail.WriteString(k.sql.ByClaimOrderLimit)
	return k.union(heads, q, partTail{sql: tail.String(), args: append(tailArgs, q.Limit)}, ListingRows)
}

// part is a clause with its values.
type part struct {
	clause Clause
	values []any
}

// union is one statement of parts, each a SELECT of candidates in claim
// order: every part gets q's filters and then tail, and Dialect.Union
// joins them so that the whole reads one snapshot of the table; with
// Dialect.ReadByKey, the parts read keys and the statement reads their
// rows (rows).
func (k *Driver) union(parts []part, q driver.RunnableQuery, tail partTail, rows RowsOf) (Statement, error) {
	var args []any
	texts := make([]string, len(parts))
	for i, p := range parts {
		var b strings.Builder
		args = p.clause.write(&b, args, p.values...)
		args = k.filter(&b, args, q.WorkflowName, q.Labels)
		b.WriteString(tail.sql)
		args = append(args, tail.args...)
		texts[i] = b.String()
	}
	query, args, err := k.dialect.Bind(k.readByKey(k.dialect.Union(texts), rows, tail.locks), args)
	return Statement{query, args}, err
}

// readByKey is keys wrapped by Dialect.ReadByKey, or keys itself (a read
// of whole rows) when the dialect has none.
func (k *Driver) readByKey(keys string, rows RowsOf, locking bool) string {
	if k.dialect.ReadByKey == nil {
		return keys
	}
	return k.dialect.ReadByKey(keys, rows, locking)
}

// filter appends the workflow and label conditions shared by listings
// and claims.
func (k *Driver) filter(b *strings.Builder, args []any, workflow string, labels map[string]string) []any {
	if workflow != "" {
		args = k.sql.ByWorkflow.write(b, args, workflow)
	}
	for _, key := range slices.Sorted(maps.Keys(labels)) {
		args = k.sql.HasLabel.write(b, args, key, labels[key])
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

// mergeRunnable merges the runs of Runnable's parts in claim order, once
// each (an expired lease of an earlier incarnation is in two parts), cut
// at limit.
func mergeRunnable(runs []runstate.RunSnapshot, limit int) []runstate.RunSnapshot {
	slices.SortFunc(runs, func(a, b runstate.RunSnapshot) int {
		return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
	})
	runs = slices.CompactFunc(runs, func(a, b runstate.RunSnapshot) bool { return a.RunID == b.RunID })
	return runs[:min(len(runs), limit)]
}
