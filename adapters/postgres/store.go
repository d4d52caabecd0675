package postgres

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
	return driver.Timestamp(now), interpretError(err)
}

// Insert implements driver.Driver.
func (s *storage) Insert(ctx context.Context, r driver.InsertParams) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		run := r.Run
		b, err := json.Marshal(run)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qInsertRun, run.RunID, run.WorkflowName, string(run.Status), run.Priority, run.CreatedAt,
			run.Version, r.Created.Seq, string(b), int(driver.QueueOf(run, driver.LeaseState{})))
		if err != nil {
			return err // a duplicate key is ErrAlreadyExists (interpretError)
		}
		if err := sqlstore.InsertLabels(ctx, tx, qInsertLabel, run); err != nil {
			return err
		}
		if _, err = sqlstore.InsertEvents(ctx, tx, qInsertEvent, []runstate.AuditEvent{r.Created}, 0); err != nil {
			return err
		}
		return s.announce(ctx, tx, nil, run, driver.LeaseState{})
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
		return s.write(ctx, tx, row, cur, change(cur))
	})
}

// write stores change c of the locked row, read as cur: the events, then
// the row in one UPDATE. The UPDATE repeats the version and lease-token
// checks of the locked row in its WHERE clause.
func (s *storage) write(ctx context.Context, tx *sqlx.Tx, row sqlstore.Row, cur driver.Current, c driver.Change) error {
	lastSeq, err := sqlstore.InsertEvents(ctx, tx, qInsertEvent, c.Events, row.LastSeq)
	if err != nil {
		return err
	}
	var res sql.Result
	switch {
	case c.Run == nil && c.Lease == nil:
		if len(c.Events) > 0 {
			_, err = tx.ExecContext(ctx, qUpdateSeq, lastSeq, row.RunID)
		}
		return err
	case c.Run == nil:
		lease := *c.Lease
		res, err = tx.ExecContext(ctx, qUpdateLease, lease.Token, lease.Owner.Worker, lease.Owner.Incarnation,
			sqlstore.NullTime(lease.AcquiredAt), sqlstore.NullTime(lease.ExpiresAt), lease.Released, int(driver.QueueOf(cur.Run, lease)), lastSeq,
			row.RunID, row.Version, row.LeaseToken)
	default:
		lease := cur.Lease
		if c.Lease != nil {
			lease = *c.Lease
		}
		next := *c.Run
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		res, err = tx.ExecContext(ctx, qUpdateRunAndLease, next.WorkflowName, string(next.Status), next.Priority, next.Version, lastSeq,
			string(b), int(driver.QueueOf(next, lease)), lease.Token, lease.Owner.Worker, lease.Owner.Incarnation,
			sqlstore.NullTime(lease.AcquiredAt), sqlstore.NullTime(lease.ExpiresAt), lease.Released, row.RunID, row.Version, row.LeaseToken)
		if err != nil {
			return err
		}
		if !maps.Equal(cur.Run.Labels, next.Labels) {
			if _, err := tx.ExecContext(ctx, qDeleteLabels, row.RunID); err != nil {
				return err
			}
			if err := sqlstore.InsertLabels(ctx, tx, qInsertLabel, next); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("update of locked run %s matched %d rows: %v", row.RunID, n, err)
	}
	next, lease := cur.Run, cur.Lease
	if c.Run != nil {
		next = *c.Run
	}
	if c.Lease != nil {
		lease = *c.Lease
	}
	return s.announce(ctx, tx, &cur, next, lease)
}

// announce tells the workers that watch (Options.NotifyRunnable) that run
// became claimable without a lease: created so, or moved there from a
// lease or from another status (before: as it was; nil for a new run).
func (s *storage) announce(ctx context.Context, tx *sqlx.Tx, before *driver.Current, run runstate.RunSnapshot, lease driver.LeaseState) error {
	if !s.notify || driver.QueueOf(run, lease) != driver.QueueUnleased {
		return nil
	}
	if before != nil && driver.QueueOf(before.Run, before.Lease) == driver.QueueUnleased && before.Run.Status == run.Status {
		return nil // claimable before, and as it was
	}
	_, err := tx.ExecContext(ctx, qNotifyRunnable)
	return err
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

// selection appends the workflow and label conditions shared by listings
// and claims.
func selection(b *strings.Builder, args []any, workflow string, labels map[string]string) []any {
	if workflow != "" {
		b.WriteString(byWorkflow)
		args = append(args, workflow)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(hasLabel)
		args = append(args, k, labels[k])
	}
	return args
}

// listSQL builds one listing query for ListRuns: runs in status st (when
// set) matching q's filters, after q's cursor, in created order, q.Limit.
// The planner reads the index of the most selective filter in (created_at,
// run_id) order and stops after a page.
func listSQL(q driver.RunQuery, st runstate.RunStatus) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString(listColumns + whereTrue)
	if st != "" {
		b.WriteString(byStatus)
		args = append(args, string(st))
	}
	args = selection(&b, args, q.Filter.WorkflowName, q.Filter.Labels)
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
		args = append(args, q.After.CreatedAt, q.After.RunID)
	}
	b.WriteString(byCreated + limitRows)
	return numbered(b.String()), append(args, q.Limit)
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

// ListAudit implements driver.Driver: the run and its events are read
// by one statement, at one instant (LIN-001).
func (s *storage) ListAudit(ctx context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	var rows []sql.NullString
	if err := s.db.SelectContext(ctx, &rows, qListEvents, q.AfterSeq, q.Limit, q.RunID); err != nil {
		return nil, interpretError(err)
	}
	if len(rows) == 0 {
		return nil, runstate.ErrNotFound
	}
	events := make([]runstate.AuditEvent, 0, len(rows))
	for _, e := range rows {
		if !e.Valid {
			break // the run has no events after q.AfterSeq
		}
		ev, err := sqlstore.DecodeEvent(e.String)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}
