package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate/internal/rulecov"
)

const pkg = "github.com/runstate/runstate/adapters/memory"

func output(test string, e rulecov.Entry) event {
	b, _ := json.Marshal(e)
	return event{Action: "output", Package: pkg, Test: test, Output: "    testing.go:40: runstate-rule-coverage " + string(b) + "\n"}
}

// Each rule run is classified by store, path and clock from the target's
// name or the entry's own path; a pass proves, a skip or a mutant's
// failure does not; a test that passed is a proof of its own.
func TestProofsAreReadFromTheOutput(t *testing.T) {
	events := []event{
		output("TestConformance/RUN-001", rulecov.Entry{Rule: "RUN-001", Target: "memory", Clock: rulecov.Controlled, Outcome: "pass"}),
		output("TestConformanceRealClock/LEASE-018", rulecov.Entry{Rule: "LEASE-018", Target: "memory", Clock: rulecov.Real, Outcome: "skip"}),
		output("TestX/FAULT-003", rulecov.Entry{Rule: "FAULT-003", Target: "badger (plugin process)", Clock: rulecov.Controlled, Faults: []string{"restart"}, Outcome: "pass"}),
		output("TestY/RUN-001", rulecov.Entry{Rule: "RUN-001", Target: "postgres (through a gateway process)", Clock: rulecov.Controlled, Outcome: "pass"}),
		output("TestZ", rulecov.Entry{Rule: "RUN-001", Target: "memory", Clock: rulecov.Real, Path: rulecov.PathMatrix, Cell: "host_today/plugin_today", Outcome: "pass"}),
		output("TestMutants/RUN-001", rulecov.Entry{Rule: "RUN-001", Target: "broken", Clock: rulecov.Controlled, Outcome: "fail"}),
		{Action: "pass", Package: pkg, Test: "TestConformance"},
		{Action: "pass", Package: pkg, Test: "TestConformance/RUN-001"},
		{Action: "fail", Package: pkg, Test: "TestBroken"},
	}
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range coverageOf(events).proofs() {
			if !yield(k) {
				return
			}
		}
	})
	want := []string{
		"cell RUN-001: matrix host_today/plugin_today",
		"path FAULT-003: plugin, controlled clock under restart",
		"path RUN-001: gateway, controlled clock",
		"path RUN-001: in-process, controlled clock",
		"path RUN-001: matrix, real clock",
		"store FAULT-003: badger, controlled clock under restart",
		"store RUN-001: memory, controlled clock",
		"store RUN-001: memory, real clock",
		"store RUN-001: postgres, controlled clock",
		"test " + pkg + ".TestConformance",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("proofs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A proof of the baseline that a run lacks is listed; one the run adds
// is not.
func TestALostProofIsListed(t *testing.T) {
	before := proofs{"store RUN-001: memory, real clock": true, "test p.TestA": true}
	now := proofs{"test p.TestA": true, "test p.TestB": true}
	if got := before.missingFrom(now); !slices.Equal(got, []string{"store RUN-001: memory, real clock"}) {
		t.Errorf("lost %q", got)
	}
	if got := now.missingFrom(now); len(got) != 0 {
		t.Errorf("a run loses %q against itself", got)
	}
}

// A second's CPU goes to the tests running in it by the time each ran,
// the part of the second no test covered to outside.
func TestCPUIsSharedByTheTimeEachTestRan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	spans := []span{{"A", at(0), at(1000)}, {"B", at(500), at(1000)}, {"C", at(2000), at(3000)}}
	got := map[string]float64{}
	var outside float64
	share(spans, at(0), at(1000), 3, func(test string, cpu float64) { got[test] += cpu }, &outside)
	share(spans, at(1000), at(2000), 1, func(test string, cpu float64) { got[test] += cpu }, &outside)
	if fmt.Sprintf("%.2f %.2f %.2f", got["A"], got["B"], outside) != "2.00 1.00 1.00" || got["C"] != 0 {
		t.Errorf("shares %v, outside %.2f; want A 2, B 1 and 1 outside", got, outside)
	}
}

// Two binaries of one package (its race-detected tests and its others)
// add up to one package row, each binary's CPU shared among the package's
// tests; wall time runs from a test's start to its end.
func TestTwoBinariesOfAPackageAddUp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	events := []event{
		{Time: at(0), Action: "start", Package: pkg},
		{Time: at(0), Action: "run", Package: pkg, Test: "TestRace"},
		{Time: at(0), Action: "start", Package: pkg},
		{Time: at(0), Action: "run", Package: pkg, Test: "TestRealClock"},
		{Time: at(2), Action: "pass", Package: pkg, Test: "TestRace", Elapsed: 2},
		{Time: at(2), Action: "pass", Package: pkg, Elapsed: 2},
		{Time: at(4), Action: "pass", Package: pkg, Test: "TestRealClock", Elapsed: 1}, // parallel subtests ran on
		{Time: at(4), Action: "pass", Package: pkg, Elapsed: 4},
	}
	samples := []sample{
		{Package: pkg, PID: 1, TimeMS: at(0).UnixMilli()}, {Package: pkg, PID: 2, TimeMS: at(0).UnixMilli()},
		{Package: pkg, PID: 1, TimeMS: at(1).UnixMilli(), CPU: 1}, {Package: pkg, PID: 1, TimeMS: at(2).UnixMilli(), CPU: 2},
		{Package: pkg, PID: 2, TimeMS: at(2).UnixMilli(), CPU: 0.5}, {Package: pkg, PID: 2, TimeMS: at(4).UnixMilli(), CPU: 1.5},
	}
	c := costsOf(events, samples)
	if len(c.packages) != 1 || c.packages[0].cpu != 3.5 || c.packages[0].wall != 4 {
		t.Fatalf("packages %+v, want one of 3.5 CPU s over 4 s", c.packages)
	}
	byName := map[string]cost{}
	for _, x := range c.tests {
		byName[strings.TrimPrefix(x.name, pkg+".")] = x
	}
	if r, rc := byName["TestRace"], byName["TestRealClock"]; r.wall != 2 || rc.wall != 4 || fmt.Sprintf("%.2f", r.cpu+rc.cpu+c.outside) != "3.50" {
		t.Errorf("tests %+v, outside %.2f: want walls 2 and 4 and every CPU second given out", byName, c.outside)
	}
}
