package main

import (
	"encoding/xml"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/rulecov"
	"github.com/runstate/runstate/internal/testsupport/gocmd"
)

// fence is one fenced block of a Markdown document.
type fence struct{ lang, body string }

var fenceRE = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```$")

func fences(md string) []fence {
	var out []fence
	for _, m := range fenceRE.FindAllStringSubmatch(md, -1) {
		out = append(out, fence{m[1], m[2]})
	}
	return out
}

// TestIntegratorsGuideAsWritten follows docs/integrators.md literally, in a
// fresh module outside this repository: its shell blocks run in order in
// one shell, its Go files are written where their first line says, and the
// runner it ends with must print the summary and the skip lines the guide
// shows. The guide says every file of the module is on the page but the
// store, which it copies whole from examples/filestore: the module must
// hold exactly those files, the copy unchanged.
func TestIntegratorsGuideAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a separate module and sleeps through real lease TTLs")
	}
	t.Parallel() // a module and processes of its own; it waits on them most of its minutes
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join(repo, "docs", "integrators.md"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(repo, "examples", "filestore", "filestore.go"))
	if err != nil {
		t.Fatal(err)
	}
	pluginTests, err := os.ReadFile(filepath.Join(repo, "plugin", "plugin_test.go"))
	if err != nil {
		t.Fatal(err)
	}

	// The guide's first block says where the checkout is: under $HOME. A
	// home of the test's own holds it, as a link to this repository; Go
	// keeps its caches where they are.
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(repo, filepath.Join(home, "src", "runstate")); err != nil {
		t.Fatal(err)
	}
	script := []string{"set -euo pipefail"}
	wantSummary := ""
	var wantLines []string
	// The files the guide writes, and the one it copies whole.
	const copied = "filestore/filestore.go"
	files := map[string]bool{copied: true}
	for _, f := range fences(string(guide)) {
		first, _, _ := strings.Cut(f.body, "\n")
		switch {
		case f.lang == "sh":
			script = append(script, f.body)
		case f.lang == "go" && strings.HasPrefix(first, "// ") && strings.HasSuffix(first, ".go"):
			path := strings.TrimPrefix(first, "// ")
			files[path] = true
			script = append(script, "mkdir -p "+filepath.Dir(path)+"\ncat > "+path+" <<'GUIDE_EOF'\n"+f.body+"GUIDE_EOF")
		case f.lang == "go" && strings.HasPrefix(first, "func Test"):
			// How this repository certifies its plugins: quoted from its tests.
			if !strings.Contains(string(pluginTests), f.body) {
				t.Errorf("the guide quotes a test that plugin/plugin_test.go does not have:\n%s", f.body)
			}
		case f.lang == "go":
			if !strings.Contains(string(example), f.body) {
				t.Errorf("the guide quotes code that examples/filestore/filestore.go does not have:\n%s", f.body)
			}
		case f.lang == "text" && summaryLine.MatchString(f.body):
			wantSummary = summaryLine.FindString(f.body)
		case f.lang == "text" && strings.HasPrefix(f.body, "  SKIP "):
			wantLines = append(wantLines, strings.TrimSuffix(f.body, "\n"))
		}
	}
	if wantSummary == "" {
		t.Fatal("the guide shows no summary line to expect")
	}
	if !strings.Contains(string(guide), `cp "$RUNSTATE/examples/filestore/filestore.go" filestore/`) {
		t.Fatal("the guide no longer copies the example store whole: update the files this test expects")
	}

	cmd := exec.Command("bash", "-c", strings.Join(script, "\n"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(gocmd.Env(), "HOME="+home) // a user's shell: no GOMAXPROCS of make test's
	for _, v := range []string{"GOPATH", "GOCACHE", "GOMODCACHE", "GOENV"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, v+"="+strings.TrimSpace(string(out)))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("following the guide failed: %v\n%s", err, out)
	}
	if got := summaryLine.FindString(string(out)); got != wantSummary {
		t.Fatalf("the guide promises %q; the runner printed %q\n%s", wantSummary, got, out)
	}
	for _, line := range wantLines {
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("the guide shows the line\n%s\nwhich the runner did not print:\n%s", line, out)
		}
	}
	module := filepath.Join(cmd.Dir, "mystore")
	err = filepath.WalkDir(module, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" {
			return err
		}
		rel, err := filepath.Rel(module, path)
		if err == nil && !files[filepath.ToSlash(rel)] {
			t.Errorf("the module holds %s, which the guide neither shows nor copies", rel)
		}
		delete(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for path := range files {
		t.Errorf("the guide writes or copies %s, which the module does not hold", path)
	}
	if got, err := os.ReadFile(filepath.Join(module, copied)); err != nil || string(got) != string(example) {
		t.Errorf("%s is not the example copied whole: %v", copied, err)
	}
	logGuideCoverage(t, filepath.Join(module, "report.xml"), string(out))
	md, err := os.ReadFile(filepath.Join(cmd.Dir, "mystore", "report.md"))
	if err != nil || !strings.Contains(string(md), "]("+conformance.Rules()[0].URL+")") {
		t.Errorf("the Markdown report the guide asks for is missing or does not link rules by anchor: %v", err)
	}
}

// logGuideCoverage records the rules the guide's runs proved
// (internal/rulecov): the first run's from its JUnit report, and the
// FAULT run's, which writes none, from its text: every FAULT rule passed
// but those it lists as skipped, as its summary counts no failure.
func logGuideCoverage(t *testing.T, junitPath, out string) {
	t.Helper()
	if !rulecov.Enabled() {
		return
	}
	data, err := os.ReadFile(junitPath)
	if err != nil {
		t.Fatalf("the guide's JUnit report: %v", err)
	}
	var suites junitSuites
	if err := xml.Unmarshal(data, &suites); err != nil {
		t.Fatalf("the guide's JUnit report: %v", err)
	}
	var target, caps string
	for _, p := range suites.Properties {
		switch p.Name {
		case "adapter":
			target = p.Value
		case "capabilities":
			caps = p.Value
		}
	}
	clock := rulecov.ClockOf(strings.Contains(caps, "controlled_clock=true"))
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			id, _, _ := strings.Cut(c.Name, " ")
			outcome := conformance.Pass
			switch {
			case c.Failure != nil:
				outcome = conformance.Fail
			case c.Error != nil:
				outcome = conformance.Error
			case c.Skipped != nil:
				outcome = conformance.Skip
			}
			rulecov.Log(t, rulecov.Entry{Rule: id, Target: target, Clock: clock, Path: rulecov.PathGuide, Outcome: string(outcome)})
		}
	}
	summaries := summaryLine.FindAllStringIndex(out, -1)
	if len(summaries) < 2 {
		t.Fatalf("the guide's FAULT run printed no summary:\n%s", out)
	}
	faultRun := out[summaries[0][1]:summaries[1][1]]
	if got := summary(t, faultRun); got[1]+got[3] > 0 {
		t.Fatalf("the guide's FAULT run failed: %v", got)
	}
	for _, r := range conformance.Rules() {
		if r.Area != "FAULT" {
			continue
		}
		outcome := conformance.Pass
		if strings.Contains(faultRun, "  SKIP "+r.ID+" ") {
			outcome = conformance.Skip
		}
		rulecov.Log(t, rulecov.Entry{Rule: r.ID, Target: target, Clock: clock, Faults: []string{"restart"}, Path: rulecov.PathGuide, Outcome: string(outcome)})
	}
}
