package spec_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/spec"
)

func TestErrorsMatchByCode(t *testing.T) {
	sentinels := []error{spec.ErrNotFound, spec.ErrAlreadyExists, spec.ErrVersionConflict, spec.ErrInvalidTransition,
		spec.ErrMissingDiagnostic, spec.ErrInvalidArgument, spec.ErrLeaseHeld, spec.ErrLeaseLost, spec.ErrNotClaimable, spec.ErrUnavailable, spec.ErrPermissionDenied, spec.ErrUnauthenticated}
	codes := map[spec.Code]bool{}
	for _, s := range sentinels {
		code := spec.CodeOf(s)
		if code == "" || codes[code] || !errors.Is(s, s) {
			t.Fatalf("sentinel %v: code %q, seen before %v", s, code, codes[code])
		}
		codes[code] = true
		detailed := &spec.Error{Code: code, Message: "details", RunID: "r1"}
		wrapped := fmt.Errorf("adapter: %w", detailed)
		for _, other := range sentinels {
			if got, want := errors.Is(wrapped, other), other == s; got != want {
				t.Errorf("errors.Is(%s error, %v) = %v", code, other, got)
			}
		}
		if spec.CodeOf(wrapped) != code {
			t.Errorf("CodeOf = %q, want %q", spec.CodeOf(wrapped), code)
		}
		// A sentinel is a value: nothing a caller holds can change it.
		var e *spec.Error
		if errors.As(s, &e) {
			t.Errorf("sentinel %v is a shared *spec.Error, which a caller could change", s)
		}
	}
	if spec.CodeOf(errors.New("plain")) != "" || spec.CodeOf(nil) != "" {
		t.Error("CodeOf of a non-spec error must be empty")
	}
	cause := errors.New("connection refused")
	if err := spec.Unavailable("store unreachable", cause); !errors.Is(err, cause) || !errors.Is(err, spec.ErrUnavailable) {
		t.Error("Unavailable must match both the sentinel and its cause")
	}
}

func TestTransitionTable(t *testing.T) {
	allowed := 0
	for _, from := range spec.RunStatuses() {
		for _, to := range spec.RunStatuses() {
			if spec.CanTransition(from, to) {
				allowed++
				if from.Terminal() {
					t.Errorf("terminal %s may move to %s", from, to)
				}
			}
		}
	}
	if allowed != 11 {
		t.Errorf("%d allowed pairs, want the 11 of docs/spec.md §1.2", allowed)
	}
	for alias, want := range map[string]spec.RunStatus{"created": spec.StatusQueued, "pending": spec.StatusQueued, "running": spec.StatusRunning} {
		if got, err := spec.ParseRunStatus(alias); err != nil || got != want {
			t.Errorf("ParseRunStatus(%q) = %q, %v", alias, got, err)
		}
	}
	if _, err := spec.ParseRunStatus("done"); !errors.Is(err, spec.ErrInvalidArgument) {
		t.Errorf("unknown status: %v", err)
	}
}

func TestErrorMessagesSayWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		err  *spec.Error
		want string
	}{
		{&spec.Error{Code: spec.CodeNotFound, RunID: "r1"}, "runstate: not found (run r1)"},
		{&spec.Error{Code: spec.CodeLeaseLost, Message: "run r1: the lease was released", RunID: "r1"}, "runstate: run r1: the lease was released"},
		{&spec.Error{Code: spec.CodeUnavailable, Message: "store down", Cause: errors.New("dial tcp: refused")}, "runstate: store down: dial tcp: refused"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// conflicting is a store whose updates always lose to another writer.
type conflicting struct{ spec.RunStateStore }

func (s conflicting) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (spec.RunSnapshot, error) {
	return spec.RunSnapshot{}, &spec.Error{Code: spec.CodeVersionConflict, RunID: p.RunID, ExpectedVersion: p.ExpectedVersion, CurrentVersion: p.ExpectedVersion + 1}
}

type countingGets struct {
	spec.RunStateStore
	gets *int
}

func (s countingGets) GetRun(ctx context.Context, id string) (spec.RunSnapshot, error) {
	*s.gets++
	return s.RunStateStore.GetRun(ctx, id)
}

// Recovery decides afresh after a conflict, but gives up on a run that
// keeps changing instead of retrying forever.
func TestRecoveryGivesUpOnARunThatKeepsChanging(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	run, _ := store.CreateRun(ctx, spec.CreateRunParams{WorkflowName: "w"})
	store.UpdateRun(ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"})
	gets := 0
	leaseless := struct{ spec.RunStateStore }{countingGets{conflicting{store}, &gets}}
	_, err := spec.RecoverExclusive(ctx, leaseless, spec.RecoveryOptions{Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, spec.ErrVersionConflict) {
		t.Fatalf("recovery of a run that keeps changing: %v", err)
	}
	// One read to decide, then one after each of the first four conflicts.
	if gets != 5 {
		t.Errorf("%d reads of the run, want 5", gets)
	}
}

// releaseFails is a store whose releases fail.
type releaseFails struct{ *memory.Store }

func (s releaseFails) ReleaseLease(context.Context, spec.ReleaseLeaseParams) error {
	return spec.Unavailable("release failed on purpose", nil)
}

// A release that fails after recovery settled a run is reported in the log.
func TestRecoveryLogsAFailedRelease(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	run, _ := store.CreateRun(ctx, spec.CreateRunParams{WorkflowName: "w"})
	store.UpdateRun(ctx, spec.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"})
	var log strings.Builder
	_, err := spec.Recover(ctx, releaseFails{store}, spec.RecoveryOptions{Owner: spec.Owner{Worker: "r"}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(log.String(), "could not release") != 1 {
		t.Errorf("log:\n%s", log.String())
	}
}

// Only what the run was executing follows it: a running step without hosts,
// the running hosts of a step that is not itself running, nothing else.
func TestStepsFollowingRunMovesOnlyWhatRuns(t *testing.T) {
	run := spec.RunSnapshot{Steps: []spec.Step{
		{Name: "done", Status: spec.StepSuccess, Hosts: []spec.HostState{{Host: "h", Status: spec.StepSuccess}}},
		{Name: "bare", Status: spec.StepRunning},
		{Name: "fanout", Status: spec.StepRunning, Hosts: []spec.HostState{{Host: "a", Status: spec.StepRunning}, {Host: "b", Status: spec.StepFailed}}},
		{Name: "host-only", Status: spec.StepQueued, Hosts: []spec.HostState{{Host: "c", Status: spec.StepRunning}}},
		{Name: "later", Status: spec.StepQueued, Hosts: []spec.HostState{{Host: "d", Status: spec.StepQueued}}},
	}}
	got := fmt.Sprintf("%+v", spec.StepsFollowingRun(run, spec.StepInterrupted))
	want := fmt.Sprintf("%+v", []spec.StepPatch{
		{Name: "bare", Status: "interrupted"},
		{Name: "fanout", Status: "interrupted", Hosts: []spec.HostPatch{{Host: "a", Status: "interrupted"}}},
		{Name: "host-only", Hosts: []spec.HostPatch{{Host: "c", Status: "interrupted"}}},
	})
	if got != want {
		t.Errorf("patches\n got %s\nwant %s", got, want)
	}
}

func TestErrorMessagesSayRunstateOnce(t *testing.T) {
	inner := spec.InvalidArgument("dir", "is required")
	for _, err := range []error{
		spec.Unavailable("the plugin did not start", inner),
		&spec.Error{Code: spec.CodeInvalidArgument, Message: inner.Error()},
		spec.Unavailable("store away", fmt.Errorf("dial: %w", spec.ErrUnavailable)),
	} {
		if n := strings.Count(err.Error(), "runstate: "); n != 1 {
			t.Errorf("%q says runstate %d times", err, n)
		}
	}
}
