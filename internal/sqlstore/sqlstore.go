// Package sqlstore holds what the SQL adapters (MySQL, PostgreSQL) share:
// the row a write locks, the transaction loop, claim-next's rounds, the
// decoding and merging of listings. Each adapter keeps its own SQL and its
// own interpretError; what they do alike lives here once.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
)

// Row is a run locked for a write, with the database time: the columns
// every adapter's lock statement reads, by these names.
type Row struct {
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

// Lease is the row's lease.
func (r Row) Lease() driver.LeaseState {
	return driver.LeaseState{Owner: runstate.Owner{Worker: r.LeaseWorker, Incarnation: r.LeaseIncarnation}, Token: r.LeaseToken,
		AcquiredAt: r.LeaseAcquiredAt.Time.UTC(), ExpiresAt: r.LeaseExpiresAt.Time.UTC(), Released: r.LeaseReleased}
}

// Current is the row as a driver.Current.
func (r Row) Current() (driver.Current, error) {
	run, err := DecodeRun(r.Snapshot)
	return driver.Current{Run: run, Lease: r.Lease(), LastSeq: r.LastSeq, Now: driver.Timestamp(r.Now)}, err
}

// DecodeRun decodes a stored snapshot.
func DecodeRun(snapshot string) (runstate.RunSnapshot, error) {
	var s runstate.RunSnapshot
	if err := json.Unmarshal([]byte(snapshot), &s); err != nil {
		return s, runstate.Unavailable("a stored snapshot does not decode: the database was changed outside runstate", err)
	}
	return s, nil
}

// DecodeEvent decodes a stored audit event.
func DecodeEvent(event string) (runstate.AuditEvent, error) {
	var ev runstate.AuditEvent
	if err := json.Unmarshal([]byte(event), &ev); err != nil {
		return ev, runstate.Unavailable("a stored audit event does not decode: the database was changed outside runstate", err)
	}
	return ev, nil
}

// FirstClaimable returns the index of the row q admits at the database
// time that comes first in claim order, or -1.
func FirstClaimable(rows []Row, q driver.RunnableQuery) (int, error) {
	candidates := make([]driver.Current, len(rows))
	for i, row := range rows {
		c, err := row.Current()
		if err != nil {
			return -1, err
		}
		candidates[i] = c
	}
	return q.FirstClaimable(candidates), nil
}

// Transactions runs an adapter's transactions.
type Transactions struct {
	DB *sqlx.DB
	// Open reports the store closed (ErrUnavailable) before anything runs.
	Open func() error
	// Retryable reports an error after which the server rolled the
	// transaction back and running it again is safe (a deadlock).
	Retryable func(error) bool
	// Interpret maps the adapter's errors to the contract's.
	Interpret func(error) error
}

// MaxRetries bounds the retries of a transaction Retryable admits.
const MaxRetries = 8

// Run runs fn in a transaction at the connection's isolation level (READ
// COMMITTED for both adapters) and commits it when fn returns nil.
// Retryable errors are retried up to MaxRetries times with a short random
// pause; a lost connection is not (the commit may have happened): the
// snapshot, its audit events and the lease of a write change in one
// transaction, so a write cut off by a fault is applied wholly or not at
// all, never twice (FAULT-004, FAULT-005), and it is acknowledged only
// once committed (FAULT-003).
func (t Transactions) Run(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	if err := t.Open(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil { // CTX-001
			return err
		}
		err := t.try(ctx, fn)
		if !t.Retryable(err) || attempt == MaxRetries {
			return t.Interpret(err)
		}
		time.Sleep(time.Duration(rand.IntN(1000*(min(attempt, 6)+1))) * time.Microsecond)
	}
}

func (t Transactions) try(ctx context.Context, fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := t.DB.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// MaxClaimRounds bounds how often one claim-next call looks again after
// another call took the run it waited for. Each such round is another
// claimer's success, so the bound is reached only under a storm of claims.
const MaxClaimRounds = 64

// ClaimRounds runs claim-next's rounds: round reports a claim (found), or
// that the run it waited for was taken meanwhile and nothing was written
// (taken), when it looks again.
func ClaimRounds(round func() (found, taken bool, err error)) (bool, error) {
	for range MaxClaimRounds {
		found, taken, err := round()
		switch {
		case err != nil:
			return false, err
		case found || !taken:
			return found, nil
		}
	}
	return false, runstate.Unavailable(fmt.Sprintf("claim-next: other claimers took the run it waited for %d times in a row; try again", MaxClaimRounds), nil)
}

// ListByStatus lists runs for ListRuns: with statuses, each status on its
// own (read in index order, so no query sorts more than a page), merged in
// (created_at, run_id) order (LIST-005) and cut at q.Limit. list reads one
// status ("" for all).
func ListByStatus(q driver.RunQuery, list func(runstate.RunStatus) ([]runstate.RunSnapshot, error)) ([]runstate.RunSnapshot, error) {
	statuses := slices.Compact(slices.Sorted(slices.Values(q.Filter.Statuses)))
	if len(statuses) == 0 {
		statuses = []runstate.RunStatus{""}
	}
	var runs []runstate.RunSnapshot
	for _, st := range statuses {
		found, err := list(st)
		if err != nil {
			return nil, err
		}
		runs = append(runs, found...)
	}
	slices.SortFunc(runs, func(a, b runstate.RunSnapshot) int { return driver.PositionOf(a).Compare(driver.PositionOf(b)) })
	return runs[:min(len(runs), q.Limit)], nil
}

// MergeRunnable merges the runs of Runnable's parts in claim order, once
// each (an expired lease of an earlier incarnation is in two parts), cut
// at limit.
func MergeRunnable(runs []runstate.RunSnapshot, limit int) []runstate.RunSnapshot {
	slices.SortFunc(runs, func(a, b runstate.RunSnapshot) int {
		return driver.RunnablePositionOf(a).Compare(driver.RunnablePositionOf(b))
	})
	runs = slices.CompactFunc(runs, func(a, b runstate.RunSnapshot) bool { return a.RunID == b.RunID })
	return runs[:min(len(runs), limit)]
}

// SelectSnapshots runs a listing query whose rows have a snapshot column
// and decodes them.
func SelectSnapshots(ctx context.Context, db *sqlx.DB, query string, args []any) ([]runstate.RunSnapshot, error) {
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
		snap, err := DecodeRun(r.Snapshot)
		if err != nil {
			return nil, err
		}
		out = append(out, snap)
	}
	return out, nil
}

// InsertEvents stores numbered events with insert (run_id, seq, event) and
// returns the last one's Seq (lastSeq when there are none).
func InsertEvents(ctx context.Context, tx *sqlx.Tx, insert string, events []runstate.AuditEvent, lastSeq int64) (int64, error) {
	for _, ev := range events {
		lastSeq = ev.Seq
		b, err := json.Marshal(ev)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, insert, ev.RunID, ev.Seq, string(b)); err != nil {
			return 0, err
		}
	}
	return lastSeq, nil
}

// InsertLabels stores a run's labels with insert (run_id, key, value,
// created_at), in key order.
func InsertLabels(ctx context.Context, tx *sqlx.Tx, insert string, s runstate.RunSnapshot) error {
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if _, err := tx.ExecContext(ctx, insert, s.RunID, k, s.Labels[k], s.CreatedAt); err != nil {
			return err
		}
	}
	return nil
}

// NullTime is t, or NULL for the zero time.
func NullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
