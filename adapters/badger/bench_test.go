package badger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/oklog/ulid/v2"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bdb "github.com/dgraph-io/badger/v4"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/testsupport/benchutil"
)

func openBench(b *testing.B, dir string, noSync bool) *badger.Store {
	b.Helper()
	s, err := badger.Open(context.Background(), badger.Options{Dir: dir, NoSync: noSync, GCInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// handWritten is the baseline: one Badger transaction that reads the
// snapshot, checks the version, writes the new snapshot and an audit key,
// with the same JSON encoding and durability (sync writes) as the adapter.
type handWritten struct{ db *bdb.DB }

type baseRecord struct {
	Run     runstate.RunSnapshot `json:"run"`
	LastSeq int64                `json:"last_seq"`
}

// update is one transition by hand. With indexed, it keeps the adapter's
// data layout: it also reads the run's lease record and moves the run's
// status and queue index keys, as every store that lists by status and
// claims from a queue must. The difference between the two is what the
// indexes cost; between the indexed one and the adapter, what the adapter
// adds.
func (h handWritten) update(id string, expected int64, to runstate.RunStatus, indexed bool) (int64, error) {
	var version int64
	err := h.db.Update(func(txn *bdb.Txn) error {
		item, err := txn.Get([]byte("r\x00" + id))
		if err != nil {
			return err
		}
		var rec baseRecord
		if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &rec) }); err != nil {
			return err
		}
		if rec.Run.Version != expected {
			return &runstate.Error{Code: runstate.CodeVersionConflict, RunID: id, ExpectedVersion: expected, CurrentVersion: rec.Run.Version}
		}
		from := rec.Run.Status
		if indexed {
			if err := moveIndexesByHand(txn, id, rec.Run, to); err != nil {
				return err
			}
		}
		rec.Run.Status, rec.Run.Version, rec.Run.UpdatedAt = to, rec.Run.Version+1, driver.Timestamp(time.Now())
		rec.LastSeq++
		ev, _ := json.Marshal(runstate.AuditEvent{RunID: id, Seq: rec.LastSeq, Kind: runstate.AuditTransition, From: from, To: to,
			Time: rec.Run.UpdatedAt, Version: rec.Run.Version})
		if err := txn.Set([]byte(fmt.Sprintf("a\x00%s\x00%016x", id, rec.LastSeq)), ev); err != nil {
			return err
		}
		val, _ := json.Marshal(rec)
		version = rec.Run.Version
		return txn.Set([]byte("r\x00"+id), val)
	})
	return version, err
}

// moveIndexesByHand reads the run's lease and moves its status and queue
// index keys from the run's status to to.
func moveIndexesByHand(txn *bdb.Txn, id string, run runstate.RunSnapshot, to runstate.RunStatus) error {
	var lease driver.LeaseState
	if item, err := txn.Get([]byte("l\x00" + id)); err == nil {
		if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &lease) }); err != nil {
			return err
		}
	} else if !errors.Is(err, bdb.ErrKeyNotFound) {
		return err
	}
	created := fmt.Sprintf("%016x", run.CreatedAt.UnixMicro())
	keys := func(st runstate.RunStatus) []string {
		return []string{"s\x00" + string(st) + "\x00" + created + id, fmt.Sprintf("q\x00%s\x00%08x%s%s", st, run.Priority, created, id)}
	}
	for _, k := range keys(run.Status) {
		if err := txn.Delete([]byte(k)); err != nil {
			return err
		}
	}
	for _, k := range keys(to) {
		if err := txn.Set([]byte(k), nil); err != nil {
			return err
		}
	}
	return nil
}

func flip(i int) runstate.RunStatus {
	if i%2 == 1 {
		return runstate.StatusWaiting
	}
	return runstate.StatusRunning
}

