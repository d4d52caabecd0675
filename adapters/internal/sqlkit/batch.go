package sqlkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

var (
	_ driver.BatchInserter    = (*Driver)(nil)
	_ driver.BatchModifier    = (*Driver)(nil)
	_ driver.BatchNextClaimer = (*Driver)(nil)
)

// Batches pay one transaction for many runs: their rows are read (and
// locked) by one statement, and each table is written by one statement
// (Statements.UpdateRuns, and Bulk statements of many rows) where the
// engine allows, split only at Dialect.MaxParams and MaxBulkBytes.

// The multi-row inserts, the same on every engine: each row has the
// values of Statements.InsertRun, InsertLabel and InsertEvent.
var (
	multiInsertRuns = Bulk{Head: `INSERT INTO runstate_runs
		(run_id, workflow_name, status, priority, created_at, version, last_seq, snapshot, queue) VALUES `,
		Row: `(?, ?, ?, ?, ?, ?, ?, ?, ?)`, Sep: `, `}
	multiInsertLabels = Bulk{Head: `INSERT INTO runstate_labels (run_id, label_key, label_value, created_at) VALUES `, Row: `(?, ?, ?, ?)`, Sep: `, `}
	multiInsertEvents = Bulk{Head: `INSERT INTO runstate_audit (run_id, seq, event) VALUES `, Row: `(?, ?, ?)`, Sep: `, `}
)

// insertManyAttempts bounds InsertMany's transactions when a concurrent
// creator commits one of its run_ids between its check and its insert.
const insertManyAttempts = 3

// InsertMany implements driver.BatchInserter, the way New chose (writeWay).
func (k *Driver) InsertMany(ctx context.Context, runs []driver.InsertParams) error {
	return k.writes.insertMany(ctx, runs)
}

// insertMany is InsertMany the locking way: one transaction that first
// reads which run_ids exist (ExistingRuns), so that the item that
// collides is named, then inserts every run, label and created event with
// one statement per table. A creator that commits one of the run_ids
// between the check and the insert makes the insert fail on the key; the
// transaction is then run again, and its check names the item.
func (k lockingWay) insertMany(ctx context.Context, runs []driver.InsertParams) error {
	for attempt := 1; ; attempt++ {
		err := k.InTx(ctx, func(tx *sqlx.Tx) error { return k.insertManyIn(ctx, tx, runs) })
		var itemErr *runstate.BatchItemError
		if attempt == insertManyAttempts || !errors.Is(err, runstate.ErrAlreadyExists) || errors.As(err, &itemErr) {
			return err
		}
	}
}

// insertManyIn is one transaction of lockingWay.insertMany.
func (k *Driver) insertManyIn(ctx context.Context, tx *sqlx.Tx, runs []driver.InsertParams) error {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.Run.RunID
	}
	existing, err := k.existingRuns(ctx, tx, ids)
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(ids, func(id string) bool { return existing[id] }); i >= 0 {
		return &runstate.BatchItemError{Index: i, Err: runstate.ErrAlreadyExists}
	}
	var rows, labels, events [][]any
	runnable := false
	for _, r := range runs {
		run := r.Run
		b, err := json.Marshal(run)
		if err != nil {
			return err
		}
		rows = append(rows, []any{run.RunID, run.WorkflowName, string(run.Status), run.Priority, run.CreatedAt,
			run.Version, r.Created.Seq, string(b), int(driver.QueueOf(run, driver.LeaseState{}))})
		labels = appendLabels(labels, run)
		if events, err = appendEvents(events, []runstate.AuditEvent{r.Created}); err != nil {
			return err
		}
		runnable = runnable || becameRunnable(nil, run, driver.LeaseState{})
	}
	for _, w := range []struct {
		bulk Bulk
		rows [][]any
	}{{multiInsertRuns, rows}, {multiInsertLabels, labels}, {multiInsertEvents, events}} {
		if _, err := k.execBulk(ctx, tx, w.bulk, w.rows); err != nil {
			return err
		}
	}
	return k.announceBatch(ctx, tx, runnable)
}

