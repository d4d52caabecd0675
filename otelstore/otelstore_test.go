package otelstore_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/otelstore"
)

// TestTracedStoreConforms: the wrapper changes nothing of what a store
// does, its batches and lease reader included.
func TestTracedStoreConforms(t *testing.T) {
	target := memorytest.Target(true)
	newHarness := target.NewHarness
	target.Name = "memory (traced)"
	target.NewHarness = func(ctx context.Context) (conformance.Harness, error) {
		h, err := newHarness(ctx)
		return traced{h}, err
	}
	conformance.Run(t, target)
}

type traced struct{ conformance.Harness }

func (h traced) Store() runstate.RunStateStore {
	return otelstore.Wrap(h.Harness.Store(), otelstore.Options{})
}

func (h traced) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	s, err := h.Harness.OpenHandle(ctx)
	if err != nil {
		return nil, err
	}
	return otelstore.Wrap(s, otelstore.Options{}), nil
}

// Stores with some of the optional interfaces.

func TestCallsAreDatabaseClientSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	st, _ := runstate.As[runstate.Store](otelstore.Wrap(memorytest.Open(t, nil), otelstore.Options{TracerProvider: tp, System: "memory"}))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")

	run, err := st.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := st.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "a", Incarnation: "1"}, TTL: 60e9})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 99, LeaseToken: claim.Lease.Token, Status: "running"})
	if !errors.Is(err, runstate.ErrVersionConflict) {
		t.Fatalf("UpdateRun at a stale version: %v; want ErrVersionConflict", err)
	}
	parent.End()

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans; want CreateRun, ClaimRun, UpdateRun and the caller's", len(spans))
	}
	runID, token := otelstore.RunIDKey.String(run.RunID), otelstore.LeaseTokenKey.Int64(claim.Lease.Token)
	for i, want := range []struct {
		name  string
		attrs []attribute.KeyValue
	}{
		{"CreateRun", []attribute.KeyValue{runID}},
		{"ClaimRun", []attribute.KeyValue{runID, token}},
		{"UpdateRun", []attribute.KeyValue{runID, token, attribute.String("error.type", "VERSION_CONFLICT"),
			attribute.String("db.response.status_code", "VERSION_CONFLICT")}},
	} {
		s := spans[i]
		if s.Name() != want.name || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %s, kind %v, parent %v; want a client span %s under the caller's", i, s.Name(), s.SpanKind(), s.Parent().SpanID(), want.name)
		}
		attrs := attribute.NewSet(s.Attributes()...)
		for _, a := range append(want.attrs, attribute.String("db.system.name", "memory"), attribute.String("db.operation.name", want.name)) {
			if v, ok := attrs.Value(a.Key); !ok || v != a.Value {
				t.Errorf("span %s: %s=%q; want %q", s.Name(), a.Key, v.Emit(), a.Value.Emit())
			}
		}
	}
	if st := spans[2].Status(); st.Code != codes.Error {
		t.Errorf("the refused UpdateRun's span has status %v; want Error", st)
	}
	if st := spans[0].Status(); st.Code == codes.Error {
		t.Errorf("CreateRun's span has status %v; want no error", st)
	}
}
