package runstate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/memory/memorytest"
)

func TestErrorsMatchByCode(t *testing.T) {
	sentinels := []error{runstate.ErrNotFound, runstate.ErrAlreadyExists, runstate.ErrVersionConflict, runstate.ErrInvalidTransition,
		runstate.ErrMissingDiagnostic, runstate.ErrInvalidArgument, runstate.ErrLeaseHeld, runstate.ErrLeaseLost, runstate.ErrNotClaimable, runstate.ErrUnavailable, runstate.ErrPermissionDenied, runstate.ErrUnauthenticated}
	codes := map[runstate.Code]bool{}
	for _, s := range sentinels {
		code := runstate.CodeOf(s)
		if code == "" || codes[code] || !errors.Is(s, s) {
			t.Fatalf("sentinel %v: code %q, seen before %v", s, code, codes[code])
		}
		codes[code] = true
		detailed := &runstate.Error{Code: code, Message: "details", RunID: "r1"}
		wrapped := fmt.Errorf("adapter: %w", detailed)
		for _, other := range sentinels {
			if got, want := errors.Is(wrapped, other), other == s; got != want {
				t.Errorf("errors.Is(%s error, %v) = %v", code, other, got)
			}
		}
		if runstate.CodeOf(wrapped) != code {
			t.Errorf("CodeOf = %q, want %q", runstate.CodeOf(wrapped), code)
		}
		// A sentinel is a value: nothing a caller holds can change it.
		var e *runstate.Error
		if errors.As(s, &e) {
			t.Errorf("sentinel %v is a shared *runstate.Error, which a caller could change", s)
		}
	}
	if runstate.CodeOf(errors.New("plain")) != "" || runstate.CodeOf(nil) != "" {
		t.Error("CodeOf of a non-spec error must be empty")
	}
	cause := errors.New("connection refused")
	if err := runstate.Unavailable("store unreachable", cause); !errors.Is(err, cause) || !errors.Is(err, runstate.ErrUnavailable) {
		t.Error("Unavailable must match both the sentinel and its cause")
	}
}

func TestTransitionTable(t *testing.T) {
	allowed := 0
	for _, from := range runstate.RunStatuses() {
		for _, to := range runstate.RunStatuses() {
			if runstate.CanTransition(from, to) {
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
	for alias, want := range map[string]runstate.RunStatus{"created": runstate.StatusQueued, "pending": runstate.StatusQueued, "running": runstate.StatusRunning} {
		if got, err := runstate.ParseRunStatus(alias); err != nil || got != want {
			t.Errorf("ParseRunStatus(%q) = %q, %v", alias, got, err)
		}
	}
	if _, err := runstate.ParseRunStatus("done"); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Errorf("unknown status: %v", err)
	}
}

func TestErrorMessagesSayWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		err  *runstate.Error
		want string
	}{
		{&runstate.Error{Code: runstate.CodeNotFound, RunID: "r1"}, "runstate: not found (run r1)"},
		{&runstate.Error{Code: runstate.CodeLeaseLost, Message: "run r1: the lease was released", RunID: "r1"}, "runstate: run r1: the lease was released"},
		{&runstate.Error{Code: runstate.CodeUnavailable, Message: "store down", Cause: errors.New("dial tcp: refused")}, "runstate: store down: dial tcp: refused"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// conflicting is a store whose updates always lose to another writer.
type conflicting struct{ runstate.RunStateStore }

func (s conflicting) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeVersionConflict, RunID: p.RunID, ExpectedVersion: p.ExpectedVersion, CurrentVersion: p.ExpectedVersion + 1}
}

// withoutLeases hides a store's lease side.
type withoutLeases struct{ runstate.RunStateStore }

func (s withoutLeases) Features() runstate.Features { return runstate.Features{} }

type countingGets struct {
	runstate.RunStateStore
	gets *int
}

func (s countingGets) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	*s.gets++
	return s.RunStateStore.GetRun(ctx, id)
}

// Recovery decides afresh after a conflict, but gives up on a run that
// keeps changing instead of retrying forever.
func TestRecoveryGivesUpOnARunThatKeepsChanging(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	run, _ := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"})
	gets := 0
	leaseless := withoutLeases{countingGets{conflicting{store}, &gets}}
	_, err := runstate.RecoverExclusive(ctx, leaseless, runstate.RecoveryOptions{Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, runstate.ErrVersionConflict) {
		t.Fatalf("recovery of a run that keeps changing: %v", err)
	}
	// One read to decide, then one after each of the first four conflicts.
	if gets != 5 {
		t.Errorf("%d reads of the run, want 5", gets)
	}
}

// releaseFails is a store whose releases fail.
type releaseFails struct{ *memory.Store }

func (s releaseFails) ReleaseLease(context.Context, runstate.ReleaseLeaseParams) error {
	return runstate.Unavailable("release failed on purpose", nil)
}

// A release that fails after recovery took a run on is reported in the
// log: a waiting run an earlier incarnation of the recovering worker held
// is re-queued and released (a settled run's write releases its lease
// itself).
func TestRecoveryLogsAFailedRelease(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	run, _ := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"})
	store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 2, Status: "waiting"})
	if _, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: run.RunID, Owner: runstate.Owner{Worker: "r", Incarnation: "1"}, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	_, err := runstate.Recover(ctx, releaseFails{store}, runstate.RecoveryOptions{Owner: runstate.Owner{Worker: "r", Incarnation: "2"},
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(log.String(), "could not release") != 1 {
		t.Errorf("log:\n%s", log.String())
	}
}

// countingUpdates counts a store's single and batched updates.
type countingUpdates struct {
	*memory.Store
	singles, batches *int
}

func (s countingUpdates) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	*s.singles++
	return s.Store.UpdateRun(ctx, p)
}

