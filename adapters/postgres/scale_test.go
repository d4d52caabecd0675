package postgres

import (
	"context"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

// bulkInsert stores runs as Insert does (the run row and its created
// event), a thousand to a statement (InsertMany).
func (s *Store) bulkInsert(ctx context.Context, runs []runstate.RunSnapshot) error {
	for len(runs) > 0 {
		batch := runs[:min(runstate.MaxBatchItems, len(runs))]
		runs = runs[len(batch):]
		inserts := make([]driver.InsertParams, len(batch))
		for i, r := range batch {
			inserts[i] = driver.InsertParams{Run: r,
				Created: runstate.AuditEvent{RunID: r.RunID, Seq: 1, Kind: runstate.AuditCreated, To: runstate.StatusQueued, Time: r.CreatedAt, Version: 1}}
		}
		if err := s.runs.InsertMany(ctx, inserts); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkScale: claim-next, a deep ListRuns page and recovery among a
// million finished runs, beside an empty schema.
func BenchmarkScale(b *testing.B) {
	benchutil.Scale(b, func(b *testing.B) (runstate.Store, benchutil.BulkLoader) {
		s := openInternal(b)
		return s, s.bulkInsert
	})
}
