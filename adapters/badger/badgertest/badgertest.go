// Package badgertest is the conformance harness of the Badger adapter,
// shared by its tests and cmd/conformance-runner.
package badgertest

import (
	"context"
	"log/slog"
	"os"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/conformance"
)

// Small opens a test store with modest memory budgets: a conformance run
// opens one store per check. Durability settings stay at their defaults.
func Small(o *bdb.Options) {
	o.MemTableSize = 8 << 20
	o.ValueThreshold = 256 << 10 // below the 15% of MemTableSize a batch may use
	o.ValueLogFileSize = 16 << 20
	o.BlockCacheSize = 4 << 20
	o.IndexCacheSize = 2 << 20
	o.NumMemtables = 2
	o.NumLevelZeroTables = 2
	o.NumLevelZeroTablesStall = 4
}

// Target returns the Badger adapter's conformance target: a fresh directory
// under baseDir per check, sync writes on. With manualClock the suite
// advances the store's clock (CAP-003); otherwise it sleeps through real
// TTLs. It declares leases, which badger.Store implements (CAP-001).
//
// It declares no second handle: a Badger directory belongs to one process,
// so concurrent workers share one Store, as the checks' goroutines do.
func Target(baseDir string, manualClock bool) conformance.Target {
	return conformance.Target{
		Name:         "badger",
		StoreVersion: "badger/v4",
		Capabilities: conformance.Capabilities{Leases: true, ControlledClock: manualClock},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			dir, err := os.MkdirTemp(baseDir, "runstate-badger-*")
			if err != nil {
				return nil, err
			}
			h := &harness{dir: dir}
			opts := badger.Options{Dir: dir, Tune: Small, GCInterval: -1,
				Logger: slog.New(slog.DiscardHandler)}
			if manualClock {
				h.clock = conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
				opts.Clock = h.clock
			}
			if h.store, err = badger.Open(ctx, opts); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			return h, nil
		},
	}
}

type harness struct {
	dir   string
	store *badger.Store
	clock *conformance.ManualClock
}

func (h *harness) Store() runstate.RunStateStore { return h.store }
func (h *harness) OpenHandle(context.Context) (runstate.RunStateStore, error) {
	return h.store, nil
}
func (h *harness) Advance(d time.Duration) { h.clock.Advance(d) }
func (h *harness) Close(context.Context) error {
	err := h.store.Close()
	if rmErr := os.RemoveAll(h.dir); err == nil {
		err = rmErr
	}
	return err
}
