package tracker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/tracker"
)

type recorder struct {
	mu     sync.Mutex
	events []tracker.Event
}

func (r *recorder) Notify(ev tracker.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func newRun(t *testing.T, store runstate.RunStateStore, notifiers ...tracker.Notifier) (*tracker.Tracker, *tracker.Run) {
	t.Helper()
	tr := tracker.New(store, tracker.Options{Notifiers: notifiers})
	s, err := tr.Create(context.Background(), runstate.CreateRunParams{WorkflowName: "wf", Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := tr.Attach(s, tracker.Lease{})
	if err != nil {
		t.Fatal(err)
	}
	return tr, run
}

func TestWritesSurviveAnOperatorsWriteInBetween(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	_, run := newRun(t, store)
	if err := run.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	s := run.Snapshot()
	if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: s.RunID, ExpectedVersion: s.Version, Message: ptr("note from an operator")}); err != nil {
		t.Fatal(err)
	}
	if err := run.StepStarted(ctx, "build"); err != nil {
		t.Fatalf("a step write after an operator's write: %v", err)
	}
	got, _ := store.GetRun(ctx, s.RunID)
	st, _ := got.Step("build")
	if st.Status != runstate.StepRunning || got.Message != "note from an operator" || got.Version != s.Version+2 {
		t.Fatalf("after the re-read: %+v", got)
	}
}

func TestARunEndedElsewhereStopsTheEngine(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	_, run := newRun(t, store)
	run.Begin(ctx)
	s := run.Snapshot()
	if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: s.RunID, ExpectedVersion: s.Version, Status: "canceled"}); err != nil {
		t.Fatal(err)
	}
	err := run.StepStarted(ctx, "build")
	if !errors.Is(err, tracker.ErrRunEnded) {
		t.Fatalf("writing to a canceled run: %v", err)
	}
	got, _ := store.GetRun(ctx, s.RunID)
	if got.Status != runstate.StatusCanceled || got.Version != s.Version+1 {
		t.Fatalf("the canceled run was changed: %+v", got)
	}
	evs, _ := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: s.RunID})
	if n := len(evs.Events); n != 3 {
		t.Fatalf("%d audit events, want created, running, canceled (no rejected attempt)", n)
	}
}

// takenOver stages a takeover: zombie claims a run and begins it; its lease
// expires; another worker claims the run with a larger token.
func takenOver(t *testing.T) (store *memory.Store, zombie *tracker.Run, taker runstate.Claim) {
	t.Helper()
	ctx := context.Background()
	clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store = memorytest.Open(t, clock)
	tr := tracker.New(store, tracker.Options{Leases: store})
	s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf", Steps: []runstate.StepSpec{{Name: "build", Hosts: []string{"h1"}}}})
	cl, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "a"}, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if zombie, err = tr.Attach(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	taker, err = store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "b"}, TTL: time.Minute, Statuses: []string{"running"}})
	if err != nil {
		t.Fatal(err)
	}
	return store, zombie, taker
}

func TestALostLeaseRefusesTheZombiesWrites(t *testing.T) {
	_, zombie, _ := takenOver(t)
	if err := zombie.StepStarted(context.Background(), "build"); !errors.Is(err, runstate.ErrLeaseLost) {
		t.Fatalf("the zombie's write: %v", err)
	}
}

