package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/otelstore"
	"github.com/runstate/runstate/plugin/plugintest"
	"github.com/runstate/runstate/tracker"
)

const workerToken = "w1-secret-token-do-not-trace"

// chain serves a memory store through a plugin hop and a gateway hop, each
// with the gRPC handlers of the real binaries and the store wrapped on
// each side as the commands wrap it, and returns the store a worker sees.
func chain(t *testing.T) runstate.Store {
	t.Helper()
	ctx := context.Background()
	mem, err := memory.Open(ctx, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plug, err := plugintest.ServeInProcess(ctx, otelstore.Wrap(mem, otelstore.Options{System: "memory"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plug.Close() })
	tokens, err := gateway.ParseTokens([]byte("principals:\n  - name: w1\n    role: operator\n    token_sha256: " + gateway.HashToken(workerToken) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.NewServer(gateway.ServerOptions{Store: otelstore.Wrap(plug.Client.Store(), otelstore.Options{System: "plugin"}),
		Tokens: tokens, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	c, err := gateway.Dial(ctx, lis.Addr().String(), gateway.Options{Token: workerToken, Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, ok := runstate.As[runstate.Store](otelstore.Wrap(c.Store(), otelstore.Options{System: "gateway"}))
	if !ok {
		t.Fatal("the traced gateway store lost its leases")
	}
	return st
}

// TestOneRunIsOneTraceAcrossThePluginAndTheGateway follows a store call of
// a host from the tracker's host span through the gateway and the plugin
// to the memory store, parent by parent.
func TestOneRunIsOneTraceAcrossThePluginAndTheGateway(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	ctx := context.Background()
	st := chain(t)

	tr := tracker.New(st, tracker.Options{Leases: st})
	created, err := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := st.ClaimRun(ctx, runstate.ClaimRunParams{RunID: created.RunID, Owner: runstate.Owner{Worker: "w1", Incarnation: "1"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run, err := tr.Attach(claim.Run, tracker.Lease{Token: claim.Lease.Token, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		func() error { return run.Begin(ctx) },
		func() error { return run.StepStarted(ctx, "greet") },
		func() error { return run.HostStarted(ctx, "greet", "web1") },
		func() error {
			return run.HostFinished(ctx, "greet", "web1", runstate.StepFailed, "", "exit status 1")
		},
		func() error { return run.StepFinished(ctx, "greet", runstate.StepFailed) },
		func() error {
			return run.Finish(ctx, runstate.StatusFailed, &runstate.Diagnostic{ErrorCode: "STEP_FAILED", Message: "greet failed"}, "")
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}

	// A server's span ends after its answer is sent: wait for the last.
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans = exp.GetSpans()
		if len(withName(spans, "UpdateRun", "memory")) >= 6 && len(serverSpans(spans)) >= 2*len(withName(spans, "UpdateRun", "memory")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	runSpan := only(t, spans, "run hello")
	if runSpan.Parent.IsValid() {
		t.Errorf("the run's span has a parent %v; want the root of its trace", runSpan.Parent)
	}
	wantAttrs(t, runSpan, otelstore.RunIDKey.String(created.RunID), otelstore.LeaseTokenKey.Int64(claim.Lease.Token),
		tracker.WorkflowKey.String("hello"), tracker.RunStatusKey.String("failed"))
	if runSpan.Status.Code != codes.Error {
		t.Errorf("the failed run's span has status %v; want Error", runSpan.Status)
	}
	stepSpan := only(t, spans, "step greet")
	wantParent(t, stepSpan, runSpan)
	wantAttrs(t, stepSpan, tracker.StepKey.String("greet"), tracker.StepStatusKey.String("failed"))
	hostSpan := only(t, spans, "host web1")
	wantParent(t, hostSpan, stepSpan)
	wantAttrs(t, hostSpan, tracker.HostKey.String("web1"), tracker.HostStatusKey.String("failed"))

	// The begin's write is the run's child, the step's the step's.
	wantWriteUnder(t, spans, runSpan)
	wantWriteUnder(t, spans, stepSpan)
	// The host's first write, hop by hop down to the memory store.
	write := wantWriteUnder(t, spans, hostSpan)
	wantAttrs(t, write, otelstore.RunIDKey.String(created.RunID), otelstore.LeaseTokenKey.Int64(claim.Lease.Token),
		attribute.String("db.system.name", "gateway"), attribute.String("db.operation.name", "UpdateRun"))
	for _, hop := range []struct{ name, system string }{{"", "plugin"}, {"", "memory"}} {
		client := childOf(t, spans, write, "/UpdateRun", trace.SpanKindClient)
		server := childOf(t, spans, client, "/UpdateRun", trace.SpanKindServer)
		write = childOf(t, spans, server, "UpdateRun", trace.SpanKindClient)
		wantAttrs(t, write, attribute.String("db.system.name", hop.system), otelstore.RunIDKey.String(created.RunID))
		if write.SpanContext.TraceID() != runSpan.SpanContext.TraceID() {
			t.Errorf("the %s store's write is in trace %v; want the run's, %v", hop.system, write.SpanContext.TraceID(), runSpan.SpanContext.TraceID())
		}
	}

	for _, s := range spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), workerToken) {
				t.Errorf("span %s records the bearer token in %s", s.Name, a.Key)
			}
		}
	}
}

func withName(spans tracetest.SpanStubs, name, system string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name && has(s, attribute.String("db.system.name", system)) {
			out = append(out, s)
		}
	}
	return out
}

func serverSpans(spans tracetest.SpanStubs) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			out = append(out, s)
		}
	}
	return out
}

func only(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q; want 1 (spans: %v)", len(found), name, names(spans))
	}
	return found[0]
}

// wantWriteUnder returns the first UpdateRun span of the worker's store
// under parent.
func wantWriteUnder(t *testing.T, spans tracetest.SpanStubs, parent tracetest.SpanStub) tracetest.SpanStub {
	t.Helper()
	return childOf(t, spans, parent, "UpdateRun", trace.SpanKindClient)
}

// childOf returns the earliest span of kind under parent whose name ends
// with name.
func childOf(t *testing.T, spans tracetest.SpanStubs, parent tracetest.SpanStub, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	var found *tracetest.SpanStub
	for i, s := range spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() && strings.HasSuffix(s.Name, name) && s.SpanKind == kind &&
			(found == nil || s.StartTime.Before(found.StartTime)) {
			found = &spans[i]
		}
	}
	if found == nil {
		t.Fatalf("no %v span %q under %q (spans: %v)", kind, name, parent.Name, names(spans))
	}
	return *found
}

func wantParent(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("span %q's parent is %v; want %q (%v)", child.Name, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
	}
}

func has(s tracetest.SpanStub, want attribute.KeyValue) bool {
	for _, a := range s.Attributes {
		if a.Key == want.Key && a.Value == want.Value {
			return true
		}
	}
	return false
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want ...attribute.KeyValue) {
	t.Helper()
	for _, w := range want {
		if !has(s, w) {
			t.Errorf("span %q lacks %s=%s; it has %v", s.Name, w.Key, w.Value.Emit(), s.Attributes)
		}
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
