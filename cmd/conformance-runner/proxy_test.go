package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
)

// The PostgreSQL plugin reaches its server through a fault proxy the
// runner starts per check: the FAULT rules of partitions, resets and a
// slow link run through the plugin process.
func TestPostgresPluginBehindAFaultProxy(t *testing.T) {
	t.Parallel() // its processes, databases and files are its own
	backend, dsn := sqltest.PostgresBehindProxy(t, sqltest.Postgres.Find(t).DSN(), "{{proxy}}")
	got, caps, _ := outcomes(t, "--plugin", bin(t, postgresPkg), "--proxy-backend", backend, "--config", "dsn="+dsn,
		"--config", "schema=runs_{{unique}}", "--config", "scratch_schema=true", "--run", "FAULT-001,FAULT-004,FAULT-007")
	for _, f := range []conformance.Fault{conformance.FaultPartition, conformance.FaultReset, conformance.FaultDelay} {
		if !slices.Contains(caps.Faults, f) {
			t.Errorf("the target declares %v, want the proxy's fault %s", caps, f)
		}
	}
	for _, id := range []string{"FAULT-001", "FAULT-004", "FAULT-007"} {
		if got[id] != conformance.Pass {
			t.Errorf("%s through the proxy: %s, want pass", id, got[id])
		}
	}
}

// A proxy that no configuration value sends the plugin through would
// certify faults that never reach it: refused before anything starts.
func TestAProxyTheConfigDoesNotNameIsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--plugin", "x", "--proxy-backend", "127.0.0.1:5432", "--config", "dsn=postgres://u@127.0.0.1:5432/db"},
		{"--adapter", "postgres", "--proxy-backend", "127.0.0.1:5432", "--config", "dsn=postgres://u@{{proxy}}/db"},
		{"--plugin", "x", "--proxy-backend", "no-port", "--config", "dsn=postgres://u@{{proxy}}/db"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "--proxy-backend") {
			t.Errorf("%v: exit %d, want %d naming --proxy-backend\n%s", args, code, exitUsage, stderr)
		}
	}
}
