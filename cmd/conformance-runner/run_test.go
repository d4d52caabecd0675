package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/badger"
	"github.com/runstate/runstate/adapters/mysql/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/docs"
	"github.com/runstate/runstate/internal/testsupport/etcdcluster"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
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
	memoryPkg   = "github.com/runstate/runstate/cmd/runstate-plugin-memory"
	badgerPkg   = "github.com/runstate/runstate/cmd/runstate-plugin-badger"
	mysqlPkg    = "github.com/runstate/runstate/cmd/runstate-plugin-mysql"
	postgresPkg = "github.com/runstate/runstate/cmd/runstate-plugin-postgres"
	testPkg     = "github.com/runstate/runstate/plugin/internal/testplugin"
	gatewayPkg  = "github.com/runstate/runstate/cmd/runstate-gateway"
)

var binaries = plugintest.NewBinaries(memoryPkg, badgerPkg, mysqlPkg, postgresPkg, testPkg, gatewayPkg)

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
	err := run(context.Background(), args, &out, &errOut)
	if err != nil {
		errOut.WriteString(err.Error()) // as main prints it
	}
	return out.String(), errOut.String(), exitCode(err)
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
	t.Parallel() // its processes, databases and files are its own
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
	if !strings.Contains(out, docs.RuleURL("CAS-002")) || !strings.Contains(out, "expected ") || !strings.Contains(out, "saw ") {
		t.Errorf("failures lack their place in the spec, expectation or observation:\n%s", out)
	}
	if got, rules := summary(t, out), ruleCount(t, "CAS,FSM-001"); got[1] != 3 || got[0] != rules-3 {
		t.Errorf("summary %v, want %d passed (all but CAS-002…004) and 3 failed", got, rules-3)
	}
}

