package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runstate/runstate"
)

// Scale operations, each timed at two store sizes.
const (
	ScaleClaimNext    = "claim-next"
	ScaleListRunnable = "list-runnable"
	ScaleListRunsDeep = "list-runs-deep"
)

// ScaleOptions size MeasureScale. Zero values take the defaults.
type ScaleOptions struct {
	// Small and Large are how many runs that no claim may take (half
	// leased to another worker, half finished) the store holds when the
	// operations are timed (default 100 and 10,000).
	Small, Large int
	// Samples is how many times each operation is timed at each size
	// (default 30); the median is compared.
	Samples int
	// Reads, when set, returns how many runs the store has read so far, as
	// a counting driver can tell: each measurement then also compares runs
	// read per operation, a figure load on the machine cannot blur.
	Reads func() int64
	// Progress, when set, is told what is being done.
	Progress func(string)
}

func (o ScaleOptions) withDefaults() ScaleOptions {
	if o.Small <= 0 {
		o.Small = 100
	}
	if o.Large <= 0 {
		o.Large = 10000
	}
	if o.Samples <= 0 {
		o.Samples = 30
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return o
}

// ScaleMeasurement is one operation timed with Small and with Large
// non-claimable runs in the store.
type ScaleMeasurement struct {
	Operation string `json:"operation"`
	SmallRuns int    `json:"small_runs"`
	LargeRuns int    `json:"large_runs"`
	// SmallSeconds and LargeSeconds are the median time of one operation.
	SmallSeconds float64 `json:"small_seconds"`
	LargeSeconds float64 `json:"large_seconds"`
	// Ratio is LargeSeconds / SmallSeconds.
	Ratio float64 `json:"ratio"`
	// SmallReads and LargeReads are the runs read per operation, and
	// ReadsRatio their ratio, when ScaleOptions.Reads counts them.
	SmallReads float64 `json:"small_reads,omitempty"`
	LargeReads float64 `json:"large_reads,omitempty"`
	ReadsRatio float64 `json:"reads_ratio,omitempty"`
	// Bound is the largest ratio that is not flagged: the square root of
	// the growth (10 for 100 times the runs), far below the growth itself,
	// which a cost linear in the store's size reaches, and far above the
	// logarithm an index costs.
	Bound float64 `json:"bound"`
	// Flagged: Ratio (or ReadsRatio) exceeds Bound; the operation's cost
	// grows with the runs no claim may take, linearly or worse.
	Flagged bool `json:"flagged"`
	// GetRunSeconds is the median time of a GetRun in the small store:
	// a call's fixed cost (a process boundary, a network round trip),
	// which hides part of an operation's growth when it dominates.
	GetRunSeconds float64 `json:"get_run_seconds"`
	// Skipped says why the operation was not measured: the store lacks
	// what it needs (leases).
	Skipped string `json:"skipped,omitempty"`
	// Failed says how the store failed while measured: an operation
	// returned an error or a wrong answer, here or while the store was
	// filled. The figures are then absent and the profile is failed.
	Failed string `json:"failed,omitempty"`
}

// ScaleFailure is MeasureScale's error when the store failed what the
// measurement asked of it: a call that returned an error, or a wrong
// answer (a runnable listing empty while claimable runs wait, a ListRuns
// that ends before the runs the store holds). A broken store is a
// failure, not a lack: the scale profile is failed. MeasureScale's other
// errors are the harness's (a store it could not open), the caller's
// (the sizes) or the context's.
type ScaleFailure struct {
	// Operation is what the store was doing: one of the operations timed
	// (ScaleClaimNext, ScaleListRunnable, ScaleListRunsDeep), "get-run",
	// or "fill" (creating and claiming the runs no claim may take).
	Operation string
	Err       error
}

func (e *ScaleFailure) Error() string { return "scale: " + e.Operation + ": " + e.Err.Error() }

func (e *ScaleFailure) Unwrap() error { return e.Err }

// scaleFill is the Operation of a ScaleFailure while a store was filled.
const scaleFill = "fill"

// String is the measurement as reports print it.
func (m ScaleMeasurement) String() string {
	if m.Failed != "" {
		return fmt.Sprintf("%s: FAILED: %s", m.Operation, m.Failed)
	}
	if m.Skipped != "" {
		return fmt.Sprintf("%s: not measured (%s)", m.Operation, m.Skipped)
	}
	verdict := "ok"
	if m.Flagged {
		verdict = "FLAGGED: grows linearly or worse"
	}
	s := fmt.Sprintf("%s: %v with %d runs, %v with %d runs: ×%.1f (bound ×%.1f)",
		m.Operation, seconds(m.SmallSeconds), m.SmallRuns, seconds(m.LargeSeconds), m.LargeRuns, m.Ratio, m.Bound)
	s += fmt.Sprintf("; a GetRun takes %v", seconds(m.GetRunSeconds))
	if m.ReadsRatio > 0 {
		s += fmt.Sprintf("; runs read %.0f → %.0f: ×%.1f", m.SmallReads, m.LargeReads, m.ReadsRatio)
	}
	return s + ": " + verdict
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond / 10)
}

