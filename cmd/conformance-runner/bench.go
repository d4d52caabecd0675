package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runstate/runstate/adapters/badger/badgertest"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/perf"
	"github.com/runstate/runstate/internal/cli"
	"github.com/spf13/cobra"
)

const benchLong = `bench measures a store with fixed workloads, beside the reference stores measured in
the same run on the same machine.

The store is named as for certification (conformance-runner --help); it must start empty, and
every workload level gets a fresh one. Workloads (docs/performance.md):
  cas-update   compare-and-set transitions, each writer on its own run, at each --levels
  claim-next   workers claiming --claims runs from a fuller queue, at each --levels; a run
               handed to two workers is counted, and any fails the bench (exit 1)
  list-page    a page of 100 runs at the start and nine tenths deep into --list-runs runs
  recovery     one recovery pass over --recovery-runs runs left running by a crashed runner
  end-to-end   --claims runs enqueued, then a worker pool of --levels slots claims as many
               as it has free slots in one call, started in the claim, and completes each
               (releasing its lease in the same write; a slot is free for the next claim
               while its completion commits); beside it end-to-end-calls, the same work
               one call per transition

Output: a table (or --format json) on stdout, progress on stderr, and optionally a Markdown
report and a chart (SVG or PNG, by the file's extension).

Exit codes: 0 measured, 1 a store handed a run to two workers, 2 usage error or a store
that holds runs, 3 the harness broke (a store could not be started or an operation failed).`

type benchOptions struct {
	options
	references      listFlag
	levels          string
	markdown, chart string
	perf            perf.Options
}

func newBenchCommand() *cobra.Command {
	o := &benchOptions{options: options{config: configFlag{}, realClock: true}}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a store beside the reference stores",
		Long:  benchLong,
		Example: `  conformance-runner bench --adapter badger --chart badger.svg
  conformance-runner bench --plugin ./runstate-plugin-badger --config dir={{tempdir}} --markdown perf.md
  conformance-runner bench --adapter memory --levels 1,8 --duration 500ms --references none`,
		Args:    cli.ExactArgs(),
		PreRunE: func(*cobra.Command, []string) error { return o.check() },
		RunE: func(c *cobra.Command, _ []string) error {
			return runBench(c.Context(), *o, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	addTargetFlags(fs, &o.options)
	fs.Var(&o.references, "references", "reference stores measured beside it: memory, badger, or none (default memory,badger)")
	fs.StringVar(&o.levels, "levels", "1,8,32", "writer and worker counts of cas-update and claim-next, and slots of end-to-end")
	fs.DurationVar(&o.perf.Duration, "duration", 2*time.Second, "how long each cas-update level runs")
	fs.IntVar(&o.perf.Claims, "claims", 2000, "claims per claim-next level, and runs per end-to-end level")
	fs.IntVar(&o.perf.ListRuns, "list-runs", 10000, "runs the list-page workload stores")
	fs.IntVar(&o.perf.RecoveryRuns, "recovery-runs", 10000, "runs the recovery workload settles")
	fs.StringVar(&o.format, "format", "text", "stdout format: text or json")
	fs.StringVar(&o.markdown, "markdown", "", "also write a Markdown report to this file")
	fs.StringVar(&o.chart, "chart", "", "also draw the stores side by side into this .svg or .png file")
	return cmd
}

// check checks bench's flags before anything starts.
func (o *benchOptions) check() error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format %q: want text or json", o.format)
	}
	for _, l := range strings.Split(o.levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || n < 1 {
			return usageError("--levels %q: want positive counts, e.g. 1,8,32", o.levels)
		}
		o.perf.Levels = append(o.perf.Levels, n)
	}
	if o.perf.Claims < 1 || o.perf.ListRuns < 2*100 || o.perf.RecoveryRuns < 1 || o.perf.Duration <= 0 {
		return usageError("--claims, --recovery-runs and --duration must be positive, and --list-runs at least 200 (two pages)")
	}
	if o.chart != "" && !strings.HasSuffix(o.chart, ".svg") && !strings.HasSuffix(o.chart, ".png") {
		return usageError("--chart %q: name an .svg or .png file", o.chart)
	}
	if len(o.references) == 0 {
		o.references = listFlag{"memory", "badger"}
	}
	if slices.Equal(o.references, listFlag{"none"}) {
		o.references = nil
	}
	for _, r := range o.references {
		if r != "memory" && r != "badger" {
			return usageError("--references %q: want memory, badger or none", r)
		}
	}
	return o.checkTarget()
}

// benchReport is one bench run, stamped like the conformance report.
type benchReport struct {
	Suite       string            `json:"suite_version"`
	Adapter     string            `json:"adapter"`
	Config      map[string]string `json:"config,omitempty"`
	Environment map[string]string `json:"environment"`
	Options     benchSettings     `json:"options"`
	Started     time.Time         `json:"started"`
	Duration    time.Duration     `json:"-"` // duration_seconds in JSON
	Stores      []storeResult     `json:"stores"`
}

