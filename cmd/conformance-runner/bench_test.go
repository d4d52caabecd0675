package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
)

// Small workloads: the point here is the command, not the figures.
var tinyBench = []string{"--levels", "1,2", "--duration", "100ms", "--claims", "50", "--list-runs", "300", "--recovery-runs", "40"}

var wantLabels = []string{"cas-update x1", "cas-update x2", "claim-next x1", "claim-next x2", "list-page depth=0", "list-page depth=200", "recovery runs=40",
	"end-to-end-calls x1", "end-to-end x1", "end-to-end-calls x2", "end-to-end x2"}

// bench runs the bench subcommand with the tiny workloads and JSON output.
func bench(t *testing.T, args ...string) (benchReport, string, int) {
	t.Helper()
	out, errOut, code := runCLI(t, append(append([]string{"bench", "--format", "json"}, tinyBench...), args...)...)
	var rep benchReport
	if code == exitPass || code == exitFail {
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("stdout is not a JSON report: %v\n%s", err, out)
		}
	}
	return rep, errOut, code
}

func checkMeasured(t *testing.T, s storeResult) {
	t.Helper()
	if s.Error != "" || len(s.Measurements) != len(wantLabels) {
		t.Fatalf("%s: error %q, %d measurements", s.Name, s.Error, len(s.Measurements))
	}
	for i, m := range s.Measurements {
		if m.Label() != wantLabels[i] || m.Ops <= 0 || m.PerSecond <= 0 || m.DoubleClaims != 0 {
			t.Errorf("%s: measurement %d: %+v", s.Name, i, m)
		}
	}
}

// Every kind of target is measured as the suite certifies it: a built-in
// store, a plugin process, and a store behind a gateway process.
func TestBenchMeasuresEveryKindOfTarget(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"built-in", []string{"--adapter", "badger"}},
		{"plugin", []string{"--plugin", bin(t, memoryPkg)}},
		{"gateway", []string{"--gateway", bin(t, gatewayPkg), "--config", "store=badger:{{tempdir}}/s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, errOut, code := bench(t, append(tc.args, "--references", "none")...)
			if code != exitPass || len(rep.Stores) != 1 {
				t.Fatalf("exit %d, %d stores\n%s", code, len(rep.Stores), errOut)
			}
			checkMeasured(t, rep.Stores[0])
			if rep.Stores[0].Reference {
				t.Error("the store under test is reported as a reference")
			}
		})
	}
}

// The store is measured beside the reference stores in the same run, and
// the Markdown report and the chart show them together.
func TestBenchReportsAndChartPlaceTheStoreBesideTheReferences(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	dir := t.TempDir()
	md, svg := filepath.Join(dir, "bench.md"), filepath.Join(dir, "bench.svg")
	rep, errOut, code := bench(t, "--plugin", bin(t, memoryPkg), "--markdown", md, "--chart", svg)
	if code != exitPass {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var names []string
	for _, s := range rep.Stores {
		checkMeasured(t, s)
		names = append(names, s.Name)
		if s.Reference != (s.Name != rep.Stores[0].Name) {
			t.Errorf("%s: reference=%v", s.Name, s.Reference)
		}
	}
	if len(names) != 3 || names[1] != "memory" || names[2] != "badger" {
		t.Fatalf("stores %v, want the plugin, then memory and badger", names)
	}
	if rep.Suite == "" || rep.Environment["cpus"] == "" || rep.Options.Claims != 50 {
		t.Errorf("the report is not stamped: %+v", rep)
	}
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"| workload | " + names[0] + " | memory (reference) | badger (reference) |", "](bench.svg)"}, wantLabels...) {
		if !strings.Contains(string(text), want) {
			t.Errorf("the Markdown report lacks %q:\n%s", want, text)
		}
	}
	chart, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "memory (reference)", "badger (reference)", "claim-next x2"} {
		if !strings.Contains(string(chart), want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--levels", "0"},
		{"--levels", "a,b"},
		{"--chart", "x.gif"},
		{"--references", "postgres"},
		{"--list-runs", "100"},
		{"--adapter", "memory", "--plugin", "x"},
		{"extra"},
	} {
		if _, errOut, code := runCLI(t, append([]string{"bench"}, args...)...); code != exitUsage {
			t.Errorf("bench %v: exit %d, want %d\n%s", args, code, exitUsage, errOut)
		}
	}
}

// A store holding runs is refused before the workloads write to it.
func TestBenchRefusesAStoreThatHoldsRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := badger.Open(ctx, badger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	real, err := st.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "payroll"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, errOut, code := bench(t, "--plugin", bin(t, badgerPkg), "--config", "dir="+dir, "--references", "none")
	if code != exitUsage || !strings.Contains(errOut, real.RunID) {
		t.Fatalf("exit %d, want %d naming the run\n%s", code, exitUsage, errOut)
	}
	if runs := storedRuns(t, dir); len(runs) != 1 {
		t.Fatalf("the refused store holds %d runs", len(runs))
	}
}

// The report links its chart relative to itself, so that the link
// resolves from the Markdown file, wherever the command ran.
func TestBenchChartLinkIsRelativeToTheReport(t *testing.T) {
	for _, c := range []struct{ markdown, chart, want string }{
		{"docs/perf/mysql.md", "docs/perf/mysql.svg", "mysql.svg"},
		{"report.md", "charts/a.svg", "charts/a.svg"},
		{"out/report.md", "a.png", "../a.png"},
		{"/tmp/r/report.md", "/tmp/r/c/a.svg", "c/a.svg"},
		{"report.md", "", ""},
	} {
		if got := chartLink(c.markdown, c.chart); got != c.want {
			t.Errorf("chartLink(%q, %q) = %q, want %q", c.markdown, c.chart, got, c.want)
		}
	}
}
