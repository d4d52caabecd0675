// Package otelstore traces the calls of a runstate store: each call is an
// OpenTelemetry client span that follows the database semantic
// conventions, the child of the span in the call's context.
//
// A span is named after the operation (UpdateRun, ClaimRuns…) and carries
// db.system.name (Options.System), db.operation.name, db.operation.batch.size
// for a batch, and, when the call names them, runstate.run.id and
// runstate.lease.token. A failed call sets the span's status to Error with
// the error's runstate code (NOT_FOUND, LEASE_LOST…) in error.type and
// db.response.status_code; the error's text is not recorded, as it may
// quote input. Nothing else of the call's input or output is recorded.

package otelstore

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/runstate/runstate"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/runstate/runstate/otelstore"

// Attribute keys of runstate's own, shared with the tracker's spans.
const (
	RunIDKey      = attribute.Key("runstate.run.id")
	LeaseTokenKey = attribute.Key("runstate.lease.token")
)

// Options configure Wrap.
type Options struct {
	// TracerProvider makes the tracer; nil means the global one.
	TracerProvider trace.TracerProvider
	// System is db.system.name: the store's kind (memory, badger, mysql,
	// postgresql, plugin, gateway); default "runstate".
	System string
}

// Wrap returns store with every call traced. Its Features are store's,
// asked of store at each call, each traced; a feature this package does
// not know yet passes through untraced rather than lost
// (runstate.Features). It also has Close() error, which closes store when
// store has such a method and else does nothing. Other methods of store
// are hidden: Unwrap returns it.
func Wrap(store runstate.RunStateStore, opts Options) runstate.RunStateStore {
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if opts.System == "" {
		opts.System = "runstate"
	}
	t := &tracer{tracer: tp.Tracer(ScopeName), system: semconv.DBSystemNameKey.String(opts.System)}
	return runs{store, t}
}

// Unwrap returns the store Wrap wrapped, or store itself when Wrap did not
// make it.
func Unwrap(store runstate.RunStateStore) runstate.RunStateStore {
	if u, ok := store.(interface{ unwrap() runstate.RunStateStore }); ok {
		return u.unwrap()
	}
	return store
}

type tracer struct {
	tracer trace.Tracer
	system attribute.KeyValue
}

// start opens the span of operation op.
func (t *tracer) start(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, t.system, semconv.DBOperationName(op))...))
}

// end closes span with err's outcome.
func end(span trace.Span, err error) {
	if err != nil {
		code := string(runstate.CodeOf(err))
		span.SetAttributes(semconv.ErrorTypeKey.String(code), semconv.DBResponseStatusCode(code))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

// call traces one call of op.
func call[T any](ctx context.Context, t *tracer, op string, attrs []attribute.KeyValue, fn func(context.Context) (T, error)) (T, error) {
	ctx, span := t.start(ctx, op, attrs...)
	out, err := fn(ctx)
	end(span, err)
	return out, err
}

func run(id string) []attribute.KeyValue {
	if id == "" {
		return nil
	}
	return []attribute.KeyValue{RunIDKey.String(id)}
}

func runAndToken(id string, token int64) []attribute.KeyValue {
	attrs := run(id)
	if token != 0 {
		attrs = append(attrs, LeaseTokenKey.Int64(token))
	}
	return attrs
}

func batch(n int) []attribute.KeyValue {
	return []attribute.KeyValue{semconv.DBOperationBatchSize(n)}
}

// runs traces runstate.RunStateStore.
type runs struct {
	inner runstate.RunStateStore
	t     *tracer
}

func (s runs) unwrap() runstate.RunStateStore { return s.inner }

// Features implements runstate.RunStateStore: the wrapped store's, traced.
func (s runs) Features() runstate.Features {
	f := runstate.Resolve(s.inner)
	if f.Leases != nil {
		f.Leases = leases{f.Leases, s.t}
	}
	if f.LeaseReader != nil {
		f.LeaseReader = reader{f.LeaseReader, s.t}
	}
	if f.BatchCreator != nil {
		f.BatchCreator = creator{f.BatchCreator, s.t}
	}
	if f.BatchUpdater != nil {
		f.BatchUpdater = updater{f.BatchUpdater, s.t}
	}
	if f.BatchClaimer != nil {
		f.BatchClaimer = claimer{f.BatchClaimer, s.t}
	}
	if f.RunnableWatcher != nil {
		f.RunnableWatcher = watcher{f.RunnableWatcher, s.t}
	}
	if f.RunWatcher != nil {
		f.RunWatcher = runWatcher{f.RunWatcher, s.t}
	}
	return f
}

// Close closes the wrapped store when it can be closed.
func (s runs) Close() error {
	if c, ok := s.inner.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

func (s runs) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	return call(ctx, s.t, "CreateRun", run(p.RunID), func(ctx context.Context) (runstate.RunSnapshot, error) {
		out, err := s.inner.CreateRun(ctx, p)
		if err == nil && p.RunID == "" {
			trace.SpanFromContext(ctx).SetAttributes(RunIDKey.String(out.RunID))
		}
		return out, err
	})
}

func (s runs) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return call(ctx, s.t, "UpdateRun", runAndToken(p.RunID, p.LeaseToken), func(ctx context.Context) (runstate.RunSnapshot, error) {
		return s.inner.UpdateRun(ctx, p)
	})
}

func (s runs) GetRun(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	return call(ctx, s.t, "GetRun", run(runID), func(ctx context.Context) (runstate.RunSnapshot, error) {
		return s.inner.GetRun(ctx, runID)
	})
}

func (s runs) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	return call(ctx, s.t, "ListRuns", nil, func(ctx context.Context) (runstate.RunPage, error) {
		return s.inner.ListRuns(ctx, p)
	})
}

