package badger

import (
	"context"
	"log/slog"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

// bulkInsert stores runs as Insert does, a few hundred per transaction.
func (s *storage) bulkInsert(ctx context.Context, runs []runstate.RunSnapshot) error {
	const perTxn = 200 // well inside Badger's transaction size limit
	for len(runs) > 0 {
		batch := runs[:min(perTxn, len(runs))]
		runs = runs[len(batch):]
		err := s.update(ctx, func(txn *tx) error {
			for _, r := range batch {
				created := runstate.AuditEvent{RunID: r.RunID, Seq: 1, Kind: runstate.AuditCreated, To: runstate.StatusQueued, Time: r.CreatedAt, Version: 1}
				if err := insert(txn, driver.InsertParams{Run: r, Created: created}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkScale: claim-next, a deep ListRuns page and recovery among a
// million finished runs, beside an empty store (writes synced, as by
// default).
func BenchmarkScale(b *testing.B) {
	benchutil.Scale(b, func(b *testing.B) (runstate.Store, benchutil.BulkLoader) {
		s, err := Open(context.Background(), Options{Dir: b.TempDir(), GCInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s, s.data.bulkInsert
	})
}
