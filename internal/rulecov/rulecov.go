// Package rulecov records which conformance rules a test ran, against
// which target and in which clock mode, as lines in the test's output, so
// that make test's JSON output can be read back into a coverage table
// (internal/cmd/testreport): for every rule, the stores, clock modes and
// paths (in-process, plugin, gateway, …) that proved it.
//
// It records only when RUNSTATE_RULE_COVERAGE is set, as make test sets
// it: a store author's go test -v stays as it was.
package rulecov

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// EnvVar turns recording on when set to anything but "" or "0".
const EnvVar = "RUNSTATE_RULE_COVERAGE"

// marker starts every recorded line; what follows it is an Entry in JSON.
const marker = "runstate-rule-coverage "

// Clock modes.
const (
	Controlled = "controlled"
	Real       = "real"
)

// Paths a rule reaches a store by, besides in-process (Path ""): set by
// tests that run the rules through a program of their own, where the
// target's name does not say it.
const (
	PathMatrix = "matrix" // a cell of internal/compat's version matrix
	PathNode   = "node"   // the Node.js plugin of examples/node-plugin
	PathGuide  = "guide"  // docs/integrators.md followed as written
	PathRunner = "runner" // conformance-runner's own tests
)

// Entry is one rule run against one target.
type Entry struct {
	Rule string `json:"rule"`
	// Target is the target's name as reports give it: "memory",
	// "badger (plugin process)", "postgres (through a gateway process)".
	Target string `json:"target"`
	Clock  string `json:"clock"`
	// Faults are those the rule ran under, for a rule that needs one.
	Faults []string `json:"faults,omitempty"`
	// Path, when set, names the path; otherwise the target's name does.
	Path string `json:"path,omitempty"`
	// Cell is the matrix cell or the like that Path is divided into.
	Cell    string `json:"cell,omitempty"`
	Outcome string `json:"outcome"`
}

// Enabled reports whether recording is on.
func Enabled() bool {
	v := os.Getenv(EnvVar)
	return v != "" && v != "0"
}

// ClockOf names the clock mode of a target that does or does not declare
// a controlled clock.
func ClockOf(controlled bool) string {
	if controlled {
		return Controlled
	}
	return Real
}

// Log records e in t's output when recording is on.
func Log(t testing.TB, e Entry) {
	t.Helper()
	if !Enabled() {
		return
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatalf("rulecov: %v", err)
	}
	t.Log(marker + string(b))
}

// Parse reads an Entry from a line of test output, which may carry
// go test's file:line prefix and indentation before it.
func Parse(line string) (Entry, bool) {
	_, rest, ok := strings.Cut(line, marker)
	if !ok {
		return Entry{}, false
	}
	var e Entry
	if err := json.Unmarshal([]byte(strings.TrimSpace(rest)), &e); err != nil || e.Rule == "" {
		return Entry{}, false
	}
	return e, true
}

// runnerJSON is what a conformance-runner of any release prints with
// --format json: certify's certificate (a target and its modes), or a
// plain run's report (an adapter and its results).
type runnerJSON struct {
	Target       string       `json:"target"`
	Adapter      string       `json:"adapter"`
	Capabilities capabilities `json:"capabilities"`
	Modes        []struct {
		Capabilities capabilities `json:"capabilities"`
		Results      []result     `json:"results"`
	} `json:"modes"`
	Results []result `json:"results"`
}

type capabilities struct {
	ControlledClock bool     `json:"controlled_clock"`
	Faults          []string `json:"faults"`
}

type result struct {
	Rule struct {
		ID       string `json:"id"`
		Requires struct {
			Faults []string `json:"faults"`
		} `json:"requires"`
	} `json:"rule"`
	Outcome string `json:"outcome"`
}

// LogRunner records every result of a conformance-runner's JSON output
// (certify's or a plain run's) as reached by path, in cell. Output that is
// not the runner's JSON fails t: the caller has read it as such already.
func LogRunner(t testing.TB, path, cell string, out []byte) {
	t.Helper()
	if !Enabled() {
		return
	}
	var rep runnerJSON
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("rulecov: not the runner's JSON: %v", err)
	}
	target := rep.Target
	if target == "" {
		target = rep.Adapter
	}
	logAll := func(caps capabilities, results []result) {
		for _, r := range results {
			e := Entry{Rule: r.Rule.ID, Target: target, Clock: ClockOf(caps.ControlledClock), Path: path, Cell: cell, Outcome: r.Outcome}
			if len(r.Rule.Requires.Faults) > 0 {
				e.Faults = caps.Faults
			}
			Log(t, e)
		}
	}
	logAll(rep.Capabilities, rep.Results)
	for _, m := range rep.Modes {
		logAll(m.Capabilities, m.Results)
	}
}
