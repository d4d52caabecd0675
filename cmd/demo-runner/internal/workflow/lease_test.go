package workflow_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/proctest"
	"github.com/runstate/runstate/tracker"
)

const approveThenFinish = `
name: w
steps:
  - name: approve
    type: wait
    timeout: 1m
  - name: finish
    type: shell
    command: 'echo "$RUNSTATE_LEASE_TOKEN" >> %s'
`

// The stalled-worker sequence: A waits in step approve holding the run; its
// lease expires; B takes the run over, the run is signalled, and B resumes
// it. A, waking, sees the run running. It must not take that as its own
// signal and start step finish: nothing but B's token may reach the
// command.
func TestAWorkerThatLostItsRunWhileWaitingStartsNothing(t *testing.T) {
	ctx := context.Background()
	clock := conformance.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memorytest.Open(t, clock)
	a := startWaiting(t, store, time.Second)
	tr, wf, s, markers, done := a.tr, a.wf, a.run, a.markers, a.done
	// A stalls here (it cannot renew); B takes over, the run is signalled, B resumes it.
	clock.Advance(2 * time.Second)
	claimB, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "b"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (tracker.Operator{Store: store, Actor: runstate.Actor{Kind: runstate.ActorOperator}}).Signal(ctx, s.RunID); err != nil {
		t.Fatal(err)
	}
	cur, _ := store.GetRun(ctx, s.RunID)
	b, _ := tr.Attach(cur, tracker.Lease{Token: claimB.Lease.Token, TTL: time.Minute})
	if err := b.Resume(ctx, "approve"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, runstate.ErrLeaseLost) {
		t.Fatalf("worker A, waking after the takeover: %v, want LEASE_LOST", err)
	}
	if b, err := os.ReadFile(markers); err == nil {
		t.Fatalf("worker A ran step finish after losing the run; tokens that ran it: %q", b)
	}
	// B goes on and runs it, with its own token.
	if err := workflow.Execute(ctx, b, wf, workflow.Options{Hold: true, Poll: 5 * time.Millisecond, Supervisor: supervisor(t)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(markers); strings.TrimSpace(string(got)) != strconv.FormatInt(claimB.Lease.Token, 10) {
		t.Fatalf("step finish ran with tokens %q, want only B's %d", got, claimB.Lease.Token)
	}
}

// A run moved to running by a write without a lease (an operator's, not a
// signal) while its worker waits: the worker renews first, and since the
// renewal succeeds no other worker can have resumed it, so it goes on.
func TestAWaitThatAnOperatorResumedGoesOnUnderTheLiveLease(t *testing.T) {
	ctx := context.Background()
	store := memorytest.Open(t, nil)
	a := startWaiting(t, store, time.Minute)
	s, markers, done, claim := a.run, a.markers, a.done, a.claim
	cur, _ := store.GetRun(ctx, s.RunID)
	if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: s.RunID, ExpectedVersion: cur.Version, Status: string(runstate.StatusRunning),
		Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "ops"}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("worker A after an operator resumed its run: %v", err)
	}
	if got, _ := os.ReadFile(markers); strings.TrimSpace(string(got)) != strconv.FormatInt(claim.Lease.Token, 10) {
		t.Fatalf("step finish ran with tokens %q, want only A's %d", got, claim.Lease.Token)
	}
	if got, _ := store.GetRun(ctx, s.RunID); got.Status != runstate.StatusSuccess {
		t.Fatalf("run after the operator's resume: %s", got.Status)
	}
}

// waitingWorker is worker A executing approveThenFinish under a lease of
// its own, parked in step approve.
type waitingWorker struct {
	tr      *tracker.Tracker
	wf      workflow.Workflow
	run     runstate.RunSnapshot
	claim   runstate.Claim
	markers string
	done    chan error // Execute's result
}