type benchSettings struct {
	Levels       []int         `json:"levels"`
	CASDuration  time.Duration `json:"-"` // cas_duration_seconds in JSON
	Claims       int           `json:"claims"`
	ListRuns     int           `json:"list_runs"`
	RecoveryRuns int           `json:"recovery_runs"`
}

// MarshalJSON writes the duration in seconds, as every duration runstate
// prints.
func (r benchReport) MarshalJSON() ([]byte, error) {
	type fields benchReport
	return json.Marshal(struct {
		fields
		DurationSeconds float64 `json:"duration_seconds"`
	}{fields(r), r.Duration.Seconds()})
}

// MarshalJSON writes the duration in seconds, as every duration runstate
// prints.
func (s benchSettings) MarshalJSON() ([]byte, error) {
	type fields benchSettings
	return json.Marshal(struct {
		fields
		CASDurationSeconds float64 `json:"cas_duration_seconds"`
	}{fields(s), s.CASDuration.Seconds()})
}

// measured is a store a bench measures: the one under test, or a reference.
type measured struct {
	target    conformance.Target
	reference bool
}

// referenceTargets are the reference stores --references names, but the
// store under test itself; remove deletes the directories they made.
func (o benchOptions) referenceTargets(target conformance.Target) (refs []measured, remove func(), err error) {
	var dirs []string
	remove = func() {
		for _, d := range dirs {
			os.RemoveAll(d)
		}
	}
	for _, r := range o.references {
		if r == target.Name && o.adapter != "" {
			continue // the store is itself this reference
		}
		ref := memorytest.Target(false)
		if r == "badger" {
			dir, err := os.MkdirTemp("", "runstate-bench-*")
			if err != nil {
				remove()
				return nil, nil, exitError{Code: exitHarness, Msg: err.Error()}
			}
			dirs = append(dirs, dir)
			ref = badgertest.Target(dir, false)
		}
		refs = append(refs, measured{ref, true})
	}
	return refs, remove, nil
}

// storeResult is one store's measurements.
type storeResult struct {
	Name         string             `json:"name"`
	StoreVersion string             `json:"version"`
	Reference    bool               `json:"reference"`
	Measurements []perf.Measurement `json:"measurements"`
	Error        string             `json:"error,omitempty"`
}

func runBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	target, cleanup, err := o.target(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := conformance.CheckEmpty(ctx, target); errors.Is(err, conformance.ErrStoreNotEmpty) {
		return usageError("refusing to measure %s: %v.\nThe workloads create and claim runs, so they need an empty store; "+
			"point it at a scratch place, e.g. --config dir={{tempdir}}", target.Name, err)
	} else if err != nil {
		return exitError{Code: exitHarness, Msg: fmt.Sprintf("cannot open the store: %v", err)}
	}
	env := environment()
	env["cpus"] = strconv.Itoa(runtime.NumCPU())
	rep := benchReport{Suite: conformance.Version, Adapter: target.Name, Config: o.reportedConfig(), Environment: env,
		Options: benchSettings{Levels: o.perf.Levels, CASDuration: o.perf.Duration, Claims: o.perf.Claims,
			ListRuns: o.perf.ListRuns, RecoveryRuns: o.perf.RecoveryRuns},
		Started: time.Now().UTC()}
	refs, removeRefs, err := o.referenceTargets(target)
	if err != nil {
		return err
	}
	defer removeRefs()
	all := append([]measured{{target, false}}, refs...)
	var failure error
	for _, m := range all {
		opts := o.perf
		name := m.target.Name
		opts.Progress = func(what string) { fmt.Fprintf(stderr, "%s: %s\n", name, what) }
		ms, err := perf.Run(ctx, m.target, opts)
		res := storeResult{Name: name, StoreVersion: m.target.StoreVersion, Reference: m.reference, Measurements: ms}
		if err != nil {
			res.Error = err.Error()
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			code := exitHarness
			if errors.Is(err, perf.ErrDoubleClaim) {
				code = exitFail
			}
			if failure == nil {
				failure = exitError{Code: code, Msg: fmt.Sprintf("%s: %v", name, err)}
			}
		}
		rep.Stores = append(rep.Stores, res)
	}
	rep.Duration = time.Since(rep.Started)
	if err := writeBenchReports(stdout, o, rep); err != nil {
		return exitError{Code: exitHarness, Msg: err.Error()}
	}
	return failure
}

func writeBenchReports(stdout io.Writer, o benchOptions, rep benchReport) error {
	if o.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeBenchText(stdout, rep)
	}
	if o.markdown != "" {
		f, err := os.Create(o.markdown)
		if err != nil {
			return err
		}
		writeBenchMarkdown(f, rep, chartLink(o.markdown, o.chart))
		if err := f.Close(); err != nil {
			return err
		}
	}
	if o.chart != "" {
		return drawChart(o.chart, rep)
	}
	return nil
}

