package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
)

// clockRules need a controlled clock: they skip where time is real.
const clockRules = "CAP-003,LEASE-018"

// outcomes runs the runner with --format json and returns each rule's
// outcome and the capabilities the report declares.
func outcomes(t *testing.T, args ...string) (map[string]conformance.Outcome, conformance.Capabilities, string) {
	t.Helper()
	out, stderr, code := runCLI(t, append(args, "--format", "json")...)
	if code != exitPass {
		t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, stderr)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, out)
	}
	got := map[string]conformance.Outcome{}
	for _, r := range rep.Results {
		got[r.Rule.ID] = r.Outcome
	}
	return got, rep.Capabilities, stderr
}

// A plugin is certified with a controlled clock: the rules that move time
// run through the plugin's test clock; --real-clock keeps real time, and
// they skip.
func TestPluginsAreCertifiedWithAControlledClock(t *testing.T) {
	path := bin(t, memoryPkg)
	got, caps, _ := outcomes(t, "--plugin", path, "--run", clockRules)
	if !caps.ControlledClock {
		t.Errorf("the memory plugin's target declares %v, want a controlled clock", caps)
	}
	for _, id := range strings.Split(clockRules, ",") {
		if got[id] != conformance.Pass {
			t.Errorf("%s through the memory plugin: %s, want pass", id, got[id])
		}
	}
	got, caps, _ = outcomes(t, "--plugin", path, "--run", clockRules, "--real-clock")
	if caps.ControlledClock {
		t.Errorf("--real-clock: the target declares %v", caps)
	}
	for _, id := range strings.Split(clockRules, ",") {
		if got[id] != conformance.Skip {
			t.Errorf("%s with --real-clock: %s, want skip", id, got[id])
		}
	}
}

// A plugin whose store does not read the test clock keeps real time, and
// the runner says why the clock rules skip.
func TestAPluginIgnoringTheTestClockKeepsRealTime(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "")
	got, caps, stderr := outcomes(t, "--plugin", bin(t, testPkg), "--run", clockRules)
	if caps.ControlledClock || got["CAP-003"] != conformance.Skip {
		t.Errorf("declares %v, CAP-003 %s: want real time and a skip", caps, got["CAP-003"])
	}
	if !strings.Contains(stderr, "plugin.TestClock") {
		t.Errorf("the runner does not say why the clock rules skip:\n%s", stderr)
	}
}

// Through a gateway the store is on the gateway's test clock, and a store
// that outlives the gateway is certified under the restart fault: the
// gateway is killed and started again.
func TestGatewaysAreCertifiedWithAClockAndRestarts(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	got, caps, _ := outcomes(t, "--gateway", bin(t, gatewayPkg), "--store", "badger:{{tempdir}}/s", "--run", clockRules+",FAULT-002,FAULT-006")
	if !caps.ControlledClock || len(caps.Faults) != 1 || caps.Faults[0] != conformance.FaultRestart {
		t.Errorf("Badger behind a gateway declares %v, want a controlled clock and the restart fault", caps)
	}
	for _, id := range []string{"CAP-003", "LEASE-018", "FAULT-002", "FAULT-006"} {
		if got[id] != conformance.Pass {
			t.Errorf("%s through a gateway: %s, want pass", id, got[id])
		}
	}
	_, caps, _ = outcomes(t, "--gateway", bin(t, gatewayPkg), "--store", "memory", "--run", "CAP-003", "--real-clock")
	if caps.ControlledClock || len(caps.Faults) > 0 {
		t.Errorf("memory behind a gateway with --real-clock declares %v, want neither clock nor faults", caps)
	}
}