// existingRuns reads which of ids are runs, in tx or on the pool.
func (k *Driver) existingRuns(ctx context.Context, tx sqlx.QueryerContext, ids []string) (map[string]bool, error) {
	query, args, err := k.dialect.Bind(k.sql.ExistingRuns, []any{ids})
	if err != nil {
		return nil, err
	}
	var found []string
	if err := sqlx.SelectContext(ctx, tx, &found, query, args...); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// ModifyMany implements driver.BatchModifier, the way New chose (writeWay).
func (k *Driver) ModifyMany(ctx context.Context, items []driver.ModifyItem) error {
	return k.writes.modifyMany(ctx, items)
}

// modifyMany is ModifyMany the locking way, in one transaction: one
// statement locks every item's row in run_id order (LockRuns), so that
// batches locking some of the same runs wait for each other instead of
// deadlocking, with the database time read once; each item's Change is
// decided on its row and all are written together (batchWrite).
func (k lockingWay) modifyMany(ctx context.Context, items []driver.ModifyItem) error {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.RunID
	}
	slices.Sort(ids)
	return k.InTx(ctx, func(tx *sqlx.Tx) error {
		locked, err := k.lockRuns(ctx, tx, ids)
		if err != nil {
			return err
		}
		var b batchWrite
		for i := range items {
			items[i].Err = nil // a retried transaction decides afresh
			r, ok := locked[items[i].RunID]
			if !ok {
				items[i].Err = runstate.ErrNotFound
				continue
			}
			cur, err := r.current()
			if err != nil {
				return err
			}
			b.add(r, cur, items[i].Change(cur))
		}
		return k.writeBatch(ctx, tx, &b)
	})
}

// lockRuns locks the rows of ids, sorted, in one statement; a missing run
// has no entry.
func (k *Driver) lockRuns(ctx context.Context, tx *sqlx.Tx, ids []string) (map[string]row, error) {
	k.known.forget(ids...)
	query, args, err := k.dialect.Bind(k.sql.LockRuns, []any{k.clockParam(), ids})
	if err != nil {
		return nil, err
	}
	var rows []row
	if err := tx.SelectContext(ctx, &rows, query, args...); err != nil {
		return nil, err
	}
	out := make(map[string]row, len(rows))
	for _, r := range rows {
		out[r.RunID] = r
	}
	return out, nil
}

// ClaimNextMany implements driver.BatchNextClaimer, the way New chose
// (writeWay).
func (k *Driver) ClaimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	return k.writes.claimNextMany(ctx, q, max, take)
}

// claimNextMany is ClaimNextMany the locking way, as its claimNext does,
// for up to max runs in one transaction: the skipping pass locks up to max
// candidates of each kind (SKIP LOCKED) and claims the first max that q
// admits, in claim order, written together (batchWrite). When it finds
// none, the transaction goes on as ClaimNext's second pass, which waits
// for the best locked candidate and claims that one run: the answer is 0
// only when nothing matching was claimable (BATCH-007, LEASE-017).
func (k lockingWay) claimNextMany(ctx context.Context, q driver.RunnableQuery, max int, take func(driver.Current) driver.Change) (int, error) {
	skipping, err := k.claimCandidates(q, partTail{sql: k.sql.ClaimSkippingMany, args: []any{max}, locks: true})
	if err != nil {
		return 0, err
	}
	claimed := 0
	_, err = claimRounds(func() (round claimRound, err error) {
		err = k.InTx(ctx, func(tx *sqlx.Tx) error {
			round, claimed = claimRound{}, 0
			var rows []row
			if err := tx.SelectContext(ctx, &rows, skipping.Query, skipping.Args...); err != nil {
				return err
			}
			found, err := claimableInOrder(rows, q, max)
			if err != nil {
				return err
			}
			if len(found) == 0 {
				if round, err = k.claimWaiting(ctx, tx, q, take); round.Claimed {
					claimed = 1
				}
				return err
			}
			var b batchWrite
			for _, c := range found {
				b.add(c.row, c.cur, take(c.cur))
			}
			round.Claimed, claimed = true, len(found)
			return k.writeBatch(ctx, tx, &b)
		})
		return round, err
	})
	if err != nil {
		return 0, err
	}
	return claimed, nil
}

// candidate is a locked row with its decoded run.
type candidate struct {
	row row
	cur driver.Current
}

// claimableInOrder returns the rows q admits at the database time, in
// claim order, once each, at most max.
func claimableInOrder(rows []row, q driver.RunnableQuery, max int) ([]candidate, error) {
	var out []candidate
	for _, r := range rows {
		cur, err := r.current()
		if err != nil {
			return nil, err
		}
		if q.Admits(cur.Run, cur.Lease, cur.Now) {
			out = append(out, candidate{r, cur})
		}
	}
	slices.SortFunc(out, func(a, b candidate) int {
		return driver.RunnablePositionOf(a.cur.Run).Compare(driver.RunnablePositionOf(b.cur.Run))
	})
	out = slices.CompactFunc(out, func(a, b candidate) bool { return a.row.RunID == b.row.RunID })
	return out[:min(len(out), max)], nil
}

// batchWrite is what a batch writes: each locked row's write and change,
// in order.
type batchWrite struct {
	writes   []rowWrite
	changes  []driver.Change
	runnable bool // a run became claimable without a lease
}

