package sqlkit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Insert implements driver.Driver: the run's row, its labels and its
// created event, in one transaction. A duplicate run_id is
// ErrAlreadyExists (Dialect.Interpret).
func (k *Driver) Insert(ctx context.Context, r driver.InsertParams) error {
	return k.writes.insert(ctx, r)
}

// insert is Insert the locking way: a statement per table.
func (k lockingWay) insert(ctx context.Context, r driver.InsertParams) error {
	return k.InTx(ctx, func(tx *sqlx.Tx) error {
		run := r.Run
		b, err := json.Marshal(run)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, k.sql.InsertRun, run.RunID, run.WorkflowName, string(run.Status), run.Priority, run.CreatedAt,
			run.Version, r.Created.Seq, string(b), int(driver.QueueOf(run, driver.LeaseState{})))
		if err != nil {
			return err
		}
		if err := insertLabels(ctx, tx, k.sql.InsertLabel, run); err != nil {
			return err
		}
		if _, err = insertEvents(ctx, tx, k.sql.InsertEvent, []runstate.AuditEvent{r.Created}, 0); err != nil {
			return err
		}
		return k.announce(ctx, tx, nil, run, driver.LeaseState{})
	})
}

// Modify implements driver.Driver, the way New chose (writeWay).
func (k *Driver) Modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	return k.writes.modify(ctx, runID, change)
}

// modify is Modify the locking way: the row is locked, the change decided
// on the database's time, and the snapshot, lease and audit rows committed
// together. The UPDATE of the snapshot repeats the version and lease-token
// checks in its WHERE clause. Of writers racing from one version exactly
// one wins (CAS-003); the audit rows commit with the change (AUD-005), so
// reads never see one without the other (LIN-001).
func (k lockingWay) modify(ctx context.Context, runID string, change func(driver.Current) driver.Change) error {
	return k.InTx(ctx, func(tx *sqlx.Tx) error {
		locked, err := k.lockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		return k.change(ctx, tx, locked, change)
	})
}

// change decides change on the locked row and writes it.
func (k *Driver) change(ctx context.Context, tx *sqlx.Tx, locked row, change func(driver.Current) driver.Change) error {
	cur, err := locked.current()
	if err != nil {
		return err
	}
	return k.write(ctx, tx, locked, cur, change(cur))
}

// rowWrite is what a change writes to its locked row.
type rowWrite struct {
	locked row
	// before is the run as locked; next as written (before, when the
	// change leaves the run as it is).
	before, next runstate.RunSnapshot
	// lease is the lease as written; newLease says the change set it.
	lease    driver.LeaseState
	newLease bool
	// lastSeq is the run's last audit seq after the change's events;
	// events says there were some.
	lastSeq int64
	events  bool
}

// write stores change c of the locked row, read as cur: the events, then
// the row.
func (k *Driver) write(ctx context.Context, tx *sqlx.Tx, locked row, cur driver.Current, c driver.Change) error {
	w := newRowWrite(locked, cur, c)
	var err error
	if w.lastSeq, err = insertEvents(ctx, tx, k.sql.InsertEvent, c.Events, locked.LastSeq); err != nil {
		return err
	}
	if err := k.writeRow(ctx, tx, w, c); err != nil {
		return err
	}
	return k.announce(ctx, tx, &cur, w.next, w.lease)
}

// newRowWrite is what change c of the locked row, read as cur, writes; its
// lastSeq counts c's events.
func newRowWrite(locked row, cur driver.Current, c driver.Change) rowWrite {
	w := rowWrite{locked: locked, before: cur.Run, next: cur.Run, lease: cur.Lease, newLease: c.Lease != nil, events: len(c.Events) > 0,
		lastSeq: locked.LastSeq}
	if c.Run != nil {
		w.next = *c.Run
	}
	if c.Lease != nil {
		w.lease = *c.Lease
	}
	if w.events {
		w.lastSeq = c.Events[len(c.Events)-1].Seq
	}
	return w
}

// writeRow stores w in its row, and the run's labels when they changed,
// after c's events were inserted.
func (k *Driver) writeRow(ctx context.Context, tx *sqlx.Tx, w rowWrite, c driver.Change) error {
	var err error
	switch {
	case c.Run == nil && c.Lease == nil:
		if w.events {
			_, err = tx.ExecContext(ctx, k.sql.UpdateSeq, w.lastSeq, w.locked.RunID)
		}
		return err
	case c.Run == nil:
		return k.writeLease(ctx, tx, w)
	}
	if err = k.writeRun(ctx, tx, w); err != nil || !w.labelsChanged() {
		return err
	}
	if _, err = tx.ExecContext(ctx, k.sql.DeleteLabels, w.locked.RunID); err != nil {
		return err
	}
	return insertLabels(ctx, tx, k.sql.InsertLabel, w.next)
}

