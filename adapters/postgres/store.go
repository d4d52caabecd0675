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

	"github.com/runstate/runstate/spec"
	"github.com/runstate/runstate/spec/driver"
)

// runRow is a run locked for a write, with the database time.
type runRow struct {
	RunID            string       `db:"run_id"`
	Version          int64        `db:"version"`
	LastSeq          int64        `db:"last_seq"`
	Snapshot         string       `db:"snapshot"`
	LeaseToken       int64        `db:"lease_token"`
	LeaseWorker      string       `db:"lease_worker"`
	LeaseIncarnation string       `db:"lease_incarnation"`
	LeaseAcquiredAt  sql.NullTime `db:"lease_acquired_at"`
	LeaseExpiresAt   sql.NullTime `db:"lease_expires_at"`
	LeaseReleased    bool         `db:"lease_released"`
	Now              time.Time    `db:"now"`
}

func (r runRow) lease() driver.LeaseState {
	return driver.LeaseState{Owner: spec.Owner{Worker: r.LeaseWorker, Incarnation: r.LeaseIncarnation}, Token: r.LeaseToken,
		AcquiredAt: r.LeaseAcquiredAt.Time.UTC(), ExpiresAt: r.LeaseExpiresAt.Time.UTC(), Released: r.LeaseReleased}
}

// current is the run of a locked row as a driver.Current.
func (r runRow) current() (driver.Current, error) {
	run, err := decodeRun(r.Snapshot)
	return driver.Current{Run: run, Lease: r.lease(), LastSeq: r.LastSeq, Now: driver.Timestamp(r.Now)}, err
}

func decodeRun(snapshot string) (spec.RunSnapshot, error) {
	var s spec.RunSnapshot
	if err := json.Unmarshal([]byte(snapshot), &s); err != nil {
		return s, spec.Unavailable("a stored snapshot does not decode: the database was changed outside runstate", err)
	}
	return s, nil
}

// lockRun reads and locks a run for a write; ErrNotFound when it is missing (RUN-004).
func (s *storage) lockRun(ctx context.Context, tx *sqlx.Tx, id string) (runRow, error) {
	var r runRow
	err := tx.GetContext(ctx, &r, qLockRun, s.clockParam(), id)
	if errors.Is(err, sql.ErrNoRows) {
		return r, spec.ErrNotFound
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

// insertEvents stores numbered events and returns the last one's Seq
// (lastSeq when there are none).
func insertEvents(ctx context.Context, tx *sqlx.Tx, events []spec.AuditEvent, lastSeq int64) (int64, error) {
	for _, ev := range events {
		lastSeq = ev.Seq
		b, err := json.Marshal(ev)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, qInsertEvent, ev.RunID, ev.Seq, string(b)); err != nil {
			return 0, err
		}
	}
	return lastSeq, nil
}

func insertLabels(ctx context.Context, tx *sqlx.Tx, s spec.RunSnapshot) error {
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if _, err := tx.ExecContext(ctx, qInsertLabel, s.RunID, k, s.Labels[k], s.CreatedAt); err != nil {
			return err
		}
	}
	return nil
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
		if err := insertLabels(ctx, tx, run); err != nil {
			return err
		}
		_, err = insertEvents(ctx, tx, []spec.AuditEvent{r.Created}, 0)
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
		cur, err := row.current()
		if err != nil {
			return err
		}
		return write(ctx, tx, row, cur, change(cur))
	})
}

