package protocol_test

import (
	"context"
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate/protocol"
)

// The proto passes buf lint (protocol/pb/buf.yaml says which rules are
// excepted and why) and buf breaking against the proto of the previous
// minor version, kept in testdata so that the check needs no git history
// (docs/protocol.md, "Checking the proto"). Scratch copies with a
// renumbered field and a badly named one show that both checks can fail.
func TestTheProtoPassesBufLintAndBreaking(t *testing.T) {
	buf := findBuf(t)
	baseline := baselineDir(t)

	t.Run("lint", func(t *testing.T) {
		if out, err := runBuf(t, buf, "lint", "pb"); err != nil {
			t.Errorf("buf lint pb: %v\n%s", err, out)
		}
	})
	t.Run("breaking", func(t *testing.T) {
		if baseline == "" {
			t.Skip("a new major version has no earlier minor to stay compatible with")
		}
		if out, err := runBuf(t, buf, "breaking", "pb", "--against", baseline); err != nil {
			t.Errorf("buf breaking pb --against %s: %v\n%s\nA minor version may only add (docs/protocol.md, \"Versions\").", baseline, err, out)
		}
	})
	t.Run("a renumbered field is a breaking change", func(t *testing.T) {
		if baseline == "" {
			t.Skip("no baseline")
		}
		dir := scratchProto(t, "  bool release_lease = 14;", "  bool release_lease = 99;")
		out, err := runBuf(t, buf, "breaking", dir, "--against", baseline)
		if err == nil || !strings.Contains(out, "release_lease") {
			t.Errorf("buf breaking passed a renumbered release_lease (error %v):\n%s", err, out)
		}
	})
	t.Run("a field not in snake case is a lint error", func(t *testing.T) {
		dir := scratchProto(t, "  bool release_lease = 14;", "  bool release_lease = 14;\n  bool releaseLater = 99;")
		out, err := runBuf(t, buf, "lint", dir)
		if err == nil || !strings.Contains(out, "releaseLater") {
			t.Errorf("buf lint passed a field named releaseLater (error %v):\n%s", err, out)
		}
	})
}

// findBuf returns the buf that .ci/run installs into the repository's
// bin/, or one in GOBIN, GOPATH/bin or on PATH. Without one the test
// skips, and fails under CI=true, which must never pass a check it did
// not run.
func findBuf(t *testing.T) string {
	t.Helper()
	candidates := []string{filepath.Join("..", "bin", "buf")}
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		candidates = append(candidates, filepath.Join(gobin, "buf"))
	}
	candidates = append(candidates, filepath.Join(build.Default.GOPATH, "bin", "buf"))
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			abs, err := filepath.Abs(c)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	if p, err := exec.LookPath("buf"); err == nil {
		return p
	}
	const install = "make buf (or .ci/run) installs it into bin/"
	if os.Getenv("CI") == "true" {
		t.Fatalf("buf is not installed, and CI=true forbids skipping the proto's lint and breaking checks: %s", install)
	}
	t.Skipf("SKIPPING: buf is not installed: %s", install)
	return ""
}

// baselineDir is the directory of the previous minor version's proto,
// relative to this package, or "" for a minor version 0. It must exist:
// a minor version is released with its predecessor's proto as baseline.
func baselineDir(t *testing.T) string {
	t.Helper()
	if protocol.Minor == 0 {
		return ""
	}
	dir := filepath.Join("testdata", fmt.Sprintf("v%d.%d", protocol.Major, protocol.Minor-1))
	if _, err := os.Stat(filepath.Join(dir, "runstate.proto")); err != nil {
		t.Fatalf("protocol %s needs the proto of %d.%d as its baseline in %s (testdata/README.md): %v",
			protocol.Version, protocol.Major, protocol.Minor-1, dir, err)
	}
	return dir
}

// scratchProto copies the proto and its buf.yaml into a directory of the
// test's, with old replaced by with in the proto, and returns it.
func scratchProto(t *testing.T, old, with string) string {
	t.Helper()
	proto, err := os.ReadFile(filepath.Join("pb", "runstate.proto"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(proto), old) {
		t.Fatalf("pb/runstate.proto has no line %q to change", old)
	}
	config, err := os.ReadFile(filepath.Join("pb", "buf.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range map[string][]byte{"runstate.proto": []byte(strings.Replace(string(proto), old, with, 1)), "buf.yaml": config} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runBuf runs buf with args in this package's directory and returns its
// output, stdout and stderr together.
func runBuf(t *testing.T, buf string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, buf, args...).CombinedOutput()
	return string(out), err
}
