package conformance

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate/internal/rulecov"
)

// Run runs every rule against target as subtests named by rule ID, or
// only those that match a rule ID or area in only. A rule whose capability
// the target lacks is reported as skipped, never passed.
func Run(t *testing.T, target Target, only ...string) {
	t.Helper()
	rules, err := Select(only, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range rules {
		t.Run(rule.ID, func(t *testing.T) {
			res := RunRule(context.Background(), target, rule)
			logCoverage(t, target, rule, res)
			switch res.Outcome {
			case Skip:
				t.Skipf("%s: %s", rule.ID, res.Detail)
			case Error:
				t.Errorf("%s: harness error: %s", rule.ID, res.Detail)
			}
			for _, f := range res.Failures {
				t.Errorf("%s (%s)", f, rule.Statement)
			}
			if res.Outcome == Fail {
				t.Logf("%s is defined at docs/spec.md:%d, %s", rule.ID, rule.Line, rule.URL)
			}
			if len(res.Attachments) > 0 && res.Outcome != Pass {
				dir, err := os.MkdirTemp("", "runstate-conformance-"+rule.ID+"-")
				if err == nil {
					for _, a := range res.Attachments {
						if os.WriteFile(filepath.Join(dir, a.Name), a.Data, 0o644) == nil {
							t.Logf("%s: see %s", rule.ID, filepath.Join(dir, a.Name))
						}
					}
				}
			}
			if res.Outcome == Pass && res.Detail != "" {
				t.Logf("%s: %s", rule.ID, res.Detail)
			}
		})
	}
}

// logCoverage records the rule's run for make test's coverage table
// (internal/rulecov); nothing unless RUNSTATE_RULE_COVERAGE is set.
func logCoverage(t *testing.T, target Target, rule Rule, res Result) {
	t.Helper()
	e := rulecov.Entry{Rule: rule.ID, Target: target.Name, Clock: rulecov.ClockOf(target.Capabilities.ControlledClock), Outcome: string(res.Outcome)}
	if len(rule.Requires.Faults) > 0 {
		for _, f := range target.Capabilities.Faults {
			e.Faults = append(e.Faults, string(f))
		}
	}
	rulecov.Log(t, e)
}

// ManualClock is a runstate.Clock that moves only when told, for harnesses of
// in-process stores that declare ControlledClock.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (m *ManualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock forward by d.
func (m *ManualClock) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
}
