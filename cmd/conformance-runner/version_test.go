package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/protocol"
)

// version prints the kit's version, the protocol's and the protocol's
// features on stdout, as text or JSON; the help lists it.
func TestVersionPrintsTheKitTheProtocolAndItsFeatures(t *testing.T) {
	out, errOut, code := runCLI(t, "version")
	if code != exitPass || errOut != "" {
		t.Fatalf("version: exit %d\n%s", code, errOut)
	}
	want := "kit: " + buildinfo.Version() + "\nprotocol: " + protocol.Version + "\nfeatures: " + strings.Join(protocol.Features(), " ") + "\n"
	if out != want {
		t.Errorf("version:\n%s\nwant:\n%s", out, want)
	}
	out, _, code = runCLI(t, "version", "--format", "json")
	var v buildinfo.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitPass {
		t.Fatalf("version --format json: exit %d, %v\n%s", code, err, out)
	}
	if v.Kit != buildinfo.Version() || v.Protocol != protocol.Version || !slices.Equal(v.Features, protocol.Features()) ||
		!slices.Contains(v.Features, protocol.FeaturePrincipal) {
		t.Errorf("version --format json: %+v", v)
	}
	for _, args := range [][]string{{"version", "--format", "xml"}, {"version", "extra"}} {
		if _, errOut, code := runCLI(t, args...); code != exitUsage || !strings.Contains(errOut, "version --help") {
			t.Errorf("%v: exit %d %q, want %d naming version --help", args, code, errOut, exitUsage)
		}
	}
	if out, _, _ := runCLI(t, "--help"); !strings.Contains(out, "  version ") {
		t.Errorf("--help does not list version:\n%s", out)
	}
}