// add records change c of the locked row, read as cur; an empty change
// writes nothing.
func (b *batchWrite) add(locked row, cur driver.Current, c driver.Change) {
	if c.Empty() {
		return
	}
	w := newRowWrite(locked, cur, c)
	b.writes = append(b.writes, w)
	b.changes = append(b.changes, c)
	b.runnable = b.runnable || becameRunnable(&cur, w.next, w.lease)
}

// writeBatch writes b: every event in one Bulk, then the rows, in one
// checked UPDATE (Statements.UpdateRuns) or one by one as Modify writes
// them, and Dialect.OnRunnable once.
func (k *Driver) writeBatch(ctx context.Context, tx *sqlx.Tx, b *batchWrite) error {
	var events [][]any
	var err error
	for _, c := range b.changes {
		if events, err = appendEvents(events, c.Events); err != nil {
			return err
		}
	}
	if _, err := k.execBulk(ctx, tx, multiInsertEvents, events); err != nil {
		return err
	}
	if k.sql.UpdateRuns.Row == "" {
		for i, w := range b.writes {
			if err := k.writeRow(ctx, tx, w, b.changes[i]); err != nil {
				return err
			}
		}
	} else if err := k.updateRuns(ctx, tx, b.writes); err != nil {
		return err
	}
	return k.announceBatch(ctx, tx, b.runnable)
}

// updateRuns writes every row of writes with Statements.UpdateRuns, which
// checks each locked version and lease token, and rewrites the labels of
// the runs whose labels changed.
func (k *Driver) updateRuns(ctx context.Context, tx *sqlx.Tx, writes []rowWrite) error {
	rows := make([][]any, len(writes))
	var relabelled []string
	var labels [][]any
	for i, w := range writes {
		b, err := json.Marshal(w.next)
		if err != nil {
			return err
		}
		rows[i] = []any{w.locked.RunID, w.next.WorkflowName, string(w.next.Status), w.next.Priority, w.next.Version, w.lastSeq,
			string(b), int(driver.QueueOf(w.next, w.lease)), w.lease.Token, w.lease.Owner.Worker, w.lease.Owner.Incarnation,
			nullTime(w.lease.AcquiredAt), nullTime(w.lease.ExpiresAt), w.lease.Released, w.locked.Version, w.locked.LeaseToken}
		if w.labelsChanged() {
			relabelled = append(relabelled, w.locked.RunID)
			labels = appendLabels(labels, w.next)
		}
	}
	n, err := k.execBulk(ctx, tx, k.sql.UpdateRuns, rows)
	if err != nil {
		return err
	}
	if n != int64(len(rows)) {
		return fmt.Errorf("update of %d locked runs matched %d rows", len(rows), n)
	}
	if len(relabelled) == 0 {
		return nil
	}
	query, args, err := k.dialect.Bind(k.sql.DeleteLabelsOf, []any{relabelled})
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return err
	}
	_, err = k.execBulk(ctx, tx, multiInsertLabels, labels)
	return err
}

// announceBatch runs Dialect.OnRunnable once for a batch in which a run
// became claimable without a lease.
func (k *Driver) announceBatch(ctx context.Context, tx *sqlx.Tx, runnable bool) error {
	if k.dialect.OnRunnable == nil || !runnable {
		return nil
	}
	return k.dialect.OnRunnable(ctx, tx)
}

// execBulk writes rows with b, in as few statements as Dialect.MaxParams
// and MaxBulkBytes allow, and returns the rows they affected.
func (k *Driver) execBulk(ctx context.Context, tx *sqlx.Tx, b Bulk, rows [][]any) (int64, error) {
	var affected int64
	for len(rows) > 0 {
		n := k.rowsPerStatement(rows)
		var text strings.Builder
		text.WriteString(b.Head)
		args := make([]any, 0, n*len(rows[0]))
		for i, r := range rows[:n] {
			if i > 0 {
				text.WriteString(b.Sep)
			}
			text.WriteString(b.Row)
			args = append(args, r...)
		}
		text.WriteString(b.Tail)
		query, args, err := k.dialect.Bind(text.String(), args)
		if err != nil {
			return affected, err
		}
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return affected, err
		}
		m, err := res.RowsAffected()
		if err != nil {
			return affected, err
		}
		affected += m
		rows = rows[n:]
	}
	return affected, nil
}

// rowsPerStatement is how many of rows, at least one, fit in one Bulk statement.
func (k *Driver) rowsPerStatement(rows [][]any) int {
	params, bytes := 0, 0
	for i, r := range rows {
		size := 0
		for _, v := range r {
			if s, ok := v.(string); ok {
				size += len(s)
			}
		}
		params, bytes = params+len(r), bytes+size
		if i > 0 && (params > k.dialect.MaxParams || bytes > k.dialect.MaxBulkBytes) {
			return i
		}
	}
	return len(rows)
}