// startWaiting creates a run of approveThenFinish in store, has worker A
// claim it for ttl and execute it, and returns once the run waits.
func startWaiting(t *testing.T, store *memory.Store, ttl time.Duration) waitingWorker {
	t.Helper()
	ctx := context.Background()
	w := waitingWorker{markers: filepath.Join(t.TempDir(), "markers"), done: make(chan error, 1)}
	var err error
	if w.wf, err = workflow.Parse([]byte(strings.Replace(approveThenFinish, "%s", w.markers, 1))); err != nil {
		t.Fatal(err)
	}
	w.tr = tracker.New(store, tracker.Options{Leases: store})
	if w.run, err = w.tr.Create(ctx, runstate.CreateRunParams{WorkflowName: w.wf.Name, Steps: w.wf.StepSpecs()}); err != nil {
		t.Fatal(err)
	}
	if w.claim, err = store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: w.run.RunID, Owner: runstate.Owner{Worker: "a"}, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	a, err := w.tr.Attach(w.claim.Run, tracker.Lease{Token: w.claim.Lease.Token, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.done <- workflow.Execute(ctx, a, w.wf, workflow.Options{Hold: true, Poll: 5 * time.Millisecond, Supervisor: supervisor(t)})
	}()
	waitFor(t, store, w.run.RunID, func(r runstate.RunSnapshot) bool { return r.Status == runstate.StatusWaiting })
	return w
}

func waitFor(t *testing.T, store runstate.RunStateStore, id string, ok func(runstate.RunSnapshot) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if r, err := store.GetRun(context.Background(), id); err == nil && ok(r) {
			return
		}
	}
	t.Fatal("the run never reached the expected state")
}

func TestAParkedWaitLeavesTheRunWaiting(t *testing.T) {
	ctx := context.Background()
	wf, _ := workflow.Parse([]byte(strings.Replace(approveThenFinish, "%s", filepath.Join(t.TempDir(), "m"), 1)))
	store := memorytest.Open(t, nil)
	tr := tracker.New(store, tracker.Options{})
	s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: wf.Name, Steps: wf.StepSpecs()})
	run, _ := tr.Attach(s, tracker.Lease{})
	park := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- workflow.Execute(ctx, run, wf, workflow.Options{Hold: true, Poll: 5 * time.Millisecond, Park: park})
	}()
	waitFor(t, store, s.RunID, func(r runstate.RunSnapshot) bool { return r.Status == runstate.StatusWaiting })
	close(park)
	if err := <-done; !errors.Is(err, workflow.ErrParked) {
		t.Fatalf("parking: %v", err)
	}
	got, _ := store.GetRun(ctx, s.RunID)
	approve, _ := got.Step("approve")
	if got.Status != runstate.StatusWaiting || approve.Status != runstate.StepRunning {
		t.Fatalf("after parking: %s, approve %s", got.Status, approve.Status)
	}
	// Executing it again goes on waiting where it was; a signal resumes it.
	run, _ = tr.Attach(got, tracker.Lease{})
	go func() {
		done <- workflow.Execute(ctx, run, wf, workflow.Options{Hold: true, Poll: 5 * time.Millisecond})
	}()
	if _, err := (tracker.Operator{Store: store, Actor: runstate.Actor{Kind: runstate.ActorOperator}}).Signal(ctx, s.RunID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := store.GetRun(ctx, s.RunID); got.Status != runstate.StatusSuccess {
		t.Fatalf("after the signal: %s", got.Status)
	}
}

// A worker that cannot renew its lease (stalled, or cut off from the
// store) must not let its command run on past the lease: another worker
// may be running the step by then.
func TestTheSupervisorEndsACommandWhoseLeaseRunsOut(t *testing.T) {
	proctest.Require(t)
	ctx := context.Background()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	wf, _ := workflow.Parse([]byte("name: w\nsteps:\n  - name: slow\n    type: shell\n    command: 'sleep 30 & echo $! > " + pidFile + "; wait'\n"))
	store := memorytest.Open(t, nil)
	tr := tracker.New(store, tracker.Options{Leases: store})
	s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: wf.Name, Steps: wf.StepSpecs()})
	// The lease outlasts the command's start on a loaded machine, and runs
	// out while the command sleeps. Neither 300ms nor 1s did: beside CI on
	// two cores the supervisor (this test binary, built with -race) took
	// longer to start, and the lease lapsed before the command did, a
	// refusal this test does not check.
	const ttl = 5 * time.Second
	cl, _ := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "a"}, TTL: ttl})
	run, _ := tr.Attach(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: ttl})
	start := time.Now()
	// Nobody renews the lease: only the check before the command does.
	err := workflow.Execute(ctx, run, wf, workflow.Options{Supervisor: supervisor(t)})
	took := time.Since(start)
	if !errors.Is(err, workflow.ErrLeaseLapsed) || !errors.Is(err, runstate.ErrLeaseLost) {
		t.Fatalf("Execute after the lease ran out under a command: %v, want ErrLeaseLapsed (a LEASE_LOST)", err)
	}
	// The command's end is the lease's doing, not the command's: nothing
	// is written as its outcome.
	got, _ := store.GetRun(ctx, s.RunID)
	slow, _ := got.Step("slow")
	if got.Status != runstate.StatusRunning || slow.Hosts[0].Status != runstate.StepRunning {
		t.Fatalf("the run after its lease ran out: %s, host %+v", got.Status, slow.Hosts[0])
	}

	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || alive(pid) {
		t.Fatalf("the command's child %d outlived the lease (the step took %v)", pid, took)
	}
	t.Logf("the command was ended %v after the lease check (lease %v)", took, ttl)
}

