package conformance_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
)

// Every registered rule belongs to exactly one profile, and no profile
// but scale (which holds measurements) is empty.
func TestProfileOfEveryRule(t *testing.T) {
	seen := map[string]int{}
	for _, p := range conformance.Profiles() {
		rules := conformance.ProfileRules(p.ID)
		if p.ID == conformance.ProfileScale {
			if len(rules) != 0 {
				t.Errorf("scale holds measurements, not rules: %d rules", len(rules))
			}
			continue
		}
		if len(rules) == 0 {
			t.Errorf("profile %s has no rule", p.ID)
		}
		for _, r := range rules {
			seen[r.ID]++
		}
	}
	for _, r := range conformance.Rules() {
		if seen[r.ID] != 1 {
			t.Errorf("%s is in %d profiles, want exactly one", r.ID, seen[r.ID])
		}
	}
	for id, want := range map[string]string{"FSM-001": "core", "AUD-007": "leases", "LEASE-018": "leases", "LIN-002": "shared", "CAP-002": "shared", "FAULT-005": "faults", "REC-005": "leases"} {
		i := slices.IndexFunc(conformance.Rules(), func(r conformance.Rule) bool { return r.ID == id })
		if got := conformance.ProfileOf(conformance.Rules()[i]); got != want {
			t.Errorf("%s in %s, want %s", id, got, want)
		}
	}
}

func TestProfileSelection(t *testing.T) {
	if ps, err := conformance.SelectProfiles([]string{"Leases", "core"}); err != nil || len(ps) != 2 || ps[0].ID != "core" {
		t.Errorf("SelectProfiles(Leases, core) = %v, %v", ps, err)
	}
	if _, err := conformance.SelectProfiles([]string{"fast"}); err == nil || !strings.Contains(err.Error(), "core, leases") {
		t.Errorf("an unknown profile: %v, want an error naming the profiles", err)
	}
}

// A profile is certified only when each rule passed in some mode and
// failed in none; a rule skipped in every mode leaves it not certified,
// naming what the target lacks.
func TestProfileVerdicts(t *testing.T) {
	shared := conformance.ProfileRules(conformance.ProfileShared)
	results := func(outcome func(r conformance.Rule) (conformance.Outcome, string)) []conformance.Result {
		var out []conformance.Result
		for _, r := range shared {
			o, detail := outcome(r)
			out = append(out, conformance.Result{Rule: r, Outcome: o, Detail: detail})
		}
		return out
	}
	pass := func(conformance.Rule) (conformance.Outcome, string) { return conformance.Pass, "" }
	noSecond := func(r conformance.Rule) (conformance.Outcome, string) {
		if r.Requires.SecondHandle {
			return conformance.Skip, "needs capability second_handle"
		}
		return conformance.Pass, ""
	}
	failLIN1 := func(r conformance.Rule) (conformance.Outcome, string) {
		if r.ID == "LIN-001" {
			return conformance.Fail, ""
		}
		return conformance.Pass, ""
	}
	caps := conformance.Capabilities{Leases: true, SecondHandle: true}
	lacking := conformance.Capabilities{Leases: true}
	profile := []conformance.Profile{{ID: conformance.ProfileShared}}
	for _, c := range []struct {
		name  string
		modes []conformance.ModeResults
		want  string
		lacks []string
	}{
		{"passed in both modes", []conformance.ModeResults{{"a", caps, results(pass)}, {"b", caps, results(pass)}}, conformance.Certified, nil},
		{"skipped in one mode, passed in the other", []conformance.ModeResults{{"a", lacking, results(noSecond)}, {"b", caps, results(pass)}}, conformance.Certified, nil},
		{"skipped in every mode", []conformance.ModeResults{{"a", lacking, results(noSecond)}, {"b", lacking, results(noSecond)}}, conformance.NotCertified, []string{"second_handle"}},
		{"failed in one mode", []conformance.ModeResults{{"a", caps, results(failLIN1)}, {"b", caps, results(pass)}}, conformance.Failed, nil},
		{"not run", nil, conformance.NotCertified, nil},
	} {
		v := conformance.Verdicts(profile, c.modes, nil)[0]
		if v.Status != c.want || !slices.Equal(v.Lacks, c.lacks) {
			t.Errorf("%s: %s, lacks %v; want %s, lacks %v", c.name, v.Verdict, v.Lacks, c.want, c.lacks)
		}
		if c.lacks != nil && !strings.Contains(v.Verdict, "lacks second_handle") {
			t.Errorf("%s: verdict %q does not name what is lacking", c.name, v.Verdict)
		}
	}
}

// A fault rule that ran in no mode names the faults that would have let
// it run, each once.
func TestProfileVerdictNamesLackingFaults(t *testing.T) {
	caps := conformance.Capabilities{Leases: true, Faults: []conformance.Fault{conformance.FaultPartition}}
	var results []conformance.Result
	for _, r := range conformance.ProfileRules(conformance.ProfileFaults) {
		o := conformance.Pass
		if !slices.Contains(r.Requires.Faults, conformance.FaultPartition) {
			o = conformance.Skip
		}
		results = append(results, conformance.Result{Rule: r, Outcome: o, Detail: "needs capability faults"})
	}
	v := conformance.Verdicts([]conformance.Profile{{ID: conformance.ProfileFaults}}, []conformance.ModeResults{{Mode: "faults", Capabilities: caps, Results: results}}, nil)[0]
	if v.Status != conformance.NotCertified || !slices.Contains(v.Lacks, "fault restart") || slices.Contains(v.Lacks, "fault partition") ||
		!strings.Contains(v.Verdict, "lacks faults (restart") {
		t.Errorf("faults with a partition only: %s, lacks %v", v.Verdict, v.Lacks)
	}
}
