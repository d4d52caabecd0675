package compat

import (
	"strings"
	"testing"

	"github.com/runstate/runstate/protocol"
)

// The judge of a cell reports every difference that no fallback, named
// refusal or named lack explains, without running anything.
func TestJudgeReportsWhatNothingExplains(t *testing.T) {
	refusal := `expected CreateRun to succeed; seen error "runstate: plugin p speaks protocol 1.5 or older, which does not announce principal: …" (code "UNSUPPORTED")`
	oldPeer := &protocol.StoreInfo{Features: []string{protocol.FeatureLeases}}
	want := expectation{
		fellBack: map[string][]string{protocol.FeatureUpdateReleaseLease: {"LEASE-022"}},
		refused:  map[string][]string{protocol.FeaturePrincipal: {"AUD-010"}},
		lacking:  map[lack][]string{noTestClock: {"CAP-003"}},
	}
	explained := map[string]verdict{
		"FSM-001":   {outcome: passed},
		"LEASE-022": {outcome: passed},
		"AUD-010":   {outcome: failed, why: []string{refusal}},
		"CAP-003":   {outcome: skipped, why: []string{"needs capability controlled_clock"}},
	}
	if problems := want.judge(explained, oldPeer); len(problems) > 0 {
		t.Fatalf("an outcome every difference of which is explained: %q", problems)
	}
	for _, tc := range []struct {
		name    string
		change  func(map[string]verdict)
		peer    *protocol.StoreInfo
		problem string
	}{
		{"a silent loss", func(g map[string]verdict) {
			g["FSM-001"] = verdict{outcome: failed, why: []string{"expected x; seen y"}}
		},
			oldPeer, "FSM-001 failed without a named refusal"},
		{"a refusal that is not UNSUPPORTED", func(g map[string]verdict) {
			g["AUD-010"] = verdict{outcome: failed, why: []string{"expected principal p; seen none"}}
		}, oldPeer, "AUD-010 failed without the refusal UNSUPPORTED naming principal"},
		{"a skip naming another lack", func(g map[string]verdict) {
			g["CAP-003"] = verdict{outcome: skipped, why: []string{"needs capability leases"}}
		},
			oldPeer, "CAP-003 skipped for a reason that does not name the lack of test clock"},
		{"an unexpected skip", func(g map[string]verdict) {
			g["FSM-001"] = verdict{outcome: skipped, why: []string{"lacks runstate.BatchCreator"}}
		},
			oldPeer, "FSM-001 skipped for no lack the cell expects"},
		{"a fallback from a feature the peer names", func(map[string]verdict) {},
			&protocol.StoreInfo{Features: []string{protocol.FeatureUpdateReleaseLease}}, "LEASE-022: the peer names update_release_lease"},
		{"an expected rule not run", func(g map[string]verdict) { delete(g, "CAP-003") }, oldPeer, "CAP-003: the runner did not run it"},
	} {
		got := map[string]verdict{}
		for id, v := range explained {
			got[id] = v
		}
		tc.change(got)
		problems := want.judge(got, tc.peer)
		if !strings.Contains(strings.Join(problems, "\n"), tc.problem) {
			t.Errorf("%s: the judge reports %q, want %q", tc.name, problems, tc.problem)
		}
	}
	if problems := certified.judge(map[string]verdict{"FSM-001": {outcome: passed}}, oldPeer); !strings.Contains(strings.Join(problems, "\n"), "does not name principal") {
		t.Errorf("a certified cell whose peer names no kept field: %q", problems)
	}
}
