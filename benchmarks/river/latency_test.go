package riverbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/postgres"
	"github.com/runstate/runstate/worker"
)

// Submit-to-start latency: how long a unit submitted to an idle-enough
// system waits before a worker starts it.
const (
	latencyWorkers     = 8
	latencySubmitters  = 8               // callers submitting at once, each one unit per call
	latencyWindow      = 4 * time.Second // how long each load is applied
	capacityUnits      = 3000            // the units of the capacity run
	latencyStartsGuard = time.Minute     // every unit started within this of the last submission, or the run fails
)

// BenchmarkSubmitToStart measures River's capacity (end to end, 8
// workers), then submits units one per call, open loop, at 25%, 50% and
// 75% of it, to each side in turn on a fresh database, and reports the
// time from each submission's call to its worker's start: p50, p99 and
// the largest, in ms. Both wake their workers with LISTEN/NOTIFY:
// River's producer (FetchCooldown at its least, so that a notice fetches
// at once), and runstate's worker package on WatchRunnable
// (Options.NotifyRunnable). Each side's poll is a second, a safety net
// only. Run it once per measurement:
//
//	go test -run '^$' -bench SubmitToStart -benchtime 1x -count 3
func BenchmarkSubmitToStart(b *testing.B) {
	srv := openServer(b)
	capacity := riverCapacity(b, srv)
	b.Logf("River's capacity: %.0f units/s (%d workers, end to end)", capacity, latencyWorkers)
	for _, load := range []int{25, 50, 75} {
		rate := capacity * float64(load) / 100
		for _, side := range []latencySide{&riverLatency{}, &runstateLatency{}} {
			b.Run(fmt.Sprintf("%s/load=%d%%", side.name(), load), func(b *testing.B) {
				db := srv.freshDatabase(b)
				n := int(rate * latencyWindow.Seconds())
				lat, err := side.measure(b.Context(), db.dsn, rate, n)
				if err != nil {
					b.Fatal(err)
				}
				reportLatency(b, lat, rate)
			})
		}
	}
}

// riverCapacity measures River's units/s end to end.
func riverCapacity(b *testing.B, srv *server) float64 {
	db := srv.freshDatabase(b)
	wl := newRiverWorkers(latencyWorkers)
	if err := wl.prepare(b.Context(), db.dsn, capacityUnits); err != nil {
		b.Fatal(err)
	}
	sw := &wallTimer{}
	if err := wl.run(b.Context(), db.dsn, capacityUnits, sw); err != nil {
		b.Fatal(err)
	}
	return capacityUnits / sw.elapsed.Seconds()
}

// wallTimer is a stopwatch that keeps the time between start and stop.
type wallTimer struct {
	began   time.Time
	elapsed time.Duration
}

func (w *wallTimer) start() { w.began = time.Now() }
func (w *wallTimer) stop()  { w.elapsed = time.Since(w.began) }

func reportLatency(b *testing.B, lat []time.Duration, rate float64) {
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(rate, "submitted/s")
	b.ReportMetric(0, "ns/op") // one measurement, not per-op time
}

// latencySide is one system under the latency workload.
type latencySide interface {
	name() string
	// measure starts the system's workers, submits n units at rate per
	// second, and returns each unit's submit-to-start time.
	measure(ctx context.Context, dsn string, rate float64, n int) ([]time.Duration, error)
}

// starts records when each unit was submitted and when it started.
type starts struct {
	submitted []time.Time
	started   []time.Time
	count     atomic.Int64
	all       chan struct{}
	once      sync.Once
	twice     atomic.Int64
}

func newStarts(n int) *starts {
	return &starts{submitted: make([]time.Time, n), started: make([]time.Time, n), all: make(chan struct{})}
}

func (s *starts) start(i int) {
	if !s.started[i].IsZero() {
		s.twice.Add(1)
		return
	}
	s.started[i] = time.Now()
	if s.count.Add(1) == int64(len(s.started)) {
		s.once.Do(func() { close(s.all) })
	}
}

