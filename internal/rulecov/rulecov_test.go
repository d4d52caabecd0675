package rulecov

import (
	"strings"
	"testing"
)

// A line Log writes, as go test prints it (indented, with file:line),
// reads back as the entry; other lines read as nothing.
func TestAnEntryReadsBackFromTheTestsOutput(t *testing.T) {
	t.Setenv(EnvVar, "1")
	want := Entry{Rule: "LEASE-001", Target: "badger (plugin process)", Clock: Controlled, Faults: []string{"restart"}, Outcome: "pass"}
	rec := &recorder{TB: t}
	Log(rec, want)
	if len(rec.logged) != 1 {
		t.Fatalf("logged %q, want one line", rec.logged)
	}
	got, ok := Parse("        testing.go:40: " + rec.logged[0] + "\n")
	if !ok || got.Rule != want.Rule || got.Target != want.Target || got.Clock != want.Clock || strings.Join(got.Faults, ",") != "restart" || got.Outcome != "pass" {
		t.Errorf("read back %+v (%v), want %+v", got, ok, want)
	}
	for _, line := range []string{"=== RUN   TestX\n", marker + "{not json\n", marker + `{"target":"memory"}` + "\n"} {
		if e, ok := Parse(line); ok {
			t.Errorf("Parse(%q) = %+v, want nothing", line, e)
		}
	}
}

// Without RUNSTATE_RULE_COVERAGE nothing is written: a store author's
// go test -v stays as it was.
func TestNothingIsLoggedUnlessAsked(t *testing.T) {
	t.Setenv(EnvVar, "")
	rec := &recorder{TB: t}
	Log(rec, Entry{Rule: "RUN-001", Target: "memory", Clock: Real, Outcome: "pass"})
	LogRunner(rec, PathNode, "", []byte("not even JSON"))
	if len(rec.logged) != 0 {
		t.Errorf("logged %q with recording off", rec.logged)
	}
}

// Certify's certificate gives a line per result of each mode, its clock
// from the mode's capabilities and, for a rule that needs a fault, the
// faults the mode declared; a plain run's report gives one per result.
func TestARunnersJSONIsLoggedByMode(t *testing.T) {
	t.Setenv(EnvVar, "1")
	certificate := `{"target":"node-memory 1.0","modes":[
		{"mode":"controlled-clock","capabilities":{"controlled_clock":true},"results":[{"rule":{"id":"RUN-001"},"outcome":"pass"}]},
		{"mode":"real-clock","capabilities":{"controlled_clock":false},"results":[{"rule":{"id":"LEASE-018"},"outcome":"skip"}]},
		{"mode":"restarts","capabilities":{"controlled_clock":true,"faults":["restart"]},"results":[{"rule":{"id":"FAULT-003","requires":{"faults":["partition","restart"]}},"outcome":"pass"}]}]}`
	rec := &recorder{TB: t}
	LogRunner(rec, PathNode, "", []byte(certificate))
	var got []string
	for _, l := range rec.logged {
		e, ok := Parse(l)
		if !ok {
			t.Fatalf("%q does not read back", l)
		}
		got = append(got, strings.Join([]string{e.Rule, e.Target, e.Clock, strings.Join(e.Faults, "+"), e.Path, e.Outcome}, " "))
	}
	want := []string{"RUN-001 node-memory 1.0 controlled  node pass", "LEASE-018 node-memory 1.0 real  node skip", "FAULT-003 node-memory 1.0 controlled restart node pass"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	rec = &recorder{TB: t}
	LogRunner(rec, PathMatrix, "host_today/plugin_today", []byte(`{"adapter":"memory","capabilities":{"controlled_clock":false},"results":[{"rule":{"id":"CAS-001"},"outcome":"fail"}]}`))
	if e, ok := Parse(strings.Join(rec.logged, "")); !ok || e.Target != "memory" || e.Clock != Real || e.Cell != "host_today/plugin_today" || e.Outcome != "fail" {
		t.Errorf("a plain run's result logged as %q", rec.logged)
	}
}

// recorder keeps what a test logs instead of printing it.
type recorder struct {
	testing.TB
	logged []string
}

func (r *recorder) Log(args ...any) {
	for _, a := range args {
		r.logged = append(r.logged, a.(string))
	}
}

func (r *recorder) Helper() {}
