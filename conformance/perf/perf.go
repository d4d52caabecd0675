// Package perf measures a store with fixed workloads, through the same
// targets as the conformance suite (a built-in store, a plugin process, a
// gateway), so that an integrator learns whether a store is fast as well
// as correct, beside the reference stores measured on the same machine.
//
// The workloads are those of docs/performance.md:
//
//   - cas-update: compare-and-set transitions, each writer on its own run;
//   - claim-next: workers claiming from a queue, every claim recorded, so
//     a run handed to two workers is counted (it must never happen);
//   - list-page: one page of ListRuns at the start and deep in the store;
//   - recovery: settling runs left running by a crashed runner;
//   - end-to-end: a worker pool taking queued runs and completing them,
//     as a job queue's client does (enqueue, take, run, complete), beside
//     end-to-end-calls, the same work one call per transition.
//
// Every workload level gets a fresh store from the target.
package perf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
)

// Workload names.
const (
	CASUpdate = "cas-update"
	ClaimNext = "claim-next"
	ListPage  = "list-page"
	Recovery  = "recovery"
	EndToEnd  = "end-to-end"
	// EndToEndCalls is end-to-end's baseline: one call per transition.
	EndToEndCalls = "end-to-end-calls"
)

// Options size the workloads. Zero values take the defaults.
type Options struct {
	// Levels are the writer and worker counts of cas-update and claim-next,
	// and the slots of end-to-end's worker pool (default 1, 8, 32).
	Levels []int
	// Duration is how long each cas-update level runs (default 2s).
	Duration time.Duration
	// Claims is how many runs each claim-next level claims, and each
	// end-to-end level completes (default 2,000).
	Claims int
	// ListRuns is how many runs list-page stores; the deep page starts at
	// nine tenths of them (default 10,000).
	ListRuns int
	// RecoveryRuns is how many runs recovery settles (default 10,000).
	RecoveryRuns int
	// Progress, when set, is told what is being measured.
	Progress func(string)
}

