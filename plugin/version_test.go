package plugin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate/internal/buildinfo"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/protocol"
)

// versionOf runs a plugin binary as a person would from a terminal, with
// args, and returns its stdout, stderr and exit code.
func versionOf(t *testing.T, path string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(path, args...)
	// Not started by a host: without the handshake's cookie.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, plugin.Handshake.MagicCookieKey+"=") })
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// Every reference plugin, asked for its version from a terminal, prints
// the kit's version, the protocol's, its store's name and version and
// the protocol's features, and exits 0, instead of go-plugin's message
// that it is a plugin.
func TestEveryPluginPrintsItsVersion(t *testing.T) {
	for pkg, store := range map[string]string{memoryPkg: "memory builtin", badgerPkg: "badger badger/v4", mysqlPkg: "mysql mysql/innodb",
		pgPkg: "postgres postgres", etcdPkg: "etcd etcd/client-v3"} {
		path := bin(t, pkg)
		for _, arg := range []string{"--version", "version"} {
			out, errOut, code := versionOf(t, path, arg)
			if code != 0 || errOut != "" {
				t.Errorf("%s %s: exit %d\n%s", store, arg, code, errOut)
			}
			for _, want := range []string{"protocol: " + protocol.Version + "\n", "plugin: " + store + "\n",
				"features: " + strings.Join(protocol.Features(), " ") + "\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s %s lacks %q:\n%s", store, arg, want, out)
				}
			}
			if !strings.HasPrefix(out, "kit: ") {
				t.Errorf("%s %s does not begin with the kit's version:\n%s", store, arg, out)
			}
		}
	}
	path := bin(t, memoryPkg)
	out, _, code := versionOf(t, path, "--version", "--format", "json")
	var v buildinfo.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.Plugin != "memory" || v.PluginVersion != "builtin" ||
		v.Protocol != protocol.Version || v.Kit == "" || !slices.Equal(v.Features, protocol.Features()) {
		t.Errorf("--version --format json: exit %d, %v: %s", code, err, out)
	}
	if _, errOut, code := versionOf(t, path, "--version", "extra"); code != 2 || !strings.Contains(errOut, `takes no arguments, got "extra"`) {
		t.Errorf("--version extra: exit %d %q, want 2", code, errOut)
	}
	// Any other command line still meets go-plugin's refusal.
	if _, errOut, code := versionOf(t, path); code != 1 || !strings.Contains(errOut, "This binary is a plugin") {
		t.Errorf("without a host: exit %d %q, want go-plugin's message", code, errOut)
	}
}
