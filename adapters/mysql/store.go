package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
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

// lockRun reads and locks a run for a write; ErrNotFound when it is missing (RUN-004).
func (s *storage) lockRun(ctx context.Context, tx *sqlx.Tx, id string) (sqlstore.Row, error) {
	var r sqlstore.Row
	err := tx.GetContext(ctx, &r, qLockRun, s.clockParam(), id)
	if errors.Is(err, sql.ErrNoRows) {
		return r, runstate.ErrNotFound
	}
	return r, err
}

// Now implements driver.Driver: the database server's time, unless
// Options.Clock replaces it.
func (s *storage) Now(ctx context.Context) (time.Time, error) {
	if err := s.open(); err != nil {
		return time.Time{}, err
	}
	var now time.Time
	err := s.db.GetContext(ctx, &now, qNow, s.clockParam())
	return now, interpretError(err)
}

// Insert implements driver.Driver.
func (s *storage) Insert(ctx context.Context, r driver.InsertParams) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		run := r.Run
		b, err := json.Marshal(run)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qInsertRun, run.RunID, run.WorkflowName, run.Status, run.Priority, run.CreatedAt,
			run.Version, r.Created.Seq, b, driver.QueueOf(run, driver.LeaseState{}))
		if err != nil {
			return err // a duplicate key is ErrAlreadyExists (interpretError)
		}
		if err := sqlstore.InsertLabels(ctx, tx, qInsertLabel, run); err != nil {
			return err
		}
		_, err = sqlstore.InsertEvents(ctx, tx, qInsertEvent, []runstate.AuditEvent{r.Created}, 0)
		return err
	})
}

// Modify implements driver.Driver: the row is locked, the change decided
// on the database's time, and the snapshot, lease and audit rows committed
// together. The UPDATE of the snapshot repeats the version and lease-token
// checks in its WHERE clause. Of writers racing from one version exactly
// one wins (CAS-003); the audit rows commit with the change (AUD-005), so
// reads never see one without the other (LIN-001).
func (s *storage) Modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		row, err := s.lockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		cur, err := row.Current()
		if err != nil {
			return err
		}
		return write(ctx, tx, row, cur, change(cur))
	})
}

// write stores change c of the locked row, read as cur.
func write(ctx context.Context, tx *sqlx.Tx, row sqlstore.Row, cur driver.Current, c driver.Change) error {
	lastSeq, err := sqlstore.InsertEvents(ctx, tx, qInsertEvent, c.Events, row.LastSeq)
	if err != nil {
		return err
	}
	lease := cur.Lease
	if c.Lease != nil {
		lease = *c.Lease
		if _, err := tx.ExecContext(ctx, qUpdateLease, lease.Token, lease.Owner.Worker, lease.Owner.Incarnation,
			sqlstore.NullTime(lease.AcquiredAt), sqlstore.NullTime(lease.ExpiresAt), lease.Released, driver.QueueOf(cur.Run, lease), row.RunID); err != nil {
			return err
		}
	}
	if c.Run == nil {
		if len(c.Events) > 0 {
			_, err = tx.ExecContext(ctx, qUpdateSeq, lastSeq, row.RunID)
		}
		return err
	}
	next := *c.Run
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, qUpdateRun, next.WorkflowName, next.Status, next.Priority, next.Version, lastSeq, b,
		driver.QueueOf(next, lease), row.RunID, row.Version, lease.Token)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("update of locked run %s matched %d rows: %v", row.RunID, n, err)
	}
	if !maps.Equal(cur.Run.Labels, next.Labels) {
		if _, err := tx.ExecContext(ctx, qDeleteLabels, row.RunID); err != nil {
			return err
		}
		return sqlstore.InsertLabels(ctx, tx, qInsertLabel, next)
	}
	return nil
}

