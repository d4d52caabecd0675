package tracker

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/otelstore"
)

// ScopeName is the instrumentation scope of the tracker's spans.
const ScopeName = "github.com/runstate/runstate/tracker"

// Attribute keys of the run, step and host spans (docs/tracing.md).
const (
	WorkflowKey   = attribute.Key("runstate.workflow.name")
	AttemptKey    = attribute.Key("runstate.run.attempt")
	RunStatusKey  = attribute.Key("runstate.run.status")
	StepKey       = attribute.Key("runstate.step.name")
	StepStatusKey = attribute.Key("runstate.step.status")
	HostKey       = attribute.Key("runstate.host.name")
	HostStatusKey = attribute.Key("runstate.host.status")
)

// spans are the open spans of one execution of a run: the run's, from the
// first call that carries a context until the run ends or the engine lets
// it go (Run.End), and each running step's and host's within it. The store
// calls of a tracker method are children of the innermost span it concerns.
type spans struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue // the run's: its ID, workflow, attempt and lease token
	name   string

	mu    sync.Mutex
	run   trace.Span // nil until started
	steps map[string]trace.Span
	hosts map[[2]string]trace.Span
	ended bool
}

func newSpans(tracer trace.Tracer, run runstate.RunSnapshot, lease Lease) *spans {
	attrs := []attribute.KeyValue{otelstore.RunIDKey.String(run.RunID), WorkflowKey.String(run.WorkflowName), AttemptKey.Int(run.Attempt)}
	if lease.Token != 0 {
		attrs = append(attrs, otelstore.LeaseTokenKey.Int64(lease.Token))
	}
	return &spans{tracer: tracer, attrs: attrs, name: "run " + run.WorkflowName,
		steps: map[string]trace.Span{}, hosts: map[[2]string]trace.Span{}}
}

// startRun starts the run's span, as a child of ctx's, unless it was
// started or has ended; mu is held.
func (s *spans) startRun(ctx context.Context) {
	if s.run == nil && !s.ended {
		_, s.run = s.tracer.Start(ctx, s.name, trace.WithAttributes(s.attrs...))
	}
}

// context returns ctx under the innermost open span of host, else of
// step, else of the run, starting the run's span when start is set.
func (s *spans) context(ctx context.Context, step, host string, start bool) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if start {
		s.startRun(ctx)
	}
	if sp, ok := s.hosts[[2]string{step, host}]; ok && host != "" {
		return trace.ContextWithSpan(ctx, sp)
	}
	if sp, ok := s.steps[step]; ok && step != "" {
		return trace.ContextWithSpan(ctx, sp)
	}
	if s.run != nil {
		return trace.ContextWithSpan(ctx, s.run)
	}
	return ctx
}

// startStep opens step's span under the run's.
func (s *spans) startStep(ctx context.Context, step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startRun(ctx)
	if _, ok := s.steps[step]; ok || s.ended {
		return
	}
	_, s.steps[step] = s.tracer.Start(trace.ContextWithSpan(ctx, s.run), "step "+step,
		trace.WithAttributes(s.attrs[0], StepKey.String(step)))
}

// startHost opens host's span under its step's (the run's when the step
// has none open).
func (s *spans) startHost(ctx context.Context, step, host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startRun(ctx)
	key := [2]string{step, host}
	if _, ok := s.hosts[key]; ok || s.ended {
		return
	}
	parent, ok := s.steps[step]
	if !ok {
		parent = s.run
	}
	_, s.hosts[key] = s.tracer.Start(trace.ContextWithSpan(ctx, parent), "host "+host,
		trace.WithAttributes(s.attrs[0], StepKey.String(step), HostKey.String(host)))
}

// endStep ends step's span with its status, or with the error that kept
// the status from being written.
func (s *spans) endStep(step string, status runstate.StepStatus, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp, ok := s.steps[step]; ok {
		delete(s.steps, step)
		endWith(sp, StepStatusKey, string(status), status == runstate.StepFailed, err)
	}
}

func (s *spans) endHost(step, host string, status runstate.StepStatus, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]string{step, host}
	if sp, ok := s.hosts[key]; ok {
		delete(s.hosts, key)
		endWith(sp, HostStatusKey, string(status), status == runstate.StepFailed, err)
	}
}

// endAll ends every open span, the run's last, with the run's status.
func (s *spans) endAll(status runstate.RunStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	for key, sp := range s.hosts {
		endWith(sp, HostStatusKey, "", false, nil)
		delete(s.hosts, key)
	}
	for step, sp := range s.steps {
		endWith(sp, StepStatusKey, "", false, nil)
		delete(s.steps, step)
	}
	if s.run != nil {
		endWith(s.run, RunStatusKey, string(status), status.RequiresDiagnostic() || status == runstate.StatusInterrupted, nil)
	}
}

// endWith records the status the span's subject reached (none: it was
// left as it was) and ends it; failed or err marks it an error, with
// err's runstate code, never its text.
func endWith(sp trace.Span, key attribute.Key, status string, failed bool, err error) {
	if status != "" {
		sp.SetAttributes(key.String(status))
	}
	switch {
	case err != nil:
		sp.SetStatus(codes.Error, string(runstate.CodeOf(err)))
	case failed:
		sp.SetStatus(codes.Error, status)
	}
	sp.End()
}