// MeasureScale measures, on two fresh stores of target, how claim-next,
// the runnable listing and a ListRuns page deep in the store cost with
// opts.Small runs that no claim may take in one and opts.Large in the
// other, and flags each whose cost grew beyond the bound. The samples
// alternate between the stores, so that load on the machine weighs on
// both sizes alike, and the ratios do not depend on how fast the machine
// is. Claim-next and the runnable listing need leases; without them only
// the deep page is measured.
//
// A store that fails while measured returns a *ScaleFailure, with the
// measurement of the operation that failed (its Failed set), so that
// Verdicts fails the profile.
func MeasureScale(ctx context.Context, target Target, opts ScaleOptions) ([]ScaleMeasurement, error) {
	opts = opts.withDefaults()
	if opts.Large <= opts.Small {
		return nil, fmt.Errorf("scale: Large (%d) must exceed Small (%d)", opts.Large, opts.Small)
	}
	ms, err := measureScale(ctx, target, opts)
	var failure *ScaleFailure
	switch {
	case err == nil:
		return ms, nil
	case ctx.Err() != nil: // cut short, not failed
		return nil, fmt.Errorf("scale: %w", ctx.Err())
	case errors.As(err, &failure):
		return []ScaleMeasurement{{Operation: failure.Operation, SmallRuns: opts.Small, LargeRuns: opts.Large,
			Bound: math.Sqrt(float64(opts.Large) / float64(opts.Small)), Failed: failure.Err.Error()}}, failure
	}
	return nil, err
}

func measureScale(ctx context.Context, target Target, opts ScaleOptions) ([]ScaleMeasurement, error) {
	var pair [2]*scaler
	for i, size := range []int{opts.Small, opts.Large} {
		h, err := target.NewHarness(ctx)
		if err != nil {
			return nil, fmt.Errorf("scale: open a fresh store: %w", err)
		}
		defer h.Close(context.WithoutCancel(ctx))
		s := &scaler{st: h.Store()}
		if target.Capabilities.Leases {
			s.leases, _ = runstate.As[runstate.LeaseStore](s.st)
		}
		opts.Progress(fmt.Sprintf("scale: filling a store with %d runs no claim may take", size))
		if err := s.fill(ctx, size); err != nil {
			return nil, err
		}
		pair[i] = s
	}
	opts.Progress("scale: timing both stores, samples alternating")
	samples, err := timePair(ctx, pair, opts)
	if err != nil {
		return nil, err
	}
	bound := math.Sqrt(float64(opts.Large) / float64(opts.Small))
	var out []ScaleMeasurement
	for _, op := range []string{ScaleClaimNext, ScaleListRunnable, ScaleListRunsDeep} {
		m := ScaleMeasurement{Operation: op, SmallRuns: opts.Small, LargeRuns: opts.Large, Bound: bound, GetRunSeconds: samples[getRun][0].median.Seconds()}
		a, b := samples[op][0], samples[op][1]
		if a.skipped != "" {
			m.Skipped = a.skipped
			out = append(out, m)
			continue
		}
		m.SmallSeconds, m.LargeSeconds = a.median.Seconds(), b.median.Seconds()
		m.Ratio = m.LargeSeconds / max(m.SmallSeconds, 1e-9)
		m.Flagged = m.Ratio > bound
		if opts.Reads != nil {
			m.SmallReads, m.LargeReads = a.reads, b.reads
			m.ReadsRatio = m.LargeReads / max(m.SmallReads, 1)
			m.Flagged = m.Flagged || m.ReadsRatio > bound
		}
		out = append(out, m)
	}
	return out, nil
}

