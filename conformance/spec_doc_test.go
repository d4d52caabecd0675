package conformance_test

import (
	"slices"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/docs"
)

// TestSpecDocMatchesSuite keeps docs/spec.md and the suite in step: every
// rule the document defines has a check, and every check is defined there, once.
func TestSpecDocMatchesSuite(t *testing.T) {
	lines, dups := docs.RuleLines()
	for _, id := range dups {
		t.Errorf("docs/spec.md defines %s twice", id)
	}
	var checked []string
	for _, r := range conformance.Rules() {
		if slices.Contains(checked, r.ID) {
			t.Errorf("the suite registers %s twice", r.ID)
		}
		checked = append(checked, r.ID)
		if r.Statement == "" {
			t.Errorf("%s has no statement", r.ID)
		}
		if !slices.ContainsFunc(conformance.Areas, func(a struct{ ID, Title string }) bool { return a.ID == r.Area }) {
			t.Errorf("%s is in unknown area %s", r.ID, r.Area)
		}
		if lines[r.ID] == 0 {
			t.Errorf("the suite checks %s but docs/spec.md does not define it", r.ID)
		} else if r.Line != lines[r.ID] {
			t.Errorf("%s says it is on line %d, docs/spec.md has it on %d", r.ID, r.Line, lines[r.ID])
		}
	}
	for id := range lines {
		if !slices.Contains(checked, id) {
			t.Errorf("docs/spec.md defines %s but the suite has no check for it", id)
		}
	}
	if len(lines) == 0 {
		t.Fatal("no rule definitions found in docs/spec.md")
	}
	t.Logf("%d rules, defined and checked", len(lines))
}

func TestSelect(t *testing.T) {
	all := conformance.Rules()
	got, err := conformance.Select([]string{"lease", "CAS-002"}, []string{"LEASE-016"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if (r.Area != "LEASE" && r.ID != "CAS-002") || r.ID == "LEASE-016" {
			t.Errorf("selected %s", r.ID)
		}
	}
	if len(got) != 16 {
		t.Errorf("selected %d rules, want 15 lease rules + CAS-002", len(got))
	}
	if everything, _ := conformance.Select(nil, nil); len(everything) != len(all) {
		t.Errorf("empty selection: %d rules, want all %d", len(everything), len(all))
	}
	if _, err := conformance.Select([]string{"NOPE-001"}, nil); err == nil {
		t.Error("an unknown rule was accepted")
	}
}