// startSupervised starts the supervisor on a command, with its pipes in
// the test's hands, as a worker would.
func startSupervised(t *testing.T, deadline time.Duration, command string) (*exec.Cmd, *os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(supervisor(t), "sh", "-c", command)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{r, statusW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(workflow.BootClockForTest()+int64(deadline)))
	w.Write(b[:])
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	statusW.Close()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait(); w.Close(); statusR.Close() })
	return cmd, w, statusR
}

// A worker that stalled between its lease check and the start of the
// command finds, on waking, that the supervisor refuses to start it, and
// says so on its status pipe.
func TestTheSupervisorRefusesToStartPastTheDeadline(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	cmd, _, status := startSupervised(t, -time.Millisecond, "touch "+marker)
	cmd.Wait()
	if why := readStatus(status); why != "R" {
		t.Fatalf("supervisor status %q, want R (refused)", why)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although the deadline had passed")
	}
}

// A command's own exit code, whatever it is, is not mistaken for the
// supervisor's report.
func TestACommandsExitCodeIsItsOwn(t *testing.T) {
	for _, code := range []int{0, 1, 125, 126} {
		cmd, _, status := startSupervised(t, time.Hour, fmt.Sprintf("exit %d", code))
		err := cmd.Wait()
		if got := exitCodeOf(err); got != code || readStatus(status) != "" {
			t.Errorf("exit %d under the supervisor: %d, status %q", code, got, readStatus(status))
		}
	}
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

func readStatus(r *os.File) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

// A worker killed with SIGKILL cannot clean up: its supervisors see the
// pipe close and end their commands, with everything those started.
func TestTheSupervisorEndsTheCommandWhenTheWorkerDies(t *testing.T) {
	proctest.Require(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cmd, w, _ := startSupervised(t, time.Hour, "sleep 30 & echo $! > "+pidFile+"; wait")
	var pid int
	for deadline := time.Now().Add(5 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 || !alive(pid) {
		t.Fatal("the command did not start")
	}
	w.Close() // the worker is gone
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if alive(pid) {
		t.Fatalf("the command's child %d outlived its worker", pid)
	}
}

// A worker parks a run that waits: one write leaves it waiting until the
// wait's deadline, its lease released, and Execute returns ErrParked. A
// signal wakes it, and whoever claims it then goes on; unsignalled, it is
// claimable only at its deadline, and then ends in timeout. A sleep parks
// the same way, until its end.
func TestAWaitingRunIsParkedAndGoesOnWhereverItIsClaimed(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := conformance.NewManualClock(start)
	store := memorytest.Open(t, clock)
	tr := tracker.New(store, tracker.Options{Leases: store})
	wf, err := workflow.Parse([]byte("name: w\nsteps:\n  - name: approve\n    type: wait\n    timeout: 1h\n  - name: nap\n    type: sleep\n    duration: 10m\n"))
	if err != nil {
		t.Fatal(err)
	}
	execute := func(worker string) (runstate.RunSnapshot, error) {
		t.Helper()
		cl, err := store.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: worker}, TTL: time.Minute})
		if err != nil {
			return runstate.RunSnapshot{}, err
		}
		run, _ := tr.Attach(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: time.Minute})
		err = workflow.Execute(ctx, run, wf, workflow.Options{})
		got, _ := store.GetRun(ctx, cl.Run.RunID)
		if errors.Is(err, workflow.ErrParked) {
			if l, _ := store.GetLease(ctx, cl.Run.RunID); l.Token != cl.Lease.Token {
				t.Fatalf("the lease after parking: %+v", l)
			}
			if _, err := store.RenewLease(ctx, runstate.RenewLeaseParams{RunID: cl.Run.RunID, Token: cl.Lease.Token, TTL: time.Minute}); !errors.Is(err, runstate.ErrLeaseLost) {
				t.Fatalf("the parking write did not release its lease: renewing it %v", err)
			}
		}
		return got, err
	}
	for _, signalled := range []bool{true, false} {
		s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: wf.Name, Steps: wf.StepSpecs()})
		got, err := execute("a")
		approve, _ := got.Step("approve")
		if !errors.Is(err, workflow.ErrParked) || got.Status != runstate.StatusWaiting || !got.WakeAt.Equal(approve.StartedAt.Add(time.Hour)) {
			t.Fatalf("the wait: %v, run %s parked until %v", err, got.Status, got.WakeAt)
		}
		if _, err := execute("b"); !errors.Is(err, runstate.ErrNotFound) {
			t.Fatalf("a claim of the parked run before its time: %v", err)
		}
		if signalled {
			if _, err := (tracker.Operator{Store: store, Actor: runstate.Actor{Kind: runstate.ActorOperator, ID: "olivia"}}).Signal(ctx, s.RunID); err != nil {
				t.Fatal(err)
			}
		} else {
			clock.Advance(time.Hour)
		}
		got, err = execute("b")
		if !signalled {
			if err != nil || got.Status != runstate.StatusTimeout || got.Diagnostic == nil || got.Diagnostic.ErrorCode != "WAIT_TIMEOUT" {
				t.Fatalf("the wait at its deadline: %v, run %s %+v", err, got.Status, got.Diagnostic)
			}
			continue
		}
		nap, _ := got.Step("nap")
		if !errors.Is(err, workflow.ErrParked) || got.Status != runstate.StatusWaiting || !got.WakeAt.Equal(nap.StartedAt.Add(10*time.Minute)) {
			t.Fatalf("the sleep after the signal: %v, run %s parked until %v", err, got.Status, got.WakeAt)
		}
		clock.Advance(10 * time.Minute)
		got, err = execute("c")
		if nap, _ := got.Step("nap"); err != nil || got.Status != runstate.StatusSuccess || nap.FinishedAt.Before(nap.StartedAt.Add(10*time.Minute)) {
			t.Fatalf("the sleep at its end: %v, run %s, nap %+v", err, got.Status, nap)
		}
		var moves []string
		page, _ := store.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: s.RunID})
		for _, e := range page.Events {
			if e.Kind == runstate.AuditTransition {
				moves = append(moves, string(e.From)+">"+string(e.To))
			}
		}
		if got := strings.Join(moves, " "); got != "queued>running running>waiting waiting>running running>waiting waiting>running running>success" {
			t.Errorf("the trail: %s", got)
		}
	}
}