// The worker that took the run over has already written what the zombie
// was about to write. The zombie has nothing to write, and must still not
// go ahead: its lease is checked instead.
func TestAWriteThatChangesNothingStillChecksTheLease(t *testing.T) {
	ctx := context.Background()
	store, zombie, taker := takenOver(t)
	if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: taker.Run.RunID, ExpectedVersion: taker.Run.Version, LeaseToken: taker.Lease.Token,
		Steps: []runstate.StepPatch{{Name: "build", Status: "running", Hosts: []runstate.HostPatch{{Host: "h1", Status: "running"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := zombie.Refresh(ctx); err != nil { // the zombie sees the taker's state
		t.Fatal(err)
	}
	for name, write := range map[string]func() error{
		"Begin":       func() error { return zombie.Begin(ctx) },
		"StepStarted": func() error { return zombie.StepStarted(ctx, "build") },
		"HostStarted": func() error { return zombie.HostStarted(ctx, "build", "h1") },
		"Resume":      func() error { return zombie.Resume(ctx, "") },
		"Confirm":     func() error { return zombie.Confirm(ctx) },
	} {
		if err := write(); !errors.Is(err, runstate.ErrLeaseLost) {
			t.Errorf("%s with nothing to write, after a takeover: %v, want LEASE_LOST", name, err)
		}
	}
}

func TestKeepLeaseStopsWorkWhenTheLeaseIsLostOrTheRunEnded(t *testing.T) {
	ctx := context.Background()
	_, zombie, _ := takenOver(t)
	stopped := make(chan error, 1)
	zombie.KeepLease(ctx, time.Millisecond, func(err error) { stopped <- err })
	if err := <-stopped; !errors.Is(err, runstate.ErrLeaseLost) {
		t.Errorf("renewing a lease taken over: %v", err)
	}

	store := memorytest.Open(t, nil)
	tr := tracker.New(store, tracker.Options{Leases: store})
	s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	cl, _ := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "a"}, TTL: time.Minute})
	run, _ := tr.Attach(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: time.Minute})
	if _, err := (tracker.Operator{Store: store, Actor: runstate.Actor{Kind: runstate.ActorOperator}}).Cancel(ctx, s.RunID, "no longer needed"); err != nil {
		t.Fatal(err)
	}
	run.KeepLease(ctx, time.Millisecond, func(err error) { stopped <- err })
	if err := <-stopped; !errors.Is(err, tracker.ErrRunEnded) {
		t.Errorf("keeping the lease of a canceled run: %v", err)
	}
	if until, _, ok := run.LeaseValidUntil(); !ok || until.IsZero() {
		t.Errorf("the renewal before the run was seen canceled set no validity: %v %v", until, ok)
	}
}

func TestAttachingALeasedRunNeedsTheLeaseStore(t *testing.T) {
	store := memorytest.Open(t, nil)
	tr := tracker.New(store, tracker.Options{})
	if _, err := tr.Attach(runstate.RunSnapshot{RunID: "r"}, tracker.Lease{Token: 3, TTL: time.Minute}); err == nil {
		t.Fatal("a leased run was attached to a tracker without Options.Leases")
	}
}

func TestHostOutputIsTruncatedAndEveryChangeNotified(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	store := memorytest.Open(t, nil)
	_, run := newRun(t, store, rec)
	run.Begin(ctx)
	run.StepStarted(ctx, "build")
	run.HostStarted(ctx, "build", "h1")
	huge := strings.Repeat("x", 3*runstate.MaxHostOutputBytes)
	if err := run.HostFinished(ctx, "build", "h1", runstate.StepFailed, huge, strings.Repeat("e", 5000)); err != nil {
		t.Fatalf("writing huge output: %v", err)
	}
	s := run.Snapshot()
	st, _ := s.Step("build")
	h, _ := st.Host("h1")
	if len(h.OutputSummary) > runstate.MaxHostOutputBytes || len(h.Error) > runstate.MaxHostErrorLen || h.OutputSummary == "" {
		t.Fatalf("output %d bytes, error %d bytes", len(h.OutputSummary), len(h.Error))
	}
	run.StepFinished(ctx, "build", runstate.StepFailed)
	run.Finish(ctx, runstate.StatusFailed, &runstate.Diagnostic{ErrorCode: "E", Message: "m"}, "")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"queued", "running", "running/build", "running/build/h1", "running/build/h1", "running/build", "failed"}
	if len(rec.events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(rec.events), len(want), rec.events)
	}
	for i, ev := range rec.events {
		got := ev.Status
		if ev.Step != "" {
			got += "/" + ev.Step
		}
		if ev.Host != "" {
			got += "/" + ev.Host
		}
		if got != want[i] || ev.RunID != s.RunID || ev.WorkflowName != "wf" || ev.Version != int64(i+1) || ev.Timestamp.IsZero() {
			t.Errorf("event %d: %+v, want %s at version %d", i, ev, want[i], i+1)
		}
	}
	if last := rec.events[len(rec.events)-1]; last.Error != "E: m" {
		t.Errorf("the failure's event carries no error: %+v", last)
	}
}

func ptr[T any](v T) *T { return &v }