// write stores change c of the locked row, read as cur: the events, then
// the row in one UPDATE. The UPDATE repeats the version and lease-token
// checks of the locked row in its WHERE clause.
func write(ctx context.Context, tx *sqlx.Tx, row runRow, cur driver.Current, c driver.Change) error {
	lastSeq, err := insertEvents(ctx, tx, c.Events, row.LastSeq)
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
			nullTime(lease.AcquiredAt), nullTime(lease.ExpiresAt), lease.Released, int(driver.QueueOf(cur.Run, lease)), lastSeq,
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
			nullTime(lease.AcquiredAt), nullTime(lease.ExpiresAt), lease.Released, row.RunID, row.Version, row.LeaseToken)
		if err != nil {
			return err
		}
		if !maps.Equal(cur.Run.Labels, next.Labels) {
			if _, err := tx.ExecContext(ctx, qDeleteLabels, row.RunID); err != nil {
				return err
			}
			if err := insertLabels(ctx, tx, next); err != nil {
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
	return nil
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// GetLease implements driver.LeaseReader: a plain read, no row lock.
func (s *storage) GetLease(ctx context.Context, runID string) (driver.LeaseState, error) {
	if err := s.open(); err != nil {
		return driver.LeaseState{}, err
	}
	var r runRow
	err := s.db.GetContext(ctx, &r, qGetLease, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.LeaseState{}, spec.ErrNotFound
	}
	if err != nil {
		return driver.LeaseState{}, interpretError(err)
	}
	return r.lease(), nil
}

// Get implements driver.Driver.
func (s *storage) Get(ctx context.Context, runID string) (spec.RunSnapshot, error) {
	if err := s.open(); err != nil {
		return spec.RunSnapshot{}, err
	}
	var snap string
	err := s.db.GetContext(ctx, &snap, qGetRun, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return spec.RunSnapshot{}, spec.ErrNotFound
	}
	if err != nil {
		return spec.RunSnapshot{}, interpretError(err)
	}
	return decodeRun(snap)
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
func listSQL(q driver.RunQuery, st spec.RunStatus) (string, []any) {
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
func (s *storage) ListRuns(ctx context.Context, q driver.RunQuery) ([]spec.RunSnapshot, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	statuses := slices.Compact(slices.Sorted(slices.Values(q.Filter.Statuses)))
	if len(statuses) == 0 {
		statuses = []spec.RunStatus{""}
	}
	var runs []spec.RunSnapshot
	for _, st := range statuses {
		query, args := listSQL(q, st)
		found, err := s.selectSnapshots(ctx, query, args)
		if err != nil {
			return nil, err
		}
		runs = append(runs, found...)
	}
	// Merged in (created_at, run_id) order (LIST-005).
	slices.SortFunc(runs, func(a, b spec.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
	return runs[:min(len(runs), q.Limit)], nil
}

func (s *storage) selectSnapshots(ctx context.Context, query string, args []any) ([]spec.RunSnapshot, error) {
	var rows []struct {
		Snapshot  string    `db:"snapshot"`
		CreatedAt time.Time `db:"created_at"`
		RunID     string    `db:"run_id"`
	}
	if err := s.db.SelectContext(ctx, &rows, query, args...); err != nil {
		return nil, interpretError(err)
	}
	out := make([]spec.RunSnapshot, 0, len(rows))
	for _, r := range rows {
		snap, err := decodeRun(r.Snapshot)
		if err != nil {
			return nil, err
		}
		out = append(out, snap)
	}
	return out, nil
}

// ListAudit implements driver.Driver: the run and its events are read
// by one statement, at one instant (LIN-001).
func (s *storage) ListAudit(ctx context.Context, q driver.AuditQuery) ([]spec.AuditEvent, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	var rows []sql.NullString
	if err := s.db.SelectContext(ctx, &rows, qListEvents, q.AfterSeq, q.Limit, q.RunID); err != nil {
		return nil, interpretError(err)
	}
	if len(rows) == 0 {
		return nil, spec.ErrNotFound
	}
	events := make([]spec.AuditEvent, 0, len(rows))
	for _, e := range rows {
		if !e.Valid {
			break // the run has no events after q.AfterSeq
		}
		var ev spec.AuditEvent
		if err := json.Unmarshal([]byte(e.String), &ev); err != nil {
			return nil, spec.Unavailable("a stored audit event does not decode", err)
		}
		events = append(events, ev)
	}
	return events, nil
}
