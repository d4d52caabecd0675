package mysql

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

// bulkInsert stores runs as Insert does (the run row and its created
// event), in multi-row statements of a few hundred runs.
func (s *Store) bulkInsert(ctx context.Context, runs []runstate.RunSnapshot) error {
	const perStatement = 500
	for len(runs) > 0 {
		batch := runs[:min(perStatement, len(runs))]
		runs = runs[len(batch):]
		err := s.runs.InTx(ctx, func(tx *sqlx.Tx) error {
			var runArgs, eventArgs []any
			for _, r := range batch {
				snap, err := json.Marshal(r)
				if err != nil {
					return err
				}
				ev, err := json.Marshal(runstate.AuditEvent{RunID: r.RunID, Seq: 1, Kind: runstate.AuditCreated, To: runstate.StatusQueued, Time: r.CreatedAt, Version: 1})
				if err != nil {
					return err
				}
				runArgs = append(runArgs, r.RunID, r.WorkflowName, r.Status, r.Priority, r.CreatedAt, r.Version, 1, snap,
					driver.QueueOf(r, driver.LeaseState{}))
				eventArgs = append(eventArgs, r.RunID, 1, ev)
			}
			if _, err := tx.ExecContext(ctx, manyRows(qInsertRun, len(batch)), runArgs...); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, manyRows(qInsertEvent, len(batch)), eventArgs...)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// manyRows repeats the VALUES tuple of a one-row INSERT n times.
func manyRows(insert string, n int) string {
	i := strings.LastIndex(insert, "VALUES ")
	tuple := insert[i+len("VALUES "):]
	return insert[:i+len("VALUES ")] + strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", ")
}

// BenchmarkScale: claim-next, a deep ListRuns page and recovery among a
// million finished runs, beside an empty database.
func BenchmarkScale(b *testing.B) {
	benchutil.Scale(b, func(b *testing.B) (runstate.Store, benchutil.BulkLoader) {
		s := openInternal(b)
		return s, s.bulkInsert
	})
}