// latencies waits for every unit to start and returns their latencies.
func (s *starts) latencies(ctx context.Context) ([]time.Duration, error) {
	select {
	case <-s.all:
	case <-time.After(latencyStartsGuard):
		return nil, fmt.Errorf("%d of %d units started", s.count.Load(), len(s.started))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if n := s.twice.Load(); n > 0 {
		return nil, fmt.Errorf("%d units started twice", n)
	}
	out := make([]time.Duration, len(s.started))
	for i := range out {
		out[i] = s.started[i].Sub(s.submitted[i])
	}
	return out, nil
}

// submitOpenLoop calls submit for units 0..n-1, unit i at i/rate seconds
// after the start whatever the earlier calls' times, latencySubmitters
// calls at most at once.
func submitOpenLoop(ctx context.Context, rate float64, n int, st *starts, submit func(context.Context, int) error) error {
	began := time.Now()
	var next atomic.Int64
	errs := make([]error, latencySubmitters)
	var wg sync.WaitGroup
	for c := range latencySubmitters {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(began.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
				st.submitted[i] = time.Now()
				if err := submit(ctx, i); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// riverLatency is River: a client of latencyWorkers workers, inserting
// each unit with Insert.
type riverLatency struct{}

func (*riverLatency) name() string { return "river" }

// indexedArgs is a River job that carries its unit's index.
type indexedArgs struct {
	I int `json:"i"`
}

func (indexedArgs) Kind() string { return "indexed" }

type startsWorker struct {
	river.WorkerDefaults[indexedArgs]
	st *starts
}

func (w *startsWorker) Work(_ context.Context, job *river.Job[indexedArgs]) error {
	w.st.start(job.Args.I)
	return nil
}

func (*riverLatency) measure(ctx context.Context, dsn string, rate float64, n int) ([]time.Duration, error) {
	if err := migrateRiver(ctx, dsn); err != nil {
		return nil, err
	}
	pool, err := openRiverPool(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	st := newStarts(n)
	registry := river.NewWorkers()
	river.AddWorker(registry, &startsWorker{st: st})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Workers: registry, Logger: quiet,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: latencyWorkers}},
		FetchCooldown: river.FetchCooldownMin, FetchPollInterval: time.Second})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		client.Stop(stopCtx)
	}()
	time.Sleep(500 * time.Millisecond) // the producer listens before the first insert
	err = submitOpenLoop(ctx, rate, n, st, func(ctx context.Context, i int) error {
		_, err := client.Insert(ctx, indexedArgs{I: i}, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return st.latencies(ctx)
}

// runstateLatency is runstate: the worker package of latencyWorkers slots
// on a PostgreSQL store that announces runnable runs, each unit created
// with CreateRun.
type runstateLatency struct{}

func (*runstateLatency) name() string { return "runstate-worker" }

func (*runstateLatency) measure(ctx context.Context, dsn string, rate float64, n int) ([]time.Duration, error) {
	s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, MaxOpenConns: poolSize, Logger: quiet, NotifyRunnable: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	st := newStarts(n)
	w, err := worker.New(worker.Config{Store: s, Owner: runstate.Owner{Worker: "latency", Incarnation: "1"}, Slots: latencyWorkers,
		LeaseTTL: leaseTTL, Poll: time.Second, Logger: quiet, CompleteLinger: completeLinger,
		Handler: func(_ context.Context, job *worker.Job) error {
			i, err := strconv.Atoi(strings.TrimPrefix(job.Run().RunID, "unit-"))
			if err != nil {
				return worker.Permanent(err)
			}
			st.start(i)
			return nil
		}})
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	defer func() { stop(); <-ran }()
	time.Sleep(500 * time.Millisecond) // the worker listens before the first submission
	err = submitOpenLoop(ctx, rate, n, st, func(ctx context.Context, i int) error {
		_, err := s.CreateRun(ctx, runstate.CreateRunParams{RunID: fmt.Sprintf("unit-%d", i), WorkflowName: "bench"})
		return err
	})
	if err != nil {
		return nil, err
	}
	return st.latencies(ctx)
}

// TestLatencyWorkloadsStartEveryUnitOnce runs each side's latency workload
// briefly: every unit submitted starts, once.
func TestLatencyWorkloadsStartEveryUnitOnce(t *testing.T) {
	srv := openServer(t)
	for _, side := range []latencySide{&riverLatency{}, &runstateLatency{}} {
		t.Run(side.name(), func(t *testing.T) {
			db := srv.freshDatabase(t)
			lat, err := side.measure(t.Context(), db.dsn, 200, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(lat) != 100 {
				t.Fatalf("%d latencies for 100 units", len(lat))
			}
		})
	}
}