// A real linearizability failure, from a plugin process, leaves porcupine's
// visualisation of the history next to the Markdown report.
func TestALinearizabilityFailureWritesItsHistoryBesideTheReport(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "broken")
	dir := t.TempDir()
	md := filepath.Join(dir, "report.md")
	out, _, code := runCLI(t, "--plugin", bin(t, testPkg), "--run", "LIN-001", "--markdown", md)
	if code != exitFail || !strings.Contains(out, "FAIL LIN-001") {
		t.Fatalf("exit %d, want %d with LIN-001 failed\n%s", code, exitFail, out)
	}
	html, err := os.ReadFile(filepath.Join(dir, "LIN-001-history.html"))
	if err != nil || !bytes.Contains(html, []byte("<html")) {
		t.Fatalf("the history's visualisation beside the report: %v (%d bytes)", err, len(html))
	}
	if report, _ := os.ReadFile(md); !bytes.Contains(report, []byte("](LIN-001-history.html)")) {
		t.Errorf("the Markdown report does not link the history:\n%s", report)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--adapter", "oracle"}, {"--run", "NOPE-999"}, {"--format", "xml"}, {"--bogus"}, {"extra"},
		{"--adapter", "memory", "--plugin", "x"}, {"--plugin", "/no/such/plugin"}, {"--config", "novalue"},
		{"--adapter", "mysql"}, {"--adapter", "badger", "--config", "dsn=x"}, {"--adapter", "etcd"},
		{"--adapter", "memory", "--second-process"}, {"--adapter", "memory", "--kill-plugin"},
	} {
		if _, _, code := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	// Help that was asked for is the command's output: stdout, exit 0.
	if stdout, _, code := runCLI(t, "--help"); code != exitPass || !strings.Contains(stdout, "Exit codes") {
		t.Errorf("--help: exit %d\n%s", code, stdout)
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
	// All but CAP-002, which needs a second handle.
	if code != exitPass || summary(t, out)[0] != ruleCount(t, "CAS,CAP")-1 {
		t.Errorf("badger: exit %d\n%s", code, out)
	}
}

// The etcd store is certified on a cluster, each check under a prefix of
// its own.
func TestEtcdAdapter(t *testing.T) {
	endpoints, _ := etcdcluster.Require(t, t.TempDir())
	out, _, code := runCLI(t, "--adapter", "etcd", "--config", "endpoints="+strings.Join(endpoints, ","), "--run", "CAS,CAP")
	// Every CAP rule runs: the target declares a second handle and a clock.
	if code != exitPass || summary(t, out)[0] != ruleCount(t, "CAS,CAP") {
		t.Errorf("etcd: exit %d\n%s", code, out)
	}
}

// A store is certified through the gateway: every check starts a gateway
// process in front of a fresh Badger directory and reaches it over TCP.
func TestAStoreThroughAGateway(t *testing.T) {
	out, errOut, code := runCLI(t, "--gateway", bin(t, gatewayPkg), "--config", "store=badger:{{tempdir}}/s", "--run", "CAS,LEASE-002,RUN-004")
	if got := summary(t, out); code != exitPass || got[0] != ruleCount(t, "CAS,LEASE-002,RUN-004") || got[1] != 0 {
		t.Fatalf("exit %d, %v\n%s\n%s", code, got, out, errOut)
	}
	if _, errOut, code := runCLI(t, "--gateway", bin(t, gatewayPkg)); code != exitUsage || !strings.Contains(errOut, "store=") {
		t.Errorf("--gateway without a store: exit %d, %s", code, errOut)
	}
}

// A store that holds runs is refused before anything is written to it:
// it may be a real database, whose runnable runs the checks would claim.
func TestRefusesAStoreThatHoldsRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := badger.Open(ctx, badger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	real, err := st.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "payroll", Steps: []runstate.StepSpec{{Name: "pay"}}})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	_, stderr, code := runCLI(t, "--plugin", bin(t, badgerPkg), "--config", "dir="+dir)
	if code != exitUsage || !strings.Contains(stderr, real.RunID) || !strings.Contains(stderr, "no run has been created or claimed") ||
		!strings.Contains(stderr, "{{tempdir}}") || !strings.Contains(stderr, "--allow-stored-runs") {
		t.Fatalf("exit %d, want %d with a way out:\n%s", code, exitUsage, stderr)
	}
	if runs := storedRuns(t, dir); len(runs) != 1 || runs[0].Version != real.Version {
		t.Fatalf("the refused store changed: %+v", runs)
	}

	// Asked explicitly, it runs, and checks do write.
	out, _, code := runCLI(t, "--plugin", bin(t, badgerPkg), "--config", "dir="+dir, "--allow-stored-runs", "--run", "CAS-001")
	if code != exitPass {
		t.Fatalf("--allow-stored-runs: exit %d\n%s", code, out)
	}
	if runs := storedRuns(t, dir); len(runs) < 2 {
		t.Fatalf("with --allow-stored-runs the check wrote nothing: %d runs", len(runs))
	}
}

