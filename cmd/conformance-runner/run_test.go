package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/plugin/plugintest"
)

func exitCode(err error) int {
	var e exitError
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return exitHarness
	}
	return exitPass
}

const (
	memoryPkg = "github.com/runstate/runstate/cmd/runstate-plugin-memory"
	testPkg   = "github.com/runstate/runstate/plugin/internal/testplugin"
)

var binaries = plugintest.NewBinaries(memoryPkg, testPkg)

func bin(t *testing.T, pkg string) string { return binaries.Path(t, pkg) }

func TestMain(m *testing.M) {
	code := m.Run()
	binaries.Cleanup()
	os.Exit(code)
}

// runCLI runs the command and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := exitCode(run(context.Background(), args, &out, &errOut))
	return out.String(), errOut.String(), code
}

var summaryLine = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed, (\d+) skipped, (\d+) errors`)

// summary reads the human report's closing line.
func summary(t *testing.T, text string) [4]int {
	t.Helper()
	m := summaryLine.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no summary line in:\n%s", text)
	}
	var out [4]int
	for i := range out {
		out[i], _ = strconv.Atoi(m[i+1])
	}
	return out
}

func TestMemoryPluginPassesAndReportsAgree(t *testing.T) {
	dir := t.TempDir()
	junitPath, mdPath := filepath.Join(dir, "report.xml"), filepath.Join(dir, "report.md")
	path := bin(t, memoryPkg)

	text, _, code := runCLI(t, "--plugin", path, "--run", "FSM,CAS,LEASE-001,CAP")
	if code != exitPass {
		t.Fatalf("exit %d\n%s", code, text)
	}
	human := summary(t, text)

	out, stderr, code := runCLI(t, "--plugin", path, "--run", "FSM,CAS,LEASE-001,CAP", "--format", "json", "--junit", junitPath, "--markdown", mdPath,
		"--config", "token=not-for-reports")
	if code != exitPass {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, out)
	}
	if got := [4]int{rep.Counts[conformance.Pass], rep.Counts[conformance.Fail], rep.Counts[conformance.Skip], rep.Counts[conformance.Error]}; got != human {
		t.Errorf("JSON counts %v, human summary %v", got, human)
	}
	if rep.Adapter == "" || rep.StoreVersion == "" || rep.Suite != conformance.Version || rep.Environment["go"] == "" || !rep.Capabilities.Leases {
		t.Errorf("report not stamped: %+v", rep)
	}
	if rep.Config["token"] != "<redacted>" || strings.Contains(out, "not-for-reports") {
		t.Errorf("a secret reached the report: %v", rep.Config)
	}

	raw, err := os.ReadFile(junitPath)
	if err != nil {
		t.Fatal(err)
	}
	var ju junitSuites
	if err := xml.Unmarshal(raw, &ju); err != nil {
		t.Fatalf("JUnit report does not parse: %v", err)
	}
	cases, failed, skipped := 0, 0, 0
	for _, s := range ju.Suites {
		for _, c := range s.Cases {
			cases++
			if c.Failure != nil || c.Error != nil {
				failed++
			}
			if c.Skipped != nil {
				skipped++
			}
		}
	}
	if cases != human[0]+human[1]+human[2]+human[3] || failed != human[1]+human[3] || skipped != human[2] || ju.Tests != cases {
		t.Errorf("JUnit: %d cases, %d failed, %d skipped; human summary %v", cases, failed, skipped, human)
	}
	md, err := os.ReadFile(mdPath)
	if err != nil || !strings.Contains(string(md), summaryLine.FindString(text)) {
		t.Errorf("Markdown report lacks the summary %q (%v)", summaryLine.FindString(text), err)
	}
}

func TestBrokenPluginFailsNamingRules(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "broken")
	out, _, code := runCLI(t, "--plugin", bin(t, testPkg), "--run", "CAS,FSM-001")
	if code != exitFail {
		t.Fatalf("exit %d, want %d\n%s", code, exitFail, out)
	}
	for _, id := range []string{"FAIL CAS-002", "FAIL CAS-003", "FAIL CAS-004"} {
		if !strings.Contains(out, id) {
			t.Errorf("the report does not name %s:\n%s", id, out)
		}
	}
	if !strings.Contains(out, "docs/spec.md:") || !strings.Contains(out, "expected ") || !strings.Contains(out, "saw ") {
		t.Errorf("failures lack their place in the spec, expectation or observation:\n%s", out)
	}
	if got := summary(t, out); got[1] != 3 || got[0] != 2 {
		t.Errorf("summary %v, want 2 passed (CAS-001, FSM-001) and 3 failed", got)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--adapter", "oracle"}, {"--run", "NOPE-999"}, {"--format", "xml"}, {"--bogus"}, {"extra"},
		{"--adapter", "memory", "--plugin", "x"}, {"--plugin", "/no/such/plugin"}, {"--config", "novalue"},
		{"--adapter", "mysql"}, {"--adapter", "badger", "--config", "dsn=x"},
	} {
		if _, _, code := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if _, stderr, code := runCLI(t, "--help"); code != exitPass || !strings.Contains(stderr, "Exit codes") {
		t.Errorf("--help: exit %d\n%s", code, stderr)
	}
}

func TestPluginCrashingAtStartIsAHarnessError(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "crash")
	_, _, code := runCLI(t, "--plugin", bin(t, testPkg))
	if code != exitHarness {
		t.Fatalf("exit %d, want %d", code, exitHarness)
	}
}

func TestListRules(t *testing.T) {
	out, _, code := runCLI(t, "--list-rules")
	if code != exitPass || strings.Count(out, "\n") != len(conformance.Rules()) {
		t.Errorf("exit %d, %d lines for %d rules", code, strings.Count(out, "\n"), len(conformance.Rules()))
	}
}

func TestBuiltInAdapters(t *testing.T) {
	out, _, code := runCLI(t, "--adapter", "badger", "--run", "CAS,CAP")
	if code != exitPass || summary(t, out)[0] != 6 {
		t.Errorf("badger: exit %d\n%s", code, out)
	}
}

// The out-of-tree example, built from its own module as a third party
// would build it, passes the whole suite through the command.
func TestExampleStorePasses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a separate module and sleeps through real lease TTLs")
	}
	path := filepath.Join(t.TempDir(), "runstate-plugin-filestore")
	build := exec.Command("go", "build", "-o", path, "./cmd/runstate-plugin-filestore")
	build.Dir = filepath.Join("..", "..", "examples", "filestore")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	out, _, code := runCLI(t, "--plugin", path, "--config", "path={{tempdir}}/runs.json")
	if code != exitPass {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if got := summary(t, out); got[1] != 0 || got[3] != 0 || got[0] < len(conformance.Rules())-2 {
		t.Fatalf("summary %v", got)
	}
}
