package tracker_test

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/otelstore"
	"github.com/runstate/runstate/tracker"
)

// TestSpansOfARunLeftWaiting: hosts in parallel each get a span under
// their step's, their writes are their children, and a run the engine
// lets go while waiting ends its spans as they are, once.
func TestSpansOfARunLeftWaiting(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	st := otelstore.Wrap(memorytest.Open(t, nil), otelstore.Options{TracerProvider: tp})
	tr := tracker.New(st, tracker.Options{TracerProvider: tp})
	ctx := context.Background()
	created, err := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := tr.Attach(created, tracker.Lease{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, run.Begin(ctx))
	must(t, run.StepStarted(ctx, "ship"))
	var wg sync.WaitGroup
	for _, host := range []string{"a", "b", "c"} {
		wg.Go(func() {
			if err := run.HostStarted(ctx, "ship", host); err != nil {
				t.Error(err)
			}
			if err := run.HostFinished(ctx, "ship", host, runstate.StepSuccess, "ok", ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	must(t, run.StepFinished(ctx, "ship", runstate.StepSuccess))
	must(t, run.StepStarted(ctx, "approve"))
	must(t, run.Wait(ctx, "waiting for approval"))
	run.End()
	run.End()
	must(t, run.Resume(ctx, "approve")) // after End: store spans only

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if n := len(byName["run deploy"]); n != 1 {
		t.Fatalf("%d run spans; want 1", n)
	}
	runSpan := byName["run deploy"][0]
	if v := attr(runSpan, tracker.RunStatusKey); v != "waiting" {
		t.Errorf("the run span's status is %q; want waiting", v)
	}
	ship, approve := byName["step ship"], byName["step approve"]
	if len(ship) != 1 || len(approve) != 1 {
		t.Fatalf("step spans: ship %d, approve %d; want one each", len(ship), len(approve))
	}
	for _, step := range []sdktrace.ReadOnlySpan{ship[0], approve[0]} {
		if step.Parent().SpanID() != runSpan.SpanContext().SpanID() {
			t.Errorf("%s is not the run span's child", step.Name())
		}
	}
	if v := attr(approve[0], tracker.StepStatusKey); v != "" {
		t.Error("the wait step's span, ended with the run's, claims a status of its own")
	}
	hostIDs := map[string]bool{}
	for _, host := range []string{"a", "b", "c"} {
		spans := byName["host "+host]
		if len(spans) != 1 || spans[0].Parent().SpanID() != ship[0].SpanContext().SpanID() {
			t.Fatalf("host %s: %d spans; want one under step ship", host, len(spans))
		}
		hostIDs[spans[0].SpanContext().SpanID().String()] = true
	}
	writes := 0
	for _, w := range byName["UpdateRun"] {
		if hostIDs[w.Parent().SpanID().String()] {
			writes++
		}
	}
	if writes != 6 {
		t.Errorf("%d writes under host spans; want 6 (each host's start and finish)", writes)
	}
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