// scaler is one store of the pair MeasureScale compares.
type scaler struct {
	st     runstate.RunStateStore
	leases runstate.LeaseStore // nil: the store has no leases
	// created counts every run created, claimable ones included.
	created int
	last    string // a run's ID, for GetRun
}

// getRun names the GetRun timing, a call's fixed cost.
const getRun = "get-run"

// sample is one operation timed on one store.
type sample struct {
	median  time.Duration
	reads   float64 // runs read per operation, with ScaleOptions.Reads
	skipped string
}

var (
	scaleOwner  = runstate.Owner{Worker: "scale-holder", Incarnation: "1"}
	scaleTaker  = runstate.Owner{Worker: "scale-taker", Incarnation: "1"}
	scaleLabels = map[string]string{"conformance": "scale"}
)

// fill creates n runs no claim may take, from 8 goroutines: leased to
// scaleOwner for MaxLeaseTTL (finished instead, without leases), and
// finished, alternately.
func (s *scaler) fill(ctx context.Context, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && errs[w] == nil; i = int(next.Add(1) - 1) {
				errs[w] = s.addHeld(ctx, i%2 == 0 && s.leases != nil)
			}
		}()
	}
	wg.Wait()
	s.created += n
	if err := errors.Join(errs...); err != nil {
		return &ScaleFailure{Operation: scaleFill, Err: fmt.Errorf("filling a store with %d runs: %w", n, err)}
	}
	return nil
}

// addHeld creates one run and leases it, or runs it to success.
func (s *scaler) addHeld(ctx context.Context, leased bool) error {
	r, err := s.st.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: workflow, Labels: scaleLabels})
	if err != nil {
		return err
	}
	if leased {
		_, err = s.leases.ClaimRun(ctx, runstate.ClaimRunParams{RunID: r.RunID, Owner: scaleOwner, TTL: runstate.MaxLeaseTTL})
		return err
	}
	r, err = s.st.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: string(runstate.StatusRunning)})
	if err != nil {
		return err
	}
	_, err = s.st.UpdateRun(ctx, runstate.UpdateRunParams{RunID: r.RunID, ExpectedVersion: r.Version, Status: string(runstate.StatusSuccess)})
	return err
}

// addClaimable creates n runs a claim may take.
func (s *scaler) addClaimable(ctx context.Context, n int) error {
	for range n {
		r, err := s.st.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: workflow, Labels: scaleLabels})
		if err != nil {
			return &ScaleFailure{Operation: scaleFill, Err: fmt.Errorf("creating a claimable run: %w", err)}
		}
		s.last = r.RunID
	}
	s.created += n
	return nil
}

