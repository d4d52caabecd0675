package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/runstate/runstate/internal/tracing"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestTracingIsOffUnlessTheEnvironmentAsksForAnExporter(t *testing.T) {
	for _, vars := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_TRACES_EXPORTER": "console,none"},
		{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"},
	} {
		got, err := tracing.Setup(context.Background(), tracing.SetupParams{Service: "test", Getenv: env(vars)})
		if err != nil || got.Enabled {
			t.Errorf("%v: enabled %v, error %v; want off", vars, got.Enabled, err)
		}
		if err := got.Shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutting down nothing: %v", vars, err)
		}
	}
}

func TestAnExporterSetupCannotMakeIsRefusedNamingTheVariable(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		name string // the variable the error names
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
	} {
		got, err := tracing.Setup(context.Background(), tracing.SetupParams{Service: "test", Getenv: env(c.vars)})
		if !errors.Is(err, tracing.ErrConfig) || !strings.Contains(err.Error(), c.name) || got.Enabled {
			t.Errorf("%v: enabled %v, error %v; want an ErrConfig naming %s", c.vars, got.Enabled, err, c.name)
		}
	}
}

func TestTheConsoleExporterWritesSpansWhereItIsTold(t *testing.T) {
	var out bytes.Buffer
	got, err := tracing.Setup(context.Background(), tracing.SetupParams{Service: "test-service", Console: &out,
		Getenv: env(map[string]string{"OTEL_TRACES_EXPORTER": "console"})})
	if err != nil || !got.Enabled {
		t.Fatalf("enabled %v, error %v; want on", got.Enabled, err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "a-console-span")
	span.End()
	if err := got.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"a-console-span"`, `"test-service"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the console exporter wrote %q; want %s in it", out.String(), want)
		}
	}
}
