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

	"github.com/runstate/runstate/spec"
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

func (r runRow) run() (spec.RunSnapshot, error) { return decodeRun(r.Snapshot) }

func (r runRow) lease() spec.LeaseState {
	return spec.LeaseState{Owner: spec.Owner{Worker: r.LeaseWorker, Incarnation: r.LeaseIncarnation}, Token: r.LeaseToken,
		AcquiredAt: r.LeaseAcquiredAt.Time.UTC(), ExpiresAt: r.LeaseExpiresAt.Time.UTC(), Released: r.LeaseReleased}
}

func decodeRun(snapshot string) (spec.RunSnapshot, error) {
	var s spec.RunSnapshot
	if err := json.Unmarshal([]byte(snapshot), &s); err != nil {
		return s, spec.Unavailable("a stored snapshot does not decode: the database was changed outside runstate", err)
	}
	return s, nil
}

// queueOf is the queue column: where claims look for the run.
func queueOf(s spec.RunSnapshot, l spec.LeaseState) int {
	switch {
	case s.Status.Terminal():
		return queueNone
	case l.Token == 0 || l.Released:
		return queueUnleased
	}
	return queueLeased
}

// lockRun reads and locks a run for a write; ErrNotFound when it is missing (RUN-004).
func (s *Store) lockRun(ctx context.Context, tx *sqlx.Tx, id string) (runRow, error) {
	var r runRow
	err := tx.GetContext(ctx, &r, qLockRun, s.clockParam(), id)
	if errors.Is(err, sql.ErrNoRows) {
		return r, spec.NotFound(id)
	}
	return r, err
}

func (s *Store) now(ctx context.Context, q sqlx.QueryerContext) (time.Time, error) {
	var now time.Time
	err := sqlx.GetContext(ctx, q, &now, qNow, s.clockParam())
	return spec.Timestamp(now), err
}

func insertEvents(ctx context.Context, tx *sqlx.Tx, events []spec.AuditEvent, lastSeq int64) (int64, error) {
	for _, ev := range events {
		lastSeq++
		ev.Seq = lastSeq
		b, err := json.Marshal(ev)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, qInsertEvent, ev.RunID, ev.Seq, b); err != nil {
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

// CreateRun implements spec.RunStateStore.
func (s *Store) CreateRun(ctx context.Context, p spec.CreateRunParams) (spec.RunSnapshot, error) {
	if err := spec.PrepareCreate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	var out spec.RunSnapshot
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		var retried *spec.RunSnapshot
		if p.RetryOf != "" {
			var snap string
			switch err := tx.GetContext(ctx, &snap, qGetRun, p.RetryOf); {
			case err == nil:
				r, err := decodeRun(snap)
				if err != nil {
					return err
				}
				retried = &r
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		run, ev, err := spec.NewRun(p, retried, now)
		if err != nil {
			return err
		}
		b, err := json.Marshal(run)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qInsertRun, run.RunID, run.WorkflowName, run.Status, run.Priority, run.CreatedAt,
			run.Version, 1, b, queueOf(run, spec.LeaseState{}))
		if spec.CodeOf(interpretError(err)) == spec.CodeAlreadyExists { // RUN-003
			return spec.AlreadyExists(run.RunID)
		}
		if err != nil {
			return err
		}
		if err := insertLabels(ctx, tx, run); err != nil {
			return err
		}
		if _, err := insertEvents(ctx, tx, []spec.AuditEvent{ev}, 0); err != nil {
			return err
		}
		out = run
		return nil
	})
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return out, nil
}

// UpdateRun implements spec.RunStateStore: the row is locked, the outcome
// decided by spec.ApplyUpdate on the database's time, and the snapshot,
// version and audit rows committed together. The UPDATE repeats the
// version and lease-token checks in its WHERE clause. Of writers racing
// from one version exactly one wins (CAS-003); the audit rows commit with
// the change (AUD-005), so reads never see one without the other (LIN-001).
func (s *Store) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (spec.RunSnapshot, error) {
	if err := spec.PrepareUpdate(&p); err != nil {
		return spec.RunSnapshot{}, err
	}
	var out spec.UpdateOutcome
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		row, err := s.lockRun(ctx, tx, p.RunID)
		if err != nil {
			return err
		}
		cur, err := row.run()
		if err != nil {
			return err
		}
		out = spec.ApplyUpdate(cur, row.lease(), p, row.Now)
		if !out.Write && len(out.Events) == 0 {
			return nil
		}
		lastSeq, err := insertEvents(ctx, tx, out.Events, row.LastSeq)
		if err != nil {
			return err
		}
		if !out.Write {
			_, err = tx.ExecContext(ctx, qUpdateSeq, lastSeq, p.RunID)
			return err
		}
		next := out.Snapshot
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, qUpdateRun, next.WorkflowName, next.Status, next.Priority, next.Version, lastSeq, b,
			queueOf(next, row.lease()), p.RunID, row.Version, row.LeaseToken)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("update of locked run %s matched %d rows: %v", p.RunID, n, err)
		}
		if p.Labels != nil && !maps.Equal(cur.Labels, next.Labels) {
			if _, err := tx.ExecContext(ctx, qDeleteLabels, p.RunID); err != nil {
				return err
			}
			return insertLabels(ctx, tx, next)
		}
		return nil
	})
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return out.Result()
}