// timePair times each operation opts.Samples times on each store of the
// pair. Claimable runs are added first, so that the listing finds them
// and each claim-next takes one; claimed, they join the runs no claim may
// take, a few beside the many.
func timePair(ctx context.Context, pair [2]*scaler, opts ScaleOptions) (map[string][2]sample, error) {
	out := map[string][2]sample{}
	if pair[0].leases == nil {
		skipped := sample{skipped: "the store has no leases"}
		out[ScaleClaimNext], out[ScaleListRunnable] = [2]sample{skipped, skipped}, [2]sample{skipped, skipped}
	} else {
		for _, s := range pair {
			if err := s.addClaimable(ctx, opts.Samples); err != nil {
				return nil, err
			}
		}
		var err error
		if out[ScaleListRunnable], err = timeAlternating(pair, opts, func(_ int, s *scaler) error {
			page, err := s.leases.ListRunnableRuns(ctx, runstate.ListRunnableParams{Limit: 10})
			if err == nil && len(page.Runs) == 0 {
				err = errors.New("the runnable listing is empty while claimable runs are queued")
			}
			return err
		}); err != nil {
			return nil, &ScaleFailure{Operation: ScaleListRunnable, Err: err}
		}
		if out[ScaleClaimNext], err = timeAlternating(pair, opts, func(_ int, s *scaler) error {
			_, err := s.leases.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: scaleTaker, TTL: runstate.MaxLeaseTTL})
			return err
		}); err != nil {
			return nil, &ScaleFailure{Operation: ScaleClaimNext, Err: err}
		}
	}
	for _, s := range pair {
		if s.last == "" { // no claimable run made: a store without leases
			if err := s.addClaimable(ctx, 1); err != nil {
				return nil, err
			}
		}
	}
	var err error
	if out[getRun], err = timeAlternating(pair, opts, func(_ int, s *scaler) error {
		_, err := s.st.GetRun(ctx, s.last)
		return err
	}); err != nil {
		return nil, &ScaleFailure{Operation: getRun, Err: err}
	}
	var cursors [2]string
	for i, s := range pair {
		c, err := s.cursorAt(ctx, s.created*9/10)
		if err != nil {
			return nil, &ScaleFailure{Operation: ScaleListRunsDeep, Err: fmt.Errorf("paging nine tenths into the store: %w", err)}
		}
		cursors[i] = c
	}
	out[ScaleListRunsDeep], err = timeAlternating(pair, opts, func(i int, s *scaler) error {
		page, err := s.st.ListRuns(ctx, runstate.ListRunsParams{Limit: 10, Cursor: cursors[i]})
		if err == nil && len(page.Runs) == 0 {
			err = errors.New("the page nine tenths into the store is empty")
		}
		return err
	})
	if err != nil {
		return nil, &ScaleFailure{Operation: ScaleListRunsDeep, Err: err}
	}
	return out, nil
}

// timeAlternating runs op opts.Samples times on each store of the pair,
// one store then the other, so that a change of load on the machine
// weighs on both alike, and returns each store's median duration and
// runs read per operation.
func timeAlternating(pair [2]*scaler, opts ScaleOptions, op func(i int, s *scaler) error) ([2]sample, error) {
	var durations [2][]time.Duration
	var reads [2]int64
	for range opts.Samples {
		for i, s := range pair {
			var before int64
			if opts.Reads != nil {
				before = opts.Reads()
			}
			t0 := time.Now()
			if err := op(i, s); err != nil {
				return [2]sample{}, err
			}
			durations[i] = append(durations[i], time.Since(t0))
			if opts.Reads != nil {
				reads[i] += opts.Reads() - before
			}
		}
	}
	var out [2]sample
	for i := range out {
		slices.Sort(durations[i])
		out[i] = sample{median: durations[i][len(durations[i])/2], reads: float64(reads[i]) / float64(opts.Samples)}
	}
	return out, nil
}

// cursorAt pages through ListRuns to the cursor after depth runs.
func (s *scaler) cursorAt(ctx context.Context, depth int) (string, error) {
	cursor, paged := "", 0
	for depth > 0 {
		limit := min(depth, runstate.MaxPageLimit)
		page, err := s.st.ListRuns(ctx, runstate.ListRunsParams{Limit: limit, Cursor: cursor})
		if err != nil {
			return "", err
		}
		paged += len(page.Runs)
		if page.NextCursor == "" {
			return "", fmt.Errorf("ListRuns gave no next page after %d runs, while the store holds %d", paged, s.created)
		}
		cursor, depth = page.NextCursor, depth-len(page.Runs)
	}
	return cursor, nil
}