// BenchmarkCASUpdate compares the adapter's UpdateRun (a transition: CAS,
// audit event, index moves, lease check) with the hand-written transaction
// and with the hand-written transaction that keeps the same indexes,
// sync writes on for both, sequentially and from 8 goroutines on 8 runs.
func BenchmarkCASUpdate(b *testing.B) {
	ctx := context.Background()
	steps := []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}, {Name: "deploy", Hosts: []string{"h1", "h2", "h3", "h4"}}}
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("adapter/goroutines=%d", par), func(b *testing.B) {
			s := openBench(b, b.TempDir(), false)
			defer s.Close()
			runs := make([]runstate.RunSnapshot, par)
			for i := range runs {
				r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench", Steps: steps})
				if err != nil {
					b.Fatal(err)
				}
				runs[i] = r
			}
			b.ReportAllocs()
			benchutil.Concurrently(b, par, func(w int, next func() bool) {
				run := runs[w]
				for i := 0; next(); i++ {
					var err error
					run, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: string(flip(i))})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		for _, impl := range []string{"handwritten", "handwritten-indexed"} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", impl, par), func(b *testing.B) {
				// Same options as the adapter's defaults: sync writes on.
				db, err := bdb.Open(bdb.DefaultOptions(b.TempDir()).WithSyncWrites(true).WithLogger(nil))
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				h := handWritten{db}
				ids := make([]string, par)
				for i := range ids {
					ids[i] = ulid.Make().String()
					first := runstate.RunSnapshot{RunID: ids[i], WorkflowName: "bench", Status: runstate.StatusQueued, Version: 1}
					for _, st := range steps {
						step := runstate.Step{Name: st.Name, Status: runstate.StepQueued}
						for _, host := range st.Hosts {
							step.Hosts = append(step.Hosts, runstate.HostState{Host: host, Status: runstate.StepQueued})
						}
						first.Steps = append(first.Steps, step)
					}
					v, _ := json.Marshal(baseRecord{Run: first, LastSeq: 1})
					if err := db.Update(func(txn *bdb.Txn) error { return txn.Set([]byte("r\x00"+ids[i]), v) }); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				benchutil.Concurrently(b, par, func(w int, next func() bool) {
					id := ids[w]
					version := int64(1)
					for i := 0; next(); i++ {
						var err error
						if version, err = h.update(id, version, flip(i), impl == "handwritten-indexed"); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkClaimNext claims runs from a queue with 1 and 8 workers, sync on.
func BenchmarkClaimNext(b *testing.B) {
	ctx := context.Background()
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			dir := b.TempDir()
			setup := openBench(b, dir, true)
			for i := range 20_000 {
				if _, err := setup.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench", Priority: i % 10}); err != nil {
					b.Fatal(err)
				}
			}
			setup.Close()
			s := openBench(b, dir, false)
			defer s.Close()
			var empty atomic.Bool
			benchutil.Concurrently(b, workers, func(w int, next func() bool) {
				owner := runstate.Owner{Worker: fmt.Sprintf("w%d", w), Incarnation: "1"}
				for next() {
					_, err := s.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
					if errors.Is(err, runstate.ErrNotFound) {
						empty.Store(true)
						return
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			if empty.Load() {
				b.Fatal("the queue ran dry: raise the number of queued runs")
			}
		})
	}
}

var (
	bigStoreOnce sync.Once
	bigStoreDir  string
	bigStoreDeep string // the cursor 90,000 runs deep
	bigStoreErr  error
)

// bigStore builds, once per benchmark binary, a store of 100,000 runs:
// 99,900 finished (success) and 100 running, the history a busy
// deployment accumulates.
func bigStore(b *testing.B) string {
	bigStoreOnce.Do(func() {
		ctx := context.Background()
		dir, err := os.MkdirTemp("", "runstate-bench-100k-*")
		if err != nil {
			bigStoreErr = err
			return
		}
		s, err := badger.Open(ctx, badger.Options{Dir: dir, NoSync: true, GCInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			bigStoreErr = err
			return
		}
		defer s.Close()
		for i := range 100_000 {
			r, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "bench", Priority: i % 10})
			if err == nil {
				r, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: "running"})
			}
			if err == nil && i%1000 != 999 {
				r, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: "success"})
			}
			if err != nil {
				bigStoreErr = err
				return
			}
		}
		for range 90 {
			page, err := s.ListRuns(ctx, runstate.ListRunsParams{Limit: 1000, Cursor: bigStoreDeep})
			if err != nil {
				bigStoreErr = err
				return
			}
			bigStoreDeep = page.NextCursor
		}
		bigStoreDir = dir
	})
	if bigStoreErr != nil {
		b.Fatal(bigStoreErr)
	}
	return bigStoreDir
}

// BenchmarkList100k reads a page of 50 runs at the start and 90,000 runs
// deep, and the 100 running runs by status, in a store of 100,000 runs.
func BenchmarkList100k(b *testing.B) {
	ctx := context.Background()
	s := openBench(b, bigStore(b), true)
	defer s.Close()
	cases := []struct {
		name string
		p    runstate.ListRunsParams
		want int
	}{
		{"page1", runstate.ListRunsParams{Limit: 50}, 50},
		{"page_at_90000", runstate.ListRunsParams{Limit: 50, Cursor: bigStoreDeep}, 50},
		{"status_running_100_of_100k", runstate.ListRunsParams{Limit: 100, Statuses: []string{"running"}}, 100},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page, err := s.ListRuns(ctx, tc.p)
				if err != nil || len(page.Runs) != tc.want {
					b.Fatalf("%d runs, %v", len(page.Runs), err)
				}
			}
		})
	}
	b.Run("runnable_running_100_of_100k", func(b *testing.B) {
		for b.Loop() {
			page, err := s.ListRunnableRuns(ctx, runstate.ListRunnableParams{Limit: 100, Filter: runstate.RunnableFilter{Statuses: []string{"running"}}})
			if err != nil || len(page.Runs) != 100 {
				b.Fatalf("%d runs, %v", len(page.Runs), err)
			}
		}
	})
}

// BenchmarkParkedRuns: claim-next and a runnable page with none and with
// 10,000 runs parked for signals and timers (benchutil.BenchParked): the
// parked index keeps them out of both.
func BenchmarkParkedRuns(b *testing.B) {
	benchutil.BenchParked(b, func(b *testing.B) runstate.Store {
		s := openBench(b, b.TempDir(), true)
		b.Cleanup(func() { s.Close() })
		return s
	}, 10000)
}
