package main

import (
	"strings"
	"testing"
)

// TestTracesAreExportedOnlyWhenTheEnvironmentAsks runs the bundled
// workflow three times: without OTEL_* variables (no span), with the
// console exporter (the run's, steps', hosts' and store calls' spans on
// stderr), and with an exporter it does not know (refused, exit 2).
func TestTracesAreExportedOnlyWhenTheEnvironmentAsks(t *testing.T) {
	off := []string{"OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="}
	_, errOut, code := demoWithEnv(t, off, "--data-dir", t.TempDir(), "run", "../../examples/workflows/hello.yaml")
	if code != 0 || strings.Contains(errOut, `"SpanContext"`) {
		t.Fatalf("without OTEL_*: exit %d, spans on stderr:\n%s", code, errOut)
	}

	out, errOut, code := demoWithEnv(t, append(off, "OTEL_TRACES_EXPORTER=console"), "--data-dir", t.TempDir(), "run", "../../examples/workflows/hello.yaml")
	if code != 0 {
		t.Fatalf("with the console exporter: exit %d\n%s", code, errOut)
	}
	runID := strings.Fields(out)[0]
	for _, want := range []string{`"Name":"run hello"`, `"Name":"step greet"`, `"Name":"host alpha"`, `"Name":"UpdateRun"`,
		`"Value":"` + runID + `"`, `"Key":"db.system.name","Value":{"Type":"STRING","Value":"badger"}`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("with the console exporter, stderr lacks %s:\n%s", want, errOut)
		}
	}
	if strings.Contains(out, `"SpanContext"`) {
		t.Errorf("spans on stdout, which carries the results:\n%s", out)
	}

	_, errOut, code = demoWithEnv(t, append(off, "OTEL_TRACES_EXPORTER=zipkin"), "--data-dir", t.TempDir(), "run", "../../examples/workflows/hello.yaml")
	if code != exitUsage || !strings.Contains(errOut, "OTEL_TRACES_EXPORTER") {
		t.Errorf("OTEL_TRACES_EXPORTER=zipkin: exit %d, want %d naming the variable:\n%s", code, exitUsage, errOut)
	}
}
