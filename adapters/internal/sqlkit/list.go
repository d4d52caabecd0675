package sqlkit

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// ListRuns implements driver.Driver. With statuses, each status is read
// on its own in index order, so no query sorts more than a page, and the
// results are merged in (created_at, run_id) order (LIST-005) and cut at
// q.Limit.
func (k *Driver) ListRuns(ctx context.Context, q driver.RunQuery) ([]runstate.RunSnapshot, error) {
	if err := k.CheckOpen(); err != nil {
		return nil, err
	}
	statuses := slices.Compact(slices.Sorted(slices.Values(q.Filter.Statuses)))
	if len(statuses) == 0 {
		statuses = []runstate.RunStatus{""}
	}
	var runs []runstate.RunSnapshot
	for _, st := range statuses {
		list, err := k.ListSQL(q, st)
		if err != nil {
			return nil, err
		}
		found, err := k.selectSnapshots(ctx, list)
		if err != nil {
			return nil, err
		}
		runs = append(runs, found...)
	}
	slices.SortFunc(runs, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
	return runs[:min(len(runs), q.Limit)], nil
}

// ListSQL builds one listing query for ListRuns: runs in status st (when
// set) matching q's filters, after q's cursor (LIST-006), in created
// order, q.Limit of them.
func (k *Driver) ListSQL(q driver.RunQuery, st runstate.RunStatus) (Statement, error) {
	var b strings.Builder
	var args []any
	b.WriteString(k.sql.ListColumns)
	switch hints := k.sql.ListHints; {
	case st != "":
		b.WriteString(hints.ByStatus)
	case q.Filter.WorkflowName != "":
		b.WriteString(hints.ByWorkflow)
	case len(q.Filter.Labels) == 0:
		b.WriteString(hints.ByCreated)
	}
	// Label filters alone are left to the planner: it may rather start
	// from the labels table.
	b.WriteString(k.sql.WhereTrue)
	if st != "" {
		b.WriteString(k.sql.ByStatus)
		args = append(args, string(st))
	}
	args = k.filter(&b, args, q.Filter.WorkflowName, q.Filter.Labels)
	if !q.Filter.CreatedFrom.IsZero() {
		b.WriteString(k.sql.CreatedFrom)
		args = append(args, driver.Timestamp(q.Filter.CreatedFrom))
	}
	if !q.Filter.CreatedBefore.IsZero() {
		b.WriteString(k.sql.CreatedBefore)
		args = append(args, driver.Timestamp(q.Filter.CreatedBefore))
	}
	if q.After != nil {
		args = k.sql.AfterCreated.write(&b, args, q.After.CreatedAt, q.After.RunID)
	}
	b.WriteString(k.sql.ByCreatedLimit)
	query, args, err := k.dialect.Bind(k.readByKey(b.String(), ListingRows, false), append(args, q.Limit))
	return Statement{query, args}, err
}

func (k *Driver) selectSnapshots(ctx context.Context, st Statement) ([]runstate.RunSnapshot, error) {
	runs, err := selectSnapshots(ctx, k.db, st.Query, st.Args)
	return runs, k.dialect.Interpret(err)
}

// ListAudit implements driver.Driver: the run and its events are read at
// one instant (LIN-001), by one statement or in one transaction
// (Statements.RunExists).
func (k *Driver) ListAudit(ctx context.Context, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	if k.sql.RunExists != "" {
		var events []runstate.AuditEvent
		err := k.InTx(ctx, func(tx *sqlx.Tx) (err error) {
			events, err = k.listAuditIn(ctx, tx, q)
			return err
		})
		return events, err
	}
	if err := k.CheckOpen(); err != nil {
		return nil, err
	}
	var rows []sql.NullString
	if err := k.db.SelectContext(ctx, &rows, k.sql.ListEvents, q.RunID, q.AfterSeq, q.Limit); err != nil {
		return nil, k.dialect.Interpret(err)
	}
	if len(rows) == 0 {
		return nil, runstate.ErrNotFound
	}
	if !rows[0].Valid {
		rows = nil // the run has no events after q.AfterSeq
	}
	return decodeEvents(rows)
}

// listAuditIn checks that the run exists and reads its events, in tx.
func (k *Driver) listAuditIn(ctx context.Context, tx *sqlx.Tx, q driver.AuditQuery) ([]runstate.AuditEvent, error) {
	var n int
	if err := tx.GetContext(ctx, &n, k.sql.RunExists, q.RunID); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, runstate.ErrNotFound
	}
	var rows []sql.NullString
	if err := tx.SelectContext(ctx, &rows, k.sql.ListEvents, q.RunID, q.AfterSeq, q.Limit); err != nil {
		return nil, err
	}
	return decodeEvents(rows)
}

func decodeEvents(rows []sql.NullString) ([]runstate.AuditEvent, error) {
	events := make([]runstate.AuditEvent, len(rows))
	for i, e := range rows {
		ev, err := decodeEvent(e.String)
		if err != nil {
			return nil, err
		}
		events[i] = ev
	}
	return events, nil
}