func (o Options) withDefaults() Options {
	if len(o.Levels) == 0 {
		o.Levels = []int{1, 8, 32}
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Claims <= 0 {
		o.Claims = 2000
	}
	if o.ListRuns <= 0 {
		o.ListRuns = 10000
	}
	if o.RecoveryRuns <= 0 {
		o.RecoveryRuns = 10000
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return o
}

// Measurement is one workload at one level.
type Measurement struct {
	Workload string `json:"workload"`
	// Level is the writer, worker or slot count; for list-page the page's depth
	// (runs before it); for recovery the number of runs settled.
	Level   int     `json:"level"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	// PerSecond is operations per second: updates, claims, pages, runs
	// settled, or runs completed.
	PerSecond float64 `json:"per_second"`
	// P50 and P99 are the latency of one operation (none for recovery,
	// which is one pass: Seconds is its duration).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// DoubleClaims counts claims of a run another worker had claimed in
	// the same level (claim-next and end-to-end; any is a broken store).
	DoubleClaims int `json:"double_claims"`
	// Skipped says why the workload did not run on this store.
	Skipped string `json:"skipped,omitempty"`
}

// Label names the measurement in tables and charts.
func (m Measurement) Label() string {
	switch m.Workload {
	case ListPage:
		return fmt.Sprintf("%s depth=%d", m.Workload, m.Level)
	case Recovery:
		return fmt.Sprintf("%s runs=%d", m.Workload, m.Level)
	}
	return fmt.Sprintf("%s x%d", m.Workload, m.Level)
}

// ErrDoubleClaim is returned, with the measurements, when a store handed
// one run to two workers; checked with errors.Is.
var ErrDoubleClaim = errors.New("the store handed one run to two workers")

// Run measures every workload on fresh stores of target, in order. It
// stops at the first error and returns what it measured so far.
func Run(ctx context.Context, target conformance.Target, opts Options) ([]Measurement, error) {
	opts = opts.withDefaults()
	var out []Measurement
	steps := []func(context.Context, conformance.Target, Options) ([]Measurement, error){casUpdates, claims, listPages, recovery, endToEnd}
	for _, step := range steps {
		ms, err := step(ctx, target, opts)
		out = append(out, ms...)
		if err != nil {
			// A run handed out twice is the verdict, whatever failed next.
			return out, errors.Join(doubleClaims(out), err)
		}
	}
	return out, doubleClaims(out)
}

// doubleClaims is ErrDoubleClaim for the first measurement that counted
// a run claimed twice, or nil.
func doubleClaims(ms []Measurement) error {
	for _, m := range ms {
		if m.DoubleClaims > 0 {
			return fmt.Errorf("%w: %d double claims, %s", ErrDoubleClaim, m.DoubleClaims, m.Label())
		}
	}
	return nil
}

// withStore gives fn a fresh store of target and closes it after.
func withStore(ctx context.Context, target conformance.Target, fn func(runstate.RunStateStore) error) error {
	h, err := target.NewHarness(ctx)
	if err != nil {
		return fmt.Errorf("open a fresh store: %w", err)
	}
	return errors.Join(fn(h.Store()), h.Close(ctx))
}

// latencies collects per-operation times from several goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

// measurement summarises ops timed over elapsed.
func (l *latencies) measurement(workload string, level int, elapsed time.Duration) Measurement {
	slices.Sort(l.all)
	m := Measurement{Workload: workload, Level: level, Ops: len(l.all), Seconds: elapsed.Seconds()}
	if n := len(l.all); n > 0 {
		m.P50, m.P99 = l.all[n/2], l.all[min(n-1, n*99/100)]
		m.PerSecond = float64(n) / elapsed.Seconds()
	}
	return m
}

// parallel runs body in n goroutines and returns the first error.
func parallel(n int, body func(worker int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = body(w)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createRuns creates n runs from 8 goroutines and returns their ids.
func createRuns(ctx context.Context, st runstate.RunStateStore, n int, params func(i int) runstate.CreateRunParams) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	err := parallel(8, func(int) error {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			r, err := st.CreateRun(ctx, params(i))
			if err != nil {
				return fmt.Errorf("create run %d of %d: %w", i+1, n, err)
			}
			ids[i] = r.RunID
		}
		return nil
	})
	return ids, err
}

func benchRun(int) runstate.CreateRunParams {
	return runstate.CreateRunParams{WorkflowName: "bench", Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1", "h2", "h3", "h4"}}}}
}

// casUpdates: each of level writers moves its own run between running and
// waiting with compare-and-set, for opts.Duration.
func casUpdates(ctx context.Context, target conformance.Target, opts Options) ([]Measurement, error) {
	var out []Measurement
	for _, level := range opts.Levels {
		opts.Progress(fmt.Sprintf("%s, writers=%d", CASUpdate, level))
		err := withStore(ctx, target, func(st runstate.RunStateStore) error {
			ids, err := createRuns(ctx, st, level, benchRun)
			if err != nil {
				return err
			}
			var lat latencies
			start := time.Now()
			deadline := start.Add(opts.Duration)
			err = parallel(level, func(w int) error {
				version, status := int64(1), runstate.StatusQueued
				var mine []time.Duration
				defer func() { lat.add(mine) }()
				for time.Now().Before(deadline) {
					to := runstate.StatusRunning
					if status == runstate.StatusRunning {
						to = runstate.StatusWaiting
					}
					t0 := time.Now()
					r, err := st.UpdateRun(ctx, runstate.UpdateRunParams{RunID: ids[w], ExpectedVersion: version, Status: string(to)})
					if err != nil {
						return fmt.Errorf("update run %s: %w", ids[w], err)
					}
					mine = append(mine, time.Since(t0))
					version, status = r.Version, r.Status
				}
				return nil
			})
			out = append(out, lat.measurement(CASUpdate, level, time.Since(start)))
			return err
		})
		if err != nil {
			return out, fmt.Errorf("%s, writers=%d: %w", CASUpdate, level, err)
		}
	}
	return out, nil
}

// claims: level workers claim opts.Claims runs from a queue that holds
// more; every claimed run is recorded, and one claimed twice is counted.
func claims(ctx context.Context, target conformance.Target, opts Options) ([]Measurement, error) {
	var out []Measurement
	for _, level := range opts.Levels {
		if !target.Capabilities.Leases {
			out = append(out, Measurement{Workload: ClaimNext, Level: level, Skipped: "the store has no leases"})
			continue
		}
		opts.Progress(fmt.Sprintf("%s, workers=%d", ClaimNext, level))
		err := withStore(ctx, target, func(st runstate.RunStateStore) error {
			leases, ok := runstate.As[runstate.LeaseStore](st)
			if !ok {
				return errors.New("the target declares leases but its store has no lease operations")
			}
			// More runs than claims, so no worker ever finds the queue empty.
			if _, err := createRuns(ctx, st, opts.Claims+level, func(i int) runstate.CreateRunParams {
				return runstate.CreateRunParams{WorkflowName: "bench", Priority: i % 10}
			}); err != nil {
				return err
			}
			var lat latencies
			var mu sync.Mutex
			claimed := make(map[string]int, opts.Claims)
			var left atomic.Int64
			left.Store(int64(opts.Claims))
			start := time.Now()
			err := parallel(level, func(w int) error {
				owner := runstate.Owner{Worker: fmt.Sprintf("bench-worker-%d", w), Incarnation: "1"}
				var mine []time.Duration
				defer func() { lat.add(mine) }()
				for left.Add(-1) >= 0 {
					t0 := time.Now()
					c, err := leases.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: owner, TTL: time.Hour})
					if err != nil {
						return fmt.Errorf("worker %d: claim-next with runs queued: %w", w, err)
					}
					mine = append(mine, time.Since(t0))
					mu.Lock()
					claimed[c.Run.RunID]++
					mu.Unlock()
				}
				return nil
			})
			m := lat.measurement(ClaimNext, level, time.Since(start))
			for _, n := range claimed {
				m.DoubleClaims += n - 1
			}
			out = append(out, m)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("%s, workers=%d: %w", ClaimNext, level, err)
		}
	}
	return out, nil
}

// pageSize is the list-page workload's page.
const pageSize = 100

// listPages: the first page of ListRuns, and the page nine tenths of the
// way through opts.ListRuns runs; keyset paging makes them cost the same.
func listPages(ctx context.Context, target conformance.Target, opts Options) ([]Measurement, error) {
	var out []Measurement
	opts.Progress(fmt.Sprintf("%s, runs=%d", ListPage, opts.ListRuns))
	err := withStore(ctx, target, func(st runstate.RunStateStore) error {
		if _, err := createRuns(ctx, st, opts.ListRuns, func(int) runstate.CreateRunParams { return runstate.CreateRunParams{WorkflowName: "bench"} }); err != nil {
			return err
		}
		depth := opts.ListRuns * 9 / 10 / pageSize * pageSize
		cursor := ""
		for seen := 0; seen < depth; seen += pageSize { // not timed: finding the deep page's cursor
			page, err := st.ListRuns(ctx, runstate.ListRunsParams{Limit: pageSize, Cursor: cursor})
			if err != nil {
				return fmt.Errorf("list runs: %w", err)
			}
			cursor = page.NextCursor
		}
		for _, at := range []struct {
			depth  int
			cursor string
		}{{0, ""}, {depth, cursor}} {
			var lat latencies
			var mine []time.Duration
			start := time.Now()
			for range 50 {
				t0 := time.Now()
				page, err := st.ListRuns(ctx, runstate.ListRunsParams{Limit: pageSize, Cursor: at.cursor})
				if err != nil {
					return fmt.Errorf("list runs at depth %d: %w", at.depth, err)
				}
				if len(page.Runs) != pageSize {
					return fmt.Errorf("list runs at depth %d of %d: a page of %d runs, want %d", at.depth, opts.ListRuns, len(page.Runs), pageSize)
				}
				mine = append(mine, time.Since(t0))
			}
			lat.add(mine)
			out = append(out, lat.measurement(ListPage, at.depth, time.Since(start)))
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("%s: %w", ListPage, err)
	}
	return out, nil
}

// recovery: opts.RecoveryRuns runs are left running, as by a runner that
// crashed; one recovery pass settles them all. PerSecond is runs settled
// per second.
func recovery(ctx context.Context, target conformance.Target, opts Options) ([]Measurement, error) {
	n := opts.RecoveryRuns
	opts.Progress(fmt.Sprintf("%s, runs=%d", Recovery, n))
	var out []Measurement
	err := withStore(ctx, target, func(st runstate.RunStateStore) error {
		ids, err := createRuns(ctx, st, n, benchRun)
		if err != nil {
			return err
		}
		var next atomic.Int64
		err = parallel(8, func(int) error {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if _, err := st.UpdateRun(ctx, runstate.UpdateRunParams{RunID: ids[i], ExpectedVersion: 1, Status: string(runstate.StatusRunning)}); err != nil {
					return fmt.Errorf("start run %s: %w", ids[i], err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		ropts := runstate.RecoveryOptions{Owner: runstate.Owner{Worker: "bench-recovery", Incarnation: "1"}, Logger: slog.New(slog.DiscardHandler)}
		start := time.Now()
		var rep runstate.RecoveryReport
		if full, ok := runstate.As[runstate.Store](st); ok && target.Capabilities.Leases {
			rep, err = runstate.Recover(ctx, full, ropts)
		} else {
			rep, err = runstate.RecoverExclusive(ctx, st, ropts)
		}
		elapsed := time.Since(start)
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		if rep.Interrupted != n {
			return fmt.Errorf("recovery interrupted %d of the %d runs left running", rep.Interrupted, n)
		}
		out = append(out, Measurement{Workload: Recovery, Level: n, Ops: n, Seconds: elapsed.Seconds(), PerSecond: float64(n) / elapsed.Seconds()})
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("%s: %w", Recovery, err)
	}
	return out, nil
}
