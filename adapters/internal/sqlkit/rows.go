package sqlkit

import (
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// row is a run locked for a write, with the database time: the columns
// every dialect's LockRun and claim candidates read, by these names.
type row struct {
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
	// RowVersion is the engine's version of the row as read, which lean
	// writes compare (LeanStatements.ReadRuns); 0 where it is not read.
	RowVersion int64 `db:"row_version"`
}

// lease is the row's lease.
func (r row) lease() driver.LeaseState {
	return driver.LeaseState{Owner: runstate.Owner{Worker: r.LeaseWorker, Incarnation: r.LeaseIncarnation}, Token: r.LeaseToken,
		AcquiredAt: r.LeaseAcquiredAt.Time.UTC(), ExpiresAt: r.LeaseExpiresAt.Time.UTC(), Released: r.LeaseReleased}
}

// current is the row as a driver.Current.
func (r row) current() (driver.Current, error) {
	run, err := decodeRun(r.Snapshot)
	return driver.Current{Run: run, Lease: r.lease(), LastSeq: r.LastSeq, Now: driver.Timestamp(r.Now)}, err
}

// decodeRun decodes a stored snapshot.
func decodeRun(snapshot string) (runstate.RunSnapshot, error) {
	var s runstate.RunSnapshot
	if err := json.Unmarshal([]byte(snapshot), &s); err != nil {
		return s, runstate.Unavailable("a stored snapshot does not decode: the database was changed outside runstate", err)
	}
	return s, nil
}

// decodeEvent decodes a stored audit event.
func decodeEvent(event string) (runstate.AuditEvent, error) {
	var ev runstate.AuditEvent
	if err := json.Unmarshal([]byte(event), &ev); err != nil {
		return ev, runstate.Unavailable("a stored audit event does not decode: the database was changed outside runstate", err)
	}
	return ev, nil
}

// firstClaimable returns the index of the row q admits at the database
// time that comes first in claim order, or -1.
func firstClaimable(rows []row, q driver.RunnableQuery) (int, error) {
	candidates := make([]driver.Current, len(rows))
	for i, r := range rows {
		c, err := r.current()
		if err != nil {
			return -1, err
		}
		candidates[i] = c
	}
	return q.FirstClaimable(candidates), nil
}

// selectSnapshots runs a listing query whose rows have a snapshot column
// and decodes them.
func selectSnapshots(ctx context.Context, db *sqlx.DB, query string, args []any) ([]runstate.RunSnapshot, error) {
	var rows []struct {
		Snapshot  string    `db:"snapshot"`
		CreatedAt time.Time `db:"created_at"`
		RunID     string    `db:"run_id"`
	}
	if err := db.SelectContext(ctx, &rows, query, args...); err != nil {
		return nil, err
	}
	out := make([]runstate.RunSnapshot, 0, len(rows))
	for _, r := range rows {
		snap, err := decodeRun(r.Snapshot)
		if err != nil {
			return nil, err
		}
		out = append(out, snap)
	}
	return out, nil
}

// insertEvents stores numbered events with insert (run_id, seq, event) and
// returns the last one's Seq (lastSeq when there are none).
func insertEvents(ctx context.Context, tx *sqlx.Tx, insert string, events []runstate.AuditEvent, lastSeq int64) (int64, error) {
	rows, err := appendEvents(nil, events)
	if err != nil {
		return 0, err
	}
	if err := execEach(ctx, tx, insert, rows); err != nil {
		return 0, err
	}
	if len(events) > 0 {
		lastSeq = events[len(events)-1].Seq
	}
	return lastSeq, nil
}

// insertLabels stores a run's labels with insert (run_id, key, value,
// created_at), in key order.
func insertLabels(ctx context.Context, tx *sqlx.Tx, insert string, s runstate.RunSnapshot) error {
	return execEach(ctx, tx, insert, appendLabels(nil, s))
}

// execEach runs statement once per row of arguments.
func execEach(ctx context.Context, tx *sqlx.Tx, statement string, rows [][]any) error {
	for _, args := range rows {
		if _, err := tx.ExecContext(ctx, statement, args...); err != nil {
			return err
		}
	}
	return nil
}

// appendEvents appends the rows (run_id, seq, event) of events.
func appendEvents(rows [][]any, events []runstate.AuditEvent) ([][]any, error) {
	for _, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		rows = append(rows, []any{ev.RunID, ev.Seq, string(b)})
	}
	return rows, nil
}

// appendLabels appends the rows (run_id, key, value, created_at) of s's
// labels, in key order.
func appendLabels(rows [][]any, s runstate.RunSnapshot) [][]any {
	for _, key := range slices.Sorted(maps.Keys(s.Labels)) {
		rows = append(rows, []any{s.RunID, key, s.Labels[key], s.CreatedAt})
	}
	return rows
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
