package benchutil

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// HandWrittenUpdate is the SQL adapters' baseline for a transition: one
// transaction, at the pool's isolation level (READ COMMITTED, as for the
// adapter), that locks the run's row, checks the version, writes the
// snapshot and inserts the audit row, encoded as the adapter encodes them.
// db's driver name decides the placeholders.
func HandWrittenUpdate(ctx context.Context, db *sqlx.DB, id string, to runstate.RunStatus) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var row struct {
		Version  int64  `db:"version"`
		LastSeq  int64  `db:"last_seq"`
		Snapshot string `db:"snapshot"`
	}
	if err := tx.GetContext(ctx, &row, db.Rebind(`SELECT version, last_seq, snapshot FROM runstate_runs WHERE run_id = ? FOR UPDATE`), id); err != nil {
		return err
	}
	var snap runstate.RunSnapshot
	if err := json.Unmarshal([]byte(row.Snapshot), &snap); err != nil {
		return err
	}
	if snap.Version != row.Version {
		return errors.New("version mismatch")
	}
	from := snap.Status
	snap.Status, snap.Version, snap.UpdatedAt = to, snap.Version+1, driver.Timestamp(time.Now())
	b, _ := json.Marshal(snap)
	ev, _ := json.Marshal(runstate.AuditEvent{RunID: id, Seq: row.LastSeq + 1, Kind: runstate.AuditTransition, From: from, To: to, Time: snap.UpdatedAt, Version: snap.Version})
	if _, err := tx.ExecContext(ctx, db.Rebind(`UPDATE runstate_runs SET status = ?, version = ?, last_seq = ?, snapshot = ? WHERE run_id = ? AND version = ?`),
		string(to), snap.Version, row.LastSeq+1, string(b), id, row.Version); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, db.Rebind(`INSERT INTO runstate_audit (run_id, seq, event) VALUES (?, ?, ?)`), id, row.LastSeq+1, string(ev)); err != nil {
		return err
	}
	return tx.Commit()
}