func (s countingUpdates) UpdateRuns(ctx context.Context, p runstate.UpdateRunsParams) (runstate.UpdateRunsResult, error) {
	*s.batches++
	return s.Store.UpdateRuns(ctx, p)
}

// Recovery settles many runs in few batched writes, and reports them in
// the order it listed them, as it did one write per run.
func TestRecoverySettlesRunsInBatches(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	var want []string
	for i := range 250 {
		run, err := store.CreateRun(ctx, runstate.CreateRunParams{RunID: fmt.Sprintf("run-%03d", i), WorkflowName: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"}); err != nil {
			t.Fatal(err)
		}
		want = append(want, run.RunID)
	}
	singles, batches := 0, 0
	rep, err := runstate.Recover(ctx, countingUpdates{store, &singles, &batches},
		runstate.RecoveryOptions{Owner: runstate.Owner{Worker: "r"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Interrupted != 250 {
		t.Fatalf("recovery interrupted %d of 250 runs: %v", rep.Interrupted, err)
	}
	var got []string
	for _, rec := range rep.Runs {
		got = append(got, rec.RunID)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("reported runs out of listing order:\n%v", got)
	}
	if singles != 0 || batches != 3 {
		t.Errorf("%d single and %d batched updates, want 0 and 3", singles, batches)
	}
}

// slowClaims is a store whose claims of a named run take a while.
type slowClaims struct{ countingUpdates }

func (s slowClaims) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	time.Sleep(300 * time.Millisecond)
	return s.Store.ClaimRun(ctx, p)
}

// On a slow store recovery writes a batch before its first leases have
// run down much, rather than when it has claimed a full batch: claims of
// 300ms each, many at once, under a 1s lease, are written after the
// first group, not with the rest of the batch of 100.
func TestRecoveryWritesBeforeItsLeasesRunDown(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	for range 100 {
		run, _ := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
		store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "running"})
	}
	singles, batches := 0, 0
	rep, err := runstate.Recover(ctx, slowClaims{countingUpdates{store, &singles, &batches}},
		runstate.RecoveryOptions{Owner: runstate.Owner{Worker: "r"}, LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil || rep.Interrupted != 100 {
		t.Fatalf("recovery interrupted %d of 100 runs: %v", rep.Interrupted, err)
	}
	if batches < 2 {
		t.Errorf("%d batched updates: a hundred claims of 300ms each went into one batch under a 1s lease", batches)
	}
}

// Only what the run was executing follows it: a running step without hosts,
// the running hosts of a step that is not itself running, nothing else.
func TestStepsFollowingRunMovesOnlyWhatRuns(t *testing.T) {
	run := runstate.RunSnapshot{Steps: []runstate.Step{
		{Name: "done", Status: runstate.StepSuccess, Hosts: []runstate.HostState{{Host: "h", Status: runstate.StepSuccess}}},
		{Name: "bare", Status: runstate.StepRunning},
		{Name: "fanout", Status: runstate.StepRunning, Hosts: []runstate.HostState{{Host: "a", Status: runstate.StepRunning}, {Host: "b", Status: runstate.StepFailed}}},
		{Name: "host-only", Status: runstate.StepQueued, Hosts: []runstate.HostState{{Host: "c", Status: runstate.StepRunning}}},
		{Name: "later", Status: runstate.StepQueued, Hosts: []runstate.HostState{{Host: "d", Status: runstate.StepQueued}}},
	}}
	got := fmt.Sprintf("%+v", runstate.StepsFollowingRun(run, runstate.StepInterrupted))
	want := fmt.Sprintf("%+v", []runstate.StepPatch{
		{Name: "bare", Status: "interrupted"},
		{Name: "fanout", Status: "interrupted", Hosts: []runstate.HostPatch{{Host: "a", Status: "interrupted"}}},
		{Name: "host-only", Hosts: []runstate.HostPatch{{Host: "c", Status: "interrupted"}}},
	})
	if got != want {
		t.Errorf("patches\n got %s\nwant %s", got, want)
	}
}

func TestErrorMessagesSayRunstateOnce(t *testing.T) {
	inner := runstate.InvalidArgument("dir", "is required")
	for _, err := range []error{
		runstate.Unavailable("the plugin did not start", inner),
		&runstate.Error{Code: runstate.CodeInvalidArgument, Message: inner.Error()},
		runstate.Unavailable("store away", fmt.Errorf("dial: %w", runstate.ErrUnavailable)),
	} {
		if n := strings.Count(err.Error(), "runstate: "); n != 1 {
			t.Errorf("%q says runstate %d times", err, n)
		}
	}
}