// chartLink is the chart's path as the Markdown report at markdown links
// it: relative to the report's directory, so that the link resolves
// wherever the report is read from, not only from the working directory.
func chartLink(markdown, chart string) string {
	if chart == "" {
		return ""
	}
	from, err1 := filepath.Abs(filepath.Dir(markdown))
	to, err2 := filepath.Abs(chart)
	if err1 != nil || err2 != nil {
		return filepath.ToSlash(chart)
	}
	rel, err := filepath.Rel(from, to)
	if err != nil {
		return filepath.ToSlash(to)
	}
	return filepath.ToSlash(rel)
}

// rows are the measurement labels in workload order, across stores.
func (r benchReport) rows() []string {
	var labels []string
	for _, s := range r.Stores {
		for _, m := range s.Measurements {
			if !slices.Contains(labels, m.Label()) {
				labels = append(labels, m.Label())
			}
		}
	}
	return labels
}

func (s storeResult) find(label string) (perf.Measurement, bool) {
	for _, m := range s.Measurements {
		if m.Label() == label {
			return m, true
		}
	}
	return perf.Measurement{}, false
}

// cell is one store's figure for one row: rate and latencies.
func cell(m perf.Measurement, ok bool) string {
	switch {
	case !ok:
		return "—"
	case m.Skipped != "":
		return "skipped: " + m.Skipped
	case m.Workload == perf.Recovery:
		return fmt.Sprintf("%.0f runs/s (%.2fs)", m.PerSecond, m.Seconds)
	}
	s := fmt.Sprintf("%.0f/s p50 %s p99 %s", m.PerSecond, roundLatency(m.P50), roundLatency(m.P99))
	if m.DoubleClaims > 0 {
		s += fmt.Sprintf(" DOUBLE CLAIMS %d", m.DoubleClaims)
	}
	return s
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= 100*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}

func writeBenchText(w io.Writer, r benchReport) {
	fmt.Fprintf(w, "runstate bench %s: %s, %s/%s, %s CPUs, %s\n\n", r.Suite, r.Adapter, r.Environment["os"], r.Environment["arch"],
		r.Environment["cpus"], r.Environment["go"])
	for _, label := range r.rows() {
		fmt.Fprintf(w, "%s\n", label)
		for _, s := range r.Stores {
			m, ok := s.find(label)
			fmt.Fprintf(w, "  %-14s %s\n", s.Name, cell(m, ok))
		}
	}
	for _, s := range r.Stores {
		if s.Error != "" {
			fmt.Fprintf(w, "\n%s: %s\n", s.Name, s.Error)
		}
	}
	fmt.Fprintf(w, "\nmeasured in %v\n", r.Duration.Round(time.Second))
}

func writeBenchMarkdown(w io.Writer, r benchReport, chart string) {
	fmt.Fprintf(w, "# runstate bench report\n\n| | |\n| --- | --- |\n| suite | %s |\n| store | %s |\n", r.Suite, r.Adapter)
	for _, k := range sortedKeys(r.Config) {
		fmt.Fprintf(w, "| config %s | `%s` |\n", k, r.Config[k])
	}
	for _, k := range sortedKeys(r.Environment) {
		fmt.Fprintf(w, "| %s | %s |\n", k, r.Environment[k])
	}
	o := r.Options
	fmt.Fprintf(w, "| levels | %v |\n| cas-update per level | %v |\n| claims per level | %d |\n| list-page runs | %d |\n| recovery runs | %d |\n",
		o.Levels, o.CASDuration, o.Claims, o.ListRuns, o.RecoveryRuns)
	fmt.Fprintf(w, "| started | %s |\n| duration | %v |\n\n", r.Started.Format(time.RFC3339), r.Duration.Round(time.Second))
	if chart != "" {
		fmt.Fprintf(w, "![operations per second, by store](%s)\n\n", chart)
	}
	fmt.Fprintf(w, "| workload |")
	for _, s := range r.Stores {
		name := s.Name
		if s.Reference {
			name += " (reference)"
		}
		fmt.Fprintf(w, " %s |", name)
	}
	fmt.Fprintf(w, "\n| --- |%s\n", strings.Repeat(" --- |", len(r.Stores)))
	for _, label := range r.rows() {
		fmt.Fprintf(w, "| %s |", label)
		for _, s := range r.Stores {
			m, ok := s.find(label)
			fmt.Fprintf(w, " %s |", cell(m, ok))
		}
		fmt.Fprintln(w)
	}
	for _, s := range r.Stores {
		if s.Error != "" {
			fmt.Fprintf(w, "\n**%s:** %s\n", s.Name, s.Error)
		}
	}
}