func storedRuns(t *testing.T, dir string) []runstate.RunSnapshot {
	t.Helper()
	st, err := badger.Open(context.Background(), badger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	page, err := st.ListRuns(context.Background(), runstate.ListRunsParams{Limit: runstate.MaxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	return page.Runs
}

// The docs' scratch-database example works with the reference MySQL
// plugin: each check's plugin creates its own database and drops it after.
func TestMySQLPluginOnScratchDatabases(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	srv := sqltest.MySQL.Find(t)
	prefix := fmt.Sprintf("rsconf_%d_", os.Getpid())
	// The template goes into the DSN as a user types it (FormatDSN would
	// escape its braces).
	server, _, _ := strings.Cut(srv.DSN(""), "/")
	dsn := server + "/" + prefix + "{{unique}}"
	out, stderr, code := runCLI(t, "--plugin", bin(t, mysqlPkg), "--config", "dsn="+dsn,
		"--config", "scratch_database=true", "--config", "max_open_conns=8", "--run", "FSM,CAS,LEASE-001")
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	if left := databases(t, srv, prefix); len(left) > 0 {
		t.Errorf("scratch databases left behind: %v", left)
	}

	// A scratch database that exists already is refused as configuration.
	existing, err := srv.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.DropDatabase(context.Background(), existing)
	_, stderr, code = runCLI(t, "--plugin", bin(t, mysqlPkg), "--config", "dsn="+server+"/"+existing, "--config", "scratch_database=true")
	if code != exitUsage || !strings.Contains(stderr, "exists") {
		t.Errorf("scratch_database on an existing database: exit %d, want %d\n%s", code, exitUsage, stderr)
	}
	if !slices.Contains(databases(t, srv, existing), existing) {
		t.Errorf("the existing database %s was dropped", existing)
	}

	// Without scratch_database the missing database is a configuration
	// error, named as such.
	_, stderr, code = runCLI(t, "--plugin", bin(t, mysqlPkg), "--config", "dsn="+dsn, "--run", "CAS-001")
	if code != exitUsage || !strings.Contains(stderr, "does not exist") {
		t.Errorf("a missing database: exit %d\n%s", code, stderr)
	}
}

// The template gives every check its own value.
func TestTemplatesAreFreshForEveryCheck(t *testing.T) {
	config := templated(map[string]string{"dsn": "u@tcp(h:3306)/runs_{{unique}}", "dir": "{{tempdir}}/db"})
	seen := map[string]bool{}
	for range 3 {
		c, cleanup, err := config(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(c["dsn"], "{{") || strings.Contains(c["dir"], "{{") || seen[c["dsn"]] || seen[c["dir"]] {
			t.Fatalf("not expanded afresh: %v", c)
		}
		seen[c["dsn"]], seen[c["dir"]] = true, true
		cleanup()
		if _, err := os.Stat(filepath.Dir(c["dir"])); !os.IsNotExist(err) {
			t.Errorf("the check's directory %s outlived it: %v", filepath.Dir(c["dir"]), err)
		}
	}
}

func databases(t *testing.T, srv *scratch.Server, prefix string) []string {
	t.Helper()
	db, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE ?", prefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Files a check made to explain a failure are written beside the reports
// and linked from them.
func TestAttachmentsAreWrittenBesideTheReports(t *testing.T) {
	dir := t.TempDir()
	rule, skipped := conformance.Rules()[0], conformance.Rules()[1]
	rep := report{Results: []conformance.Result{{Rule: rule, Outcome: conformance.Fail,
		Failures:    []conformance.Failure{{Rule: rule.ID, Expected: "x", Seen: "y"}},
		Attachments: []conformance.Attachment{{Name: "history.html", Data: []byte("<html>")}}},
		{Rule: skipped, Outcome: conformance.Skip, Detail: "needs capability second_handle"}}}
	rep.Counts = tally(rep.Results)
	o := options{markdown: filepath.Join(dir, "report.md")}
	if err := writeAttachments(o, rep.Results); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, rule.ID+"-history.html")
	if data, err := os.ReadFile(want); err != nil || string(data) != "<html>" || rep.Results[0].Attachments[0].Path != want {
		t.Fatalf("attachment at %q: %q, %v", rep.Results[0].Attachments[0].Path, data, err)
	}
	var text bytes.Buffer
	if err := writeReports(&text, o, rep); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(o.markdown)
	if !strings.Contains(string(md), "]("+rule.ID+"-history.html)") || !strings.Contains(text.String(), want) {
		t.Errorf("reports do not point at the attachment:\n%s\n%s", md, text.String())
	}
	if !strings.Contains(string(md), "]("+rule.URL+")") || !strings.Contains(rule.URL, "#"+strings.ToLower(rule.ID)) {
		t.Errorf("the Markdown report does not link %s by its anchor (%s):\n%s", rule.ID, rule.URL, md)
	}
	if !strings.Contains(string(md), "| skip | "+skipped.Statement+" | needs capability second_handle |") ||
		!strings.Contains(text.String(), "SKIP "+skipped.ID+" — needs capability second_handle") {
		t.Errorf("the reports do not say why %s was skipped:\n%s\n%s", skipped.ID, md, text.String())
	}
}

func TestCommandLineConventions(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"bench", "--help"}} {
		out, _, code := runCLI(t, args...)
		if code != exitPass || !strings.Contains(out, "Examples:\n  conformance-runner") || !strings.Contains(out, "--adapter") {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
	}
	if out, _, code := runCLI(t, "completion", "bash"); code != exitPass || !strings.Contains(out, "conformance-runner") {
		t.Errorf("completion bash: exit %d", code)
	}
	// Flags in any order; every outcome counted, zeros too; durations in seconds.
	out, stderr, code := runCLI(t, "--format", "json", "--run", "LEASE-001", "--adapter", "memory")
	if code != exitPass {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var raw struct {
		Counts  map[string]int   `json:"counts"`
		Seconds *float64         `json:"duration_seconds"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Counts) != 4 || raw.Counts["fail"] != 0 || raw.Counts["pass"] != 1 {
		t.Errorf("counts %v, want pass, fail, skip and error, zeros included", raw.Counts)
	}
	if raw.Seconds == nil || *raw.Seconds <= 0 || *raw.Seconds > 600 || raw.Results[0]["duration_seconds"] == nil || strings.Contains(out, `"duration":`) {
		t.Errorf("durations are not in seconds:\n%s", out)
	}
}

// A DSN in a file stays out of the process list and out of the report.
func TestConfigFromAFile(t *testing.T) {
	srv := sqltest.MySQL.Find(t)
	server, _, _ := strings.Cut(srv.DSN(""), "/")
	file := filepath.Join(t.TempDir(), "conformance.conf")
	if err := os.WriteFile(file, []byte("# the test server\ndsn="+server+"/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCLI(t, "--adapter", "mysql", "--config-file", file, "--run", "CAS-001", "--format", "json")
	if code != exitPass {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Config["dsn"] != "<redacted>" {
		t.Errorf("the report's config: %v (%v)", rep.Config, err)
	}
	if _, stderr, code := runCLI(t, "--adapter", "mysql", "--config-file", filepath.Join(t.TempDir(), "missing")); code != exitUsage || !strings.Contains(stderr, "--config-file") {
		t.Errorf("a missing file: exit %d %s", code, stderr)
	}
}

// The built-in PostgreSQL target and the PostgreSQL plugin give the same
// verdict on the same rules, each check on a schema of its own.
func TestPostgresInProcessAndAsAPlugin(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	srv := sqltest.Postgres.Find(t)
	rules := "CAS,LEASE-002,LIN-001"
	in, stderr, code := runCLI(t, "--adapter", "postgres", "--config", "dsn="+srv.DSN(), "--run", rules, "--format", "json")
	if code != exitPass {
		t.Fatalf("--adapter postgres: exit %d\n%s", code, stderr)
	}
	out, stderr, code := runCLI(t, "--plugin", binaries.Path(t, postgresPkg), "--config", "dsn="+srv.DSN(),
		"--config", "schema=runs_{{unique}}", "--config", "scratch_schema=true", "--run", rules, "--format", "json")
	if code != exitPass {
		t.Fatalf("the postgres plugin: exit %d\n%s", code, stderr)
	}
	verdicts := func(raw string) map[string]string {
		var rep report
		if err := json.Unmarshal([]byte(raw), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Config["dsn"] != "<redacted>" {
			t.Errorf("the report shows the DSN: %v", rep.Config)
		}
		v := map[string]string{}
		for _, r := range rep.Results {
			v[r.Rule.ID] = string(r.Outcome)
		}
		return v
	}
	if a, b := verdicts(in), verdicts(out); len(a) < 6 || !maps.Equal(a, b) {
		t.Errorf("in-process %v, as a plugin %v: want the same verdicts", a, b)
	}
}

// ruleCount is how many rules a --run selection names.
func ruleCount(t *testing.T, selection string) int {
	t.Helper()
	rules, err := conformance.Select(strings.Split(selection, ","), nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(rules)
}