// labelsChanged reports whether the write changes the run's labels.
func (w rowWrite) labelsChanged() bool { return !maps.Equal(w.before.Labels, w.next.Labels) }

// writeLease stores a new lease of an unchanged run, and the last seq when
// events were added.
func (k *Driver) writeLease(ctx context.Context, tx *sqlx.Tx, w rowWrite) error {
	queue := int(driver.QueueOf(w.next, w.lease))
	if k.sql.UpdateRunAndLease != "" { // one UPDATE, checked
		res, err := tx.ExecContext(ctx, k.sql.UpdateLease, w.lease.Token, w.lease.Owner.Worker, w.lease.Owner.Incarnation,
			nullTime(w.lease.AcquiredAt), nullTime(w.lease.ExpiresAt), w.lease.Released, queue, w.lastSeq,
			w.locked.RunID, w.locked.Version, w.locked.LeaseToken)
		return updatedOne(res, err, w.locked.RunID)
	}
	if err := k.updateLease(ctx, tx, w, queue); err != nil || !w.events {
		return err
	}
	_, err := tx.ExecContext(ctx, k.sql.UpdateSeq, w.lastSeq, w.locked.RunID)
	return err
}

// updateLease updates the lease columns alone, unchecked: the row is locked.
func (k *Driver) updateLease(ctx context.Context, tx *sqlx.Tx, w rowWrite, queue int) error {
	_, err := tx.ExecContext(ctx, k.sql.UpdateLease, w.lease.Token, w.lease.Owner.Worker, w.lease.Owner.Incarnation,
		nullTime(w.lease.AcquiredAt), nullTime(w.lease.ExpiresAt), w.lease.Released, queue, w.locked.RunID)
	return err
}

// writeRun stores the run's next snapshot with its lease, checking the
// locked version and lease token.
func (k *Driver) writeRun(ctx context.Context, tx *sqlx.Tx, w rowWrite) error {
	b, err := json.Marshal(w.next)
	if err != nil {
		return err
	}
	queue := int(driver.QueueOf(w.next, w.lease))
	if k.sql.UpdateRunAndLease != "" {
		res, err := tx.ExecContext(ctx, k.sql.UpdateRunAndLease, w.next.WorkflowName, string(w.next.Status), w.next.Priority, w.next.Version,
			w.lastSeq, string(b), queue, w.lease.Token, w.lease.Owner.Worker, w.lease.Owner.Incarnation,
			nullTime(w.lease.AcquiredAt), nullTime(w.lease.ExpiresAt), w.lease.Released, w.locked.RunID, w.locked.Version, w.locked.LeaseToken)
		return updatedOne(res, err, w.locked.RunID)
	}
	if w.newLease { // the lease first, as a lease-only change writes it
		if err := k.updateLease(ctx, tx, w, int(driver.QueueOf(w.before, w.lease))); err != nil {
			return err
		}
	}
	res, err := tx.ExecContext(ctx, k.sql.UpdateRun, w.next.WorkflowName, string(w.next.Status), w.next.Priority, w.next.Version, w.lastSeq,
		string(b), queue, w.locked.RunID, w.locked.Version, w.lease.Token)
	return updatedOne(res, err, w.locked.RunID)
}

// updatedOne checks that a checked UPDATE of a locked row matched it.
func updatedOne(res sql.Result, err error, runID string) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("update of locked run %s matched %d rows: %v", runID, n, err)
	}
	return nil
}

// announce runs Dialect.OnRunnable when run became claimable without a
// lease (driver.BecameClaimable; before: as it was, nil for a new run).
func (k *Driver) announce(ctx context.Context, tx *sqlx.Tx, before *driver.Current, run runstate.RunSnapshot, lease driver.LeaseState) error {
	if k.dialect.OnRunnable == nil || !becameRunnable(before, run, lease) {
		return nil
	}
	return k.dialect.OnRunnable(ctx, tx)
}

// becameRunnable is driver.BecameClaimable of a write from before.
func becameRunnable(before *driver.Current, run runstate.RunSnapshot, lease driver.LeaseState) bool {
	after := driver.Placed{Run: run, Lease: lease}
	if before == nil {
		return driver.BecameClaimable(nil, after)
	}
	return driver.BecameClaimable(&driver.Placed{Run: before.Run, Lease: before.Lease}, after)
}