// GetRun implements spec.RunStateStore.
func (s *Store) GetRun(ctx context.Context, runID string) (spec.RunSnapshot, error) {
	if err := spec.PrepareGet(runID); err != nil {
		return spec.RunSnapshot{}, err
	}
	if err := s.open(); err != nil {
		return spec.RunSnapshot{}, err
	}
	var snap string
	err := s.db.GetContext(ctx, &snap, qGetRun, runID)
	if errors.Is(err, sql.ErrNoRows) {
		return spec.RunSnapshot{}, spec.NotFound(runID)
	}
	if err != nil {
		return spec.RunSnapshot{}, interpretError(err)
	}
	return decodeRun(snap)
}

// listSQL builds one listing query for ListRuns: runs in status st (when
// set) matching q's filters, after q's cursor, in created order, limit+1.
func listSQL(q spec.RunQuery, st spec.RunStatus) (string, []any) {
	var b strings.Builder
	var args []any
	b.WriteString(qListRuns)
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
		b.WriteString(` AND r.created_at >= ?`)
		args = append(args, spec.Timestamp(q.Filter.CreatedFrom))
	}
	if !q.Filter.CreatedBefore.IsZero() {
		b.WriteString(` AND r.created_at < ?`)
		args = append(args, spec.Timestamp(q.Filter.CreatedBefore))
	}
	if q.After != nil {
		b.WriteString(afterCreated)
		args = append(args, q.After.CreatedAt, q.After.CreatedAt, q.After.RunID)
	}
	b.WriteString(byCreated + ` LIMIT ?`)
	return b.String(), append(args, q.Limit+1)
}

// ListRuns implements spec.RunStateStore. With statuses, each status is
// read in index order on its own and the results merged, so no query sorts
// more than a page.
func (s *Store) ListRuns(ctx context.Context, p spec.ListRunsParams) (spec.RunPage, error) {
	q, err := spec.PrepareListRuns(p)
	if err != nil {
		return spec.RunPage{}, err
	}
	if err := s.open(); err != nil {
		return spec.RunPage{}, err
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
			return spec.RunPage{}, err
		}
		runs = append(runs, found...)
	}
	// Merged in (created_at, run_id) order; the last page has no cursor (LIST-005).
	slices.SortFunc(runs, func(a, b spec.RunSnapshot) int { return spec.PositionOf(a).Compare(spec.PositionOf(b)) })
	page := spec.RunPage{Runs: runs}
	if len(runs) > q.Limit {
		page.Runs = runs[:q.Limit]
		page.NextCursor = spec.PositionOf(page.Runs[q.Limit-1]).Cursor()
	}
	return page, nil
}

func (s *Store) selectSnapshots(ctx context.Context, query string, args []any) ([]spec.RunSnapshot, error) {
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

// ListAuditEvents implements spec.RunStateStore.
func (s *Store) ListAuditEvents(ctx context.Context, p spec.ListAuditParams) (spec.AuditPage, error) {
	limit, err := spec.PrepareAuditQuery(p)
	if err != nil {
		return spec.AuditPage{}, err
	}
	if err := s.open(); err != nil {
		return spec.AuditPage{}, err
	}
	var page spec.AuditPage
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var n int
		if err := tx.GetContext(ctx, &n, qRunExists, p.RunID); err != nil {
			return err
		}
		if n == 0 {
			return spec.NotFound(p.RunID)
		}
		var events []string
		if err := tx.SelectContext(ctx, &events, qListEvents, p.RunID, p.AfterSeq, limit+1); err != nil {
			return err
		}
		page = spec.AuditPage{More: len(events) > limit}
		for _, e := range events[:min(len(events), limit)] {
			var ev spec.AuditEvent
			if err := json.Unmarshal([]byte(e), &ev); err != nil {
				return spec.Unavailable("a stored audit event does not decode", err)
			}
			page.Events = append(page.Events, ev)
		}
		return nil
	})
	return page, err
}