// GetLease implements driver.LeaseReader: a plain read, no row lock.
func (s *storage) GetLease(ctx context.Context, runID string) (driver.LeaseState, error) {
	if err := s.open(); err != nil {
		return driver.LeaseState{}, err
	}
	var r sqlstore.Row
	err := s.db.GetContext(ctx, &r, qGetLease, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.LeaseState{}, runstate.ErrNotFound
	}
	if err != nil {
		return driver.LeaseState{}, interpretError(err)
	}
	return r.Lease(), nil
}

// Get implements driver.Driver.
func (s *storage) Get(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	if err := s.open(); err != nil {
		return runstate.RunSnapshot{}, err
	}
	var snap string
	err := s.db.GetContext(ctx, &snap, qGetRun, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return runstate.RunSnapshot{}, runstate.ErrNotFound
	}
	if err != nil {
		return runstate.RunSnapshot{}, interpretError(err)
	}
	return sqlstore.DecodeRun(snap)
}

// listSQL builds one listing query for ListRuns: runs in status st (when
// set) matching q's filters, after q's cursor, in created order, q.Limit.
func listSQL(q driver.RunQuery, st runstate.RunStatus) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString(listColumns)
	switch {
	case st != "":
		b.WriteString(byStatusIndex)
	case q.Filter.WorkflowName != "":
		b.WriteString(byWorkflowIndex)
	case len(q.Filter.Labels) == 0:
		b.WriteString(byCreatedIndex)
	}
	// Label filters alone are left to the optimizer: it may rather start
	// from the labels table.
	b.WriteString(whereTrue)
	if st != "" {
		b.WriteString(byStatus)
		args = append(args, st)
	}
	if q.Filter.WorkflowName != "" {
		b.WriteString(byWorkflow)
		args = append(args, q.Filter.WorkflowName, q.Filter.WorkflowName)
	}
	for _, k := range slices.Sorted(maps.Keys(q.Filter.Labels)) {
		b.WriteString(hasLabel)
		args = append(args, k, q.Filter.Labels[k], q.Filter.Labels[k])
	}
	if !q.Filter.CreatedFrom.IsZero() {
		b.WriteString(createdFrom)
		args = append(args, driver.Timestamp(q.Filter.CreatedFrom))
	}
	if !q.Filter.CreatedBefore.IsZero() {
		b.WriteString(createdBefore)
		args = append(args, driver.Timestamp(q.Filter.CreatedBefore))
	}
	if q.After != nil {
		b.WriteString(afterCreated)
		args = append(args, q.After.CreatedAt, q.After.CreatedAt, q.After.RunID)
	}
	b.WriteString(byCreated + limitRows)
	return b.String(), append(args, q.Limit)
}

// ListRuns implements driver.Driver. With statuses, each status is read
// in index order on its own and the results merged, so no query sorts more
// than a page.
func (s *storage) ListRuns(ctx context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	return sqlstore.ListByStatus(q, func(st runstate.RunStatus) ([]runstate.RunSnapshot, error) {
		query, args := listSQL(q, st)
		return s.selectSnapshots(ctx, query, args)
	})
}

func (s *storage) selectSnapshots(ctx context.Context, query string, args []any) ([]runstate.RunSnapshot, error) {
	runs, err := sqlstore.SelectSnapshots(ctx, s.db, query, args)
	return runs, interpretError(err)
}

// ListAudit implements driver.Driver.
func (s *storage) ListAudit(ctx context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	var events []runstate.AuditEvent
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var n int
		if err := tx.GetContext(ctx, &n, qRunExists, q.RunID); err != nil {
			return err
		}
		if n == 0 {
			return runstate.ErrNotFound
		}
		var rows []string
		if err := tx.SelectContext(ctx, &rows, qListEvents, q.RunID, q.AfterSeq, q.Limit); err != nil {
			return err
		}
		events = make([]runstate.AuditEvent, len(rows))
		for i, e := range rows {
			ev, err := sqlstore.DecodeEvent(e)
			if err != nil {
				return err
			}
			events[i] = ev
		}
		return nil
	})
	return events, err
}
