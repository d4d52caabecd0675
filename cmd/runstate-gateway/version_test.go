package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/protocol"
)

// runGateway runs the command line in this process, as main would, and
// returns stdout, stderr and the exit code.
func runGateway(stdin string, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, nil)
	code := exitCode(err, &errOut) // prints the error's message, as main does
	return out.String(), errOut.String(), code
}

// version prints the kit's version, the protocol's and the protocol's
// features, as text or JSON, and needs no store nor tokens.
func TestVersionPrintsTheKitTheProtocolAndItsFeatures(t *testing.T) {
	out, errOut, code := runGateway("", "version")
	want := "kit: " + buildinfo.Version() + "\nprotocol: " + protocol.Version + "\nfeatures: " + strings.Join(protocol.Features(), " ") + "\n"
	if code != exitOK || out != want {
		t.Errorf("version: exit %d %q\n%s\nwant:\n%s", code, errOut, out, want)
	}
	out, _, code = runGateway("", "version", "--format", "json")
	var v buildinfo.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != exitOK || v.Kit != buildinfo.Version() || v.Protocol != protocol.Version || len(v.Features) != len(protocol.Features()) {
		t.Errorf("version --format json: exit %d, %v: %s", code, err, out)
	}
	for _, args := range [][]string{{"version", "--format", "yaml"}, {"version", "extra"}, {"version", "--bogus"}} {
		if _, errOut, code := runGateway("", args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d %q, want %d with a message", args, code, errOut, exitUsage)
		}
	}
	if _, errOut, _ := runGateway("", "--help"); !strings.Contains(errOut, "runstate-gateway version") {
		t.Errorf("--help does not name version:\n%s", errOut)
	}
}

// gen-token prints a token and its hash, which hash-token computes again
// from the token; a short token is refused.
func TestGenTokenAndHashTokenAgree(t *testing.T) {
	out, _, code := runGateway("", "gen-token")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 {
		t.Fatalf("gen-token: exit %d\n%s", code, out)
	}
	hashed, _, code := runGateway(lines[0]+"\n", "hash-token")
	if code != exitOK || strings.TrimSpace(hashed) != lines[1] {
		t.Errorf("hash-token of gen-token's token: exit %d %q, want %q", code, hashed, lines[1])
	}
	if _, _, code := runGateway("short\n", "hash-token"); code != exitUsage {
		t.Errorf("hash-token of a short token: exit %d, want %d", code, exitUsage)
	}
}