// A run its claim started is begun by that write alone: Begin announces it
// to the notifiers without another write, and only once.
func TestBeginOfARunItsClaimStartedOnlyNotifies(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	rec := &recorder{}
	tr := tracker.New(store, tracker.Options{Notifiers: []tracker.Notifier{rec}, Leases: store})
	if _, err := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"}); err != nil {
		t.Fatal(err)
	}
	claims, err := runstate.ClaimRuns(ctx, store, runstate.ClaimRunsParams{Owner: runstate.Owner{Worker: "w"}, TTL: time.Minute, Max: 1, Start: true})
	if err != nil || len(claims.Claims) != 1 {
		t.Fatalf("claim: %+v %v", claims, err)
	}
	cl := claims.Claims[0]
	run, err := tr.AttachStarted(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := run.Begin(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := store.GetRun(ctx, cl.Run.RunID); got.Version != cl.Run.Version {
		t.Errorf("Begin wrote to the started run: version %d, claimed at %d", got.Version, cl.Run.Version)
	}
	var running int
	for _, ev := range rec.events {
		if ev.Status == string(runstate.StatusRunning) {
			running++
		}
	}
	if running != 1 {
		t.Errorf("%d notices of the run running, want 1: %+v", running, rec.events)
	}
}

// flakyRenewals fails the next failures renewals as a store that did not
// answer would.
type flakyRenewals struct {
	runstate.Store
	failures int
}

func (f *flakyRenewals) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	if f.failures > 0 {
		f.failures--
		return runstate.Lease{}, runstate.Unavailable("the store did not answer", context.DeadlineExceeded)
	}
	return f.Store.RenewLease(ctx, p)
}

// Every renewal that fails, or that the store accepts after the lease
// expired, is logged with its margin and reported; one on time is silent.
func TestEveryRenewalThatFailsOrComesLateIsLoggedAndReported(t *testing.T) {
	ctx := context.Background()
	clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memorytest.Open(t, clock)
	flaky := &flakyRenewals{Store: store}
	var log strings.Builder
	var reports []tracker.Renewal
	tr := tracker.New(store, tracker.Options{Leases: flaky, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		OnRenewal: func(r tracker.Renewal) { reports = append(reports, r) }})
	s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: "wf"})
	cl, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "a"}, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := tr.Attach(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: time.Second, ExpiresAt: cl.Lease.ExpiresAt})

	flaky.failures = 2
	for range 2 {
		if err := run.Confirm(ctx); !errors.Is(err, runstate.ErrUnavailable) {
			t.Fatalf("a renewal the store did not answer: %v", err)
		}
	}
	clock.Advance(1500 * time.Millisecond) // expired 500ms ago; nobody claimed the run
	if err := run.Confirm(ctx); err != nil {
		t.Fatalf("renewing an expired lease nobody claimed: %v", err)
	}
	if err := run.Confirm(ctx); err != nil { // on time: silent
		t.Fatal(err)
	}
	clock.Advance(1200 * time.Millisecond) // expired 200ms ago, with no renewal failed since
	if err := run.Confirm(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if _, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "b"}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := run.Confirm(ctx); !errors.Is(err, runstate.ErrLeaseLost) {
		t.Fatalf("renewing a lease another worker took: %v", err)
	}

	if len(reports) != 5 {
		t.Fatalf("%d reports, want 5 (two failures, two late renewals, one refusal): %+v", len(reports), reports)
	}
	if reports[0].Failures != 1 || reports[1].Failures != 2 || reports[0].Err == nil || reports[1].Err == nil {
		t.Errorf("the failures: %+v, %+v", reports[0], reports[1])
	}
	if r := reports[2]; r.Err != nil || r.Late != 500*time.Millisecond || r.Failures != 2 {
		t.Errorf("the late renewal: %+v, want late by 500ms after 2 failures", r)
	}
	if r := reports[3]; r.Err != nil || r.Late != 200*time.Millisecond || r.Failures != 0 {
		t.Errorf("the late renewal without failures: %+v, want late by 200ms", r)
	}
	if r := reports[4]; !errors.Is(r.Err, runstate.ErrLeaseLost) || r.Late != 0 {
		t.Errorf("the refusal: %+v", r)
	}
	for _, want := range []string{
		`msg="lease renewal failed; retrying" run_id=` + s.RunID + ` token=1 since_renewed=`,
		"failures=2 lease_left=",
		`msg="lease renewed late: the store accepted the renewal after the lease had expired, unless a renewal whose answer was lost had moved it (nobody had claimed the run meanwhile)"`,
		"late_at_most=500ms failures_before=2",
		`msg="lease renewed late: the store accepted the renewal after the lease had expired (nobody had claimed the run meanwhile)"`,
		"late=200ms failures_before=0",
		`msg="lease renewal refused: the lease is no longer this worker's"`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
	if n := strings.Count(log.String(), "\n"); n != 5 {
		t.Errorf("%d log lines, want 5 (the renewal on time is silent):\n%s", n, log.String())
	}
}