func (s runs) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	return call(ctx, s.t, "ListAuditEvents", run(p.RunID), func(ctx context.Context) (runstate.AuditPage, error) {
		return s.inner.ListAuditEvents(ctx, p)
	})
}

// leases traces runstate.LeaseStore.
type leases struct {
	inner runstate.LeaseStore
	t     *tracer
}

// claimed records the claimed run and its token on the span in ctx.
func claimed(ctx context.Context, c runstate.Claim) {
	trace.SpanFromContext(ctx).SetAttributes(runAndToken(c.Run.RunID, c.Lease.Token)...)
}

func (s leases) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	return call(ctx, s.t, "ClaimRun", run(p.RunID), func(ctx context.Context) (runstate.Claim, error) {
		c, err := s.inner.ClaimRun(ctx, p)
		if err == nil {
			claimed(ctx, c)
		}
		return c, err
	})
}

func (s leases) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	return call(ctx, s.t, "ClaimNextRun", nil, func(ctx context.Context) (runstate.Claim, error) {
		c, err := s.inner.ClaimNextRun(ctx, p)
		if err == nil {
			claimed(ctx, c)
		}
		return c, err
	})
}

func (s leases) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	return call(ctx, s.t, "RenewLease", runAndToken(p.RunID, p.Token), func(ctx context.Context) (runstate.Lease, error) {
		return s.inner.RenewLease(ctx, p)
	})
}

func (s leases) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	_, err := call(ctx, s.t, "ReleaseLease", runAndToken(p.RunID, p.Token), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.inner.ReleaseLease(ctx, p)
	})
	return err
}

func (s leases) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	return call(ctx, s.t, "ListRunnableRuns", nil, func(ctx context.Context) (runstate.RunPage, error) {
		return s.inner.ListRunnableRuns(ctx, p)
	})
}

// reader traces runstate.LeaseReader.
type reader struct {
	inner runstate.LeaseReader
	t     *tracer
}

func (s reader) GetLease(ctx context.Context, runID string) (runstate.Lease, error) {
	return call(ctx, s.t, "GetLease", run(runID), func(ctx context.Context) (runstate.Lease, error) {
		return s.inner.GetLease(ctx, runID)
	})
}

// creator traces runstate.BatchCreator.
type creator struct {
	inner runstate.BatchCreator
	t     *tracer
}

func (s creator) CreateRuns(ctx context.Context, p runstate.CreateRunsParams) (runstate.CreateRunsResult, error) {
	return call(ctx, s.t, "CreateRuns", batch(len(p.Runs)), func(ctx context.Context) (runstate.CreateRunsResult, error) {
		return s.inner.CreateRuns(ctx, p)
	})
}

// updater traces runstate.BatchUpdater.
type updater struct {
	inner runstate.BatchUpdater
	t     *tracer
}

func (s updater) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	return call(ctx, s.t, "UpdateRuns", batch(len(p.Updates)), func(ctx context.Context) (runstate.UpdateRunsResult, error) {
		return s.inner.UpdateRuns(ctx, p)
	})
}

// claimer traces runstate.BatchClaimer.
type claimer struct {
	inner runstate.BatchClaimer
	t     *tracer
}

func (s claimer) ClaimRuns(ctx context.Context, p runstate.ClaimRunsParams) (runstate.ClaimRunsResult, error) {
	return call(ctx, s.t, "ClaimRuns", batch(p.Max), func(ctx context.Context) (runstate.ClaimRunsResult, error) {
		out, err := s.inner.ClaimRuns(ctx, p)
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("runstate.claims", len(out.Claims)))
		return out, err
	})
}

// watcher traces runstate.RunnableWatcher: the span covers setting the
// watch up, not the wait.
type watcher struct {
	inner runstate.RunnableWatcher
	t     *tracer
}

func (s watcher) WatchRunnable(ctx context.Context, p runstate.WatchRunnableParams) (<-chan struct{}, error) {
	_, span := s.t.start(ctx, "WatchRunnable")
	ch, err := s.inner.WatchRunnable(ctx, p)
	end(span, err)
	return ch, err
}

// runWatcher traces runstate.RunWatcher as watcher does.
type runWatcher struct {
	inner runstate.RunWatcher
	t     *tracer
}

func (s runWatcher) WatchRun(ctx context.Context, p runstate.WatchRunParams) (<-chan struct{}, error) {
	_, span := s.t.start(ctx, "WatchRun", run(p.RunID)...)
	ch, err := s.inner.WatchRun(ctx, p)
	end(span, err)
	return ch, err
}
