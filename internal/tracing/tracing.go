// Package tracing turns OpenTelemetry tracing on in the product's commands
// from the standard OTEL_* environment variables, and gives the plugin and
// the gateway the gRPC stats handlers that carry a trace across their hop.
//
// Tracing is off unless the environment asks for an exporter: then
// nothing is exported, and the instrumentation costs a no-op tracer.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/runstate/runstate/protocol/pb"
)

// SetupParams configure Setup.
type SetupParams struct {
	// Service is service.name unless OTEL_SERVICE_NAME says otherwise.
	Service string
	// Console receives the console exporter's spans, one JSON object a
	// line; nil means os.Stderr. Not stdout: the commands print their
	// results there, and a plugin's stdout carries go-plugin's handshake.
	Console io.Writer
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// Tracing is what Setup installed.
type Tracing struct {
	// Enabled: spans are exported.
	Enabled bool
	// Shutdown exports the spans still buffered; call it before exiting.
	Shutdown func(context.Context) error
}

// ErrConfig: the OTEL_* environment asks for something Setup cannot do.
var ErrConfig = errors.New("tracing configuration")

// Setup reads the environment and, when it asks for an exporter,
// installs a global tracer provider exporting to it and the W3C trace
// context and baggage propagators:
//
//   - OTEL_SDK_DISABLED=true turns everything off;
//   - OTEL_TRACES_EXPORTER is a comma-separated list of otlp, console and
//     none; unset, it is otlp when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, else none (the
//     specification's default is otlp: the commands stay quiet instead);
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
//     chooses grpc or http/protobuf (the default); the OTLP exporters read
//     their endpoint, headers, TLS and timeout variables themselves;
//   - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
//     OTEL_BSP_* are the SDK's.
//
// A configuration it cannot honour is an ErrConfig naming the variable.
func Setup(ctx context.Context, p SetupParams) (Tracing, error) {
	off := Tracing{Shutdown: func(context.Context) error { return nil }}
	getenv := p.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return off, nil
	}
	names, err := exporterNames(getenv)
	if err != nil || len(names) == 0 {
		return off, err
	}
	var opts []sdktrace.TracerProviderOption
	for _, name := range names {
		exp, err := newExporter(ctx, name, p, getenv)
		if err != nil {
			return off, err
		}
		if name == "console" {
			// Console spans are for a person watching: each is written as
			// it ends, and a plugin's before its host stops reading them.
			opts = append(opts, sdktrace.WithSyncer(exp))
			continue
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(p.Service)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return off, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES: %v", ErrConfig, err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return Tracing{Enabled: true, Shutdown: tp.Shutdown}, nil
}

// exporterNames returns the exporters the environment asks for, none
// meaning tracing stays off.
func exporterNames(getenv func(string) string) ([]string, error) {
	v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			return []string{"otlp"}, nil
		}
		return nil, nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		switch n = strings.TrimSpace(n); n {
		case "none":
			return nil, nil
		case "otlp", "console":
			names = append(names, n)
		default:
			return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: want otlp, console or none", ErrConfig, v)
		}
	}
	return names, nil
}

func newExporter(ctx context.Context, name string, p SetupParams, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if name == "console" {
		w := p.Console
		if w == nil {
			w = os.Stderr
		}
		return stdouttrace.New(stdouttrace.WithWriter(w))
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", ErrConfig, protocol)
}

// storeService is the full name of the protocol's gRPC service: only its
// calls are traced, not health checks nor go-plugin's own streams (its
// standard I/O stream lives as long as the plugin).
var storeService = "/" + pb.RunStateStore_ServiceDesc.ServiceName + "/"

// defaultProvider is the global tracer provider before anyone installs
// one: a no-op.
var defaultProvider = otel.GetTracerProvider()

// storeCalls says which calls the handlers trace: the store's, and only
// once a tracer provider is installed (by Setup or by the program that
// embeds a plugin host or a gateway client), so that a process without
// tracing spends nothing on the handlers beyond this test.
func storeCalls(info *stats.RPCTagInfo) bool {
	return otel.GetTracerProvider() != defaultProvider && strings.HasPrefix(info.FullMethodName, storeService)
}

// ServerOption is the stats handler a store's gRPC server (a plugin, the
// gateway) continues the caller's trace with: a server span per store
// call, the child of the caller's client span. It uses the global tracer
// provider and propagators, and does nothing until Setup or the embedding
// program installs a tracer provider.
func ServerOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(storeCalls)))
}

// DialOption is the stats handler a store's gRPC client (the plugin host,
// a gateway client) sends its trace context with: a client span per call.
func DialOption() grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithFilter(storeCalls)))
}

// DBSystem is the db.system.name of a store of kind scheme (a store
// name's scheme, docs/gateway.md#store-names): the semantic conventions'
// name where they have one.
func DBSystem(scheme string) string {
	if scheme == "postgres" {
		return "postgresql"
	}
	return scheme
}