// cannotPark is a store reached through a plugin or gateway of protocol
// 1.7 or older: it refuses an update that parks or wakes a run.
type cannotPark struct{ *memory.Store }

func (s cannotPark) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if p.WakeAt != nil {
		return runstate.RunSnapshot{}, &runstate.Error{Code: runstate.CodeUnsupported, Message: "the server does not announce wake_at"}
	}
	return s.Store.UpdateRun(ctx, p)
}

// A store that cannot park: the worker keeps the waiting run in hand, as
// before parking, and a signal resumes it there.
func TestAStoreThatCannotParkKeepsTheWaitingRunInHand(t *testing.T) {
	ctx := context.Background()
	store := cannotPark{memorytest.Open(t, nil)}
	tr := tracker.New(store, tracker.Options{Leases: store})
	wf, err := workflow.Parse([]byte("name: w\nsteps:\n  - name: approve\n    type: wait\n    timeout: 1h\n  - name: nap\n    type: sleep\n    duration: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := tr.Create(ctx, runstate.CreateRunParams{WorkflowName: wf.Name, Steps: wf.StepSpecs()})
	cl, err := store.ClaimRun(ctx, runstate.ClaimRunParams{RunID: s.RunID, Owner: runstate.Owner{Worker: "a"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := tr.Attach(cl.Run, tracker.Lease{Token: cl.Lease.Token, TTL: time.Minute})
	var said []string
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- workflow.Execute(ctx, run, wf, workflow.Options{Poll: 5 * time.Millisecond, Progress: func(f string, args ...any) {
			mu.Lock()
			said = append(said, fmt.Sprintf(f, args...))
			mu.Unlock()
		}})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, _ := store.GetRun(ctx, s.RunID); got.Status == runstate.StatusWaiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never waited")
		}
	}
	if _, err := (tracker.Operator{Store: store, Actor: runstate.Actor{Kind: runstate.ActorOperator}}).Signal(ctx, s.RunID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Execute: %v", err)
	}
	got, _ := store.GetRun(ctx, s.RunID)
	if got.Status != runstate.StatusSuccess || !got.WakeAt.IsZero() {
		t.Fatalf("run %s, wake_at %v", got.Status, got.WakeAt)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(strings.Join(said, "\n"), "cannot park the run, so it stays in hand"); n != 2 {
		t.Errorf("the wait and the sleep each said once that they stay in hand; said %d times:\n%s", n, strings.Join(said, "\n"))
	}
}
