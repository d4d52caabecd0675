package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/rulecov"
	"github.com/runstate/runstate/protocol"
)

// nodePluginDir holds the store plugin written in JavaScript from
// docs/protocol.md and docs/spec.md alone.
const nodePluginDir = "../../examples/node-plugin"

// nodePlugin returns the Node.js plugin's executable, or skips the test
// (fails it under CI=true) when node or the plugin's npm dependencies are
// missing: tests never download, .ci/run installs them with `npm ci`.
func nodePlugin(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(nodePluginDir)
	if err != nil {
		t.Fatal(err)
	}
	var missing string
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not installed: install Node.js 18 or later, then"
	} else {
		for _, dep := range []string{"@grpc/grpc-js", "@grpc/proto-loader"} {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", dep, "package.json")); err != nil {
				missing = "the plugin's npm dependencies are not installed (" + dep + " is missing):"
				break
			}
		}
	}
	if missing != "" {
		msg := missing + " run `npm ci` in examples/node-plugin"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return filepath.Join(dir, "runstate-plugin-node")
}

// nodePluginProtocol is the protocol examples/node-plugin implements.
const nodePluginProtocol = "1.7"

// A plugin in another language, written from the documents without the Go
// code, is certified for the core and leases profiles through the wire
// protocol, under the test clock and with real time, and announces
// protocol 1.7 with the features it implements: a version older than
// the host's, which the host meets (it cannot park runs, protocol 1.8).
func TestTheNodePluginIsCertifiedForCoreAndLeases(t *testing.T) {
	plugin := nodePlugin(t)
	t.Parallel() // its plugin processes are its own; much of its time sleeps through real leases
	out, errOut, code := runCLI(t, "certify", "--plugin", plugin, "--profile", "core,leases", "--format", "json")
	if code != exitPass {
		var verdicts []string
		if strings.HasPrefix(strings.TrimSpace(out), "{") {
			for _, v := range decodeCertificate(t, out).Profiles {
				verdicts = append(verdicts, v.Profile+": "+v.Verdict)
			}
		}
		tail := errOut
		if len(tail) > 4000 {
			tail = "…" + tail[len(tail)-4000:]
		}
		t.Fatalf("certify exit %d, want 0\n%s\n%s", code, strings.Join(verdicts, "\n"), tail)
	}
	rulecov.LogRunner(t, rulecov.PathNode, "", []byte(out))
	c := decodeCertificate(t, out)
	if !strings.HasPrefix(c.Target, "node-memory") || !c.Capabilities.Leases || !c.Capabilities.ControlledClock {
		t.Errorf("target %q with %+v, want node-memory with leases and the test clock", c.Target, c.Capabilities)
	}
	if c.TargetProtocol == nil || c.TargetProtocol.Version != nodePluginProtocol {
		t.Fatalf("target protocol %+v, want %s", c.TargetProtocol, nodePluginProtocol)
	}
	if slices.Contains(c.TargetProtocol.Features, protocol.FeatureWakeAt) {
		t.Errorf("features %v name %s, which protocol %s lacks", c.TargetProtocol.Features, protocol.FeatureWakeAt, nodePluginProtocol)
	}
	for _, f := range []string{protocol.FeatureLeases, protocol.FeatureLeaseReader, protocol.FeaturePrincipal} {
		if !slices.Contains(c.TargetProtocol.Features, f) {
			t.Errorf("features %v lack %s", c.TargetProtocol.Features, f)
		}
	}
	for _, p := range []string{conformance.ProfileCore, conformance.ProfileLeases} {
		v := verdictOf(t, c, p)
		if v.Status != conformance.Certified || len(v.Proven) != len(conformance.ProfileRules(p)) {
			t.Errorf("%s: %s, %d of %d rules proven", p, v.Verdict, len(v.Proven), len(conformance.ProfileRules(p)))
		}
	}
	t.Logf("certified in %.0fs: %s", c.Duration, strings.Join(c.TargetProtocol.Features, ", "))
}
