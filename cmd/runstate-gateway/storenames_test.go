package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// --store takes the same names in the three commands that take one, and
// refuses the same bad names with the same words. Each command is given,
// besides the name, one flag it refuses right after it has checked the
// name: a name it accepts ends with that flag's refusal, a name it
// refuses with its own.
func TestEveryCommandTakesTheSameStoreNames(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	commands := []struct {
		name string
		args func(store string) []string
		// later is the refusal that follows an accepted name.
		later string
	}{
		{"demo-runner", func(store string) []string {
			return []string{"--data-dir", dir, "--store", store, "--lease", "0s", "list"}
		}, "--lease 0s: want a positive duration"},
		{"runstate-gateway", func(store string) []string {
			return []string{"--store", store, "--tokens", missing, "--plaintext"}
		}, missing},
		{"conformance-runner", func(store string) []string {
			return []string{"--gateway", missing, "--store", store}
		}, "--gateway: stat " + missing},
	}
	bins := map[string]string{"demo-runner": binaries.Path(t, demoRunnerPkg),
		"runstate-gateway": binaries.Path(t, gatewayPkg), "conformance-runner": binaries.Path(t, conformancePkg)}
	run := func(t *testing.T, command string, args []string) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(bins[command], args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("%s %q: %v (want it refused)\n%s", command, args, err, stderr.String())
		}
		return exit.ExitCode(), stderr.String()
	}

	for _, name := range []string{"memory", "badger:" + filepath.Join(dir, "store"), "mysql:runner:hunter2@tcp(127.0.0.1:1)/runs",
		"postgres:postgres://runner@127.0.0.1:1/runs", "postgresql:host=127.0.0.1 port=1 dbname=runs", "postgres://runner:hunter2@127.0.0.1:1/runs",
		"plugin:./runstate-plugin-badger", "gateway:127.0.0.1:1"} {
		for _, c := range commands {
			code, stderr := run(t, c.name, c.args(name))
			if code != 2 || !strings.Contains(stderr, c.later) || strings.Contains(stderr, "--store") {
				t.Errorf("%s --store %s: exit %d, want 2 from the flag after it (%s):\n%s", c.name, name, code, c.later, stderr)
			}
		}
	}

	for _, bad := range []struct{ name, says string }{
		{"oracle:hunter2", `--store "oracle:…": want memory, badger:PATH, etcd:ENDPOINTS, gateway:HOST:PORT, mysql:DSN, plugin:PATH or postgres:DSN`},
		{"memory:extra", `--store "memory:extra": memory takes nothing after it; want memory, badger:PATH`},
		{"badger:", "--store badger:PATH needs a directory, e.g. badger:.runstate/store"},
		{"mysql:", "--store mysql:DSN needs a DSN, e.g. mysql:user:password@tcp(host:3306)/database"},
		{"mysql:runner:hunter2@tcp(db:3306)", "--store mysql:DSN: invalid DSN"},
		{"postgres:host=db password=hunter2 port=notaport", "--store postgres:DSN: the DSN does not parse"},
		{"postgres://runner:hunter2@[::1", "--store postgres:DSN: the DSN does not parse"},
		{"plugin:", "--store plugin:PATH needs the plugin binary, e.g. plugin:./runstate-plugin-badger"},
		{"gateway:", "--store gateway:HOST:PORT needs the gateway's address, e.g. gateway:runs.example.com:7443"},
	} {
		var first string
		for _, c := range commands {
			code, stderr := run(t, c.name, c.args(bad.name))
			said := strings.TrimSpace(strings.TrimPrefix(stderr, c.name+": "))
			switch {
			case code != 2 || !strings.HasPrefix(said, bad.says):
				t.Errorf("%s --store %s: exit %d, want 2 saying %s:\n%s", c.name, bad.name, code, bad.says, stderr)
			case strings.Contains(stderr, "hunter2"):
				t.Errorf("%s --store %s: the refusal shows the password:\n%s", c.name, bad.name, stderr)
			case first == "":
				first = said
			case said != first:
				t.Errorf("%s --store %s says %q, another command %q", c.name, bad.name, said, first)
			}
		}
	}
}
