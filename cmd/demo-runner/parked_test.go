package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
)

// awaitStatus polls the run until it is in one of want, and returns it.
func awaitStatus(t *testing.T, global []string, id string, timeout time.Duration, want ...runstate.RunStatus) runstate.RunSnapshot {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := runStatus(t, global, id)
		for _, w := range want {
			if s.Status == w {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s after %v, want %v", id, s.Status, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// transitions renders a run's audit trail as from>to (reason) steps.
func transitions(t *testing.T, global []string, id string) []string {
	t.Helper()
	var out []string
	for _, e := range runAudit(t, global, id) {
		if e.Kind == runstate.AuditTransition || e.Kind == runstate.AuditCreated {
			out = append(out, fmt.Sprintf("%s>%s", e.From, e.To))
		}
	}
	return out
}

// The scenario, with real processes: hello, approval, flaky,
// hello and approval submitted to the Badger store, and one worker of one
// slot. Each approval parks in its wait step, holding no slot and no
// lease, so the runs queued behind it finish; a signal wakes one, which
// the worker (woken by the store) takes on its next free slot and
// finishes; the other waits on, parked.
func TestAWaitingRunHoldsNoSlot(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	var ids []string
	for _, wf := range []string{"hello", "approval", "flaky", "hello", "approval"} {
		out, errOut, code := demo(t, with(global, "submit", "../../examples/workflows/"+wf+".yaml")...)
		if code != 0 {
			t.Fatalf("submit %s: exit %d\n%s", wf, code, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	began := time.Now()
	w := startDemo(t, with(global, "worker", "--slots", "1", "--poll", "1s")...)
	w.await(t, `worker started.*wakeups="notify and poll".*slots=1`, 10*time.Second)
	for _, i := range []int{0, 2, 3} {
		want := runstate.StatusSuccess
		if i == 2 {
			want = runstate.StatusFailed
		}
		if s := awaitStatus(t, global, ids[i], time.Minute, want); s.Status != want {
			t.Fatalf("run %d: %s", i, s.Status)
		}
	}
	threeDone := time.Since(began)
	for _, i := range []int{1, 4} {
		// The last approval is claimed as the hello before it finishes:
		// it may still be on its way to its wait step.
		s := awaitStatus(t, global, ids[i], time.Minute, runstate.StatusWaiting, runstate.StatusSuccess, runstate.StatusFailed, runstate.StatusTimeout)
		approve, _ := s.Step("approve")
		if s.Status != runstate.StatusWaiting || approve.Status != runstate.StepRunning ||
			!s.WakeAt.Equal(approve.StartedAt.Add(10*time.Minute)) {
			t.Fatalf("approval %d: %s, step %s, wake_at %v (step started %v): want parked until its deadline", i, s.Status, approve.Status, s.WakeAt, approve.StartedAt)
		}
	}
	t.Logf("with one slot, hello, flaky and hello finished %v after the worker started, both approvals parked", threeDone.Round(time.Millisecond))

	signalled := time.Now()
	if out, errOut, code := demo(t, with(global, "signal", ids[1])...); code != 0 {
		t.Fatalf("signal: exit %d %s\n%s", code, out, errOut)
	}
	s := awaitStatus(t, global, ids[1], time.Minute, runstate.StatusSuccess, runstate.StatusFailed, runstate.StatusTimeout)
	deploy, _ := s.Step("deploy")
	if s.Status != runstate.StatusSuccess || deploy.Status != runstate.StepSuccess || !s.WakeAt.IsZero() {
		t.Fatalf("the signalled approval: %s, deploy %s, wake_at %v", s.Status, deploy.Status, s.WakeAt)
	}
	t.Logf("the signalled approval finished %v after the signal", time.Since(signalled).Round(time.Millisecond))
	if got, want := strings.Join(transitions(t, global, ids[1]), " "), ">queued queued>running running>waiting waiting>running running>success"; got != want {
		t.Errorf("audit trail %s, want %s", got, want)
	}
	var resumed runstate.AuditEvent
	for _, e := range runAudit(t, global, ids[1]) {
		if e.From == runstate.StatusWaiting && e.To == runstate.StatusRunning {
			resumed = e
		}
	}
	if !strings.Contains(resumed.Reason, "signalled by operator") || resumed.LeaseToken == 0 {
		t.Errorf("the resume says who signalled and carries the claim's token: %+v", resumed)
	}
	if s := runStatus(t, global, ids[4]); s.Status != runstate.StatusWaiting || s.WakeAt.IsZero() {
		t.Errorf("the other approval: %s, wake_at %v; want parked", s.Status, s.WakeAt)
	}
	// The worker took the woken run when the store told it, not at a poll.
	w.await(t, `claimed run.* run_id=`+ids[1]+`.* status=waiting`, 10*time.Second)
}

// Durable timers: twenty runs sleep in a step for a few seconds, parked;
// the worker that parked them is killed; a worker started later completes
// all twenty, each no earlier than its due time, each run once, and every
// audit trail shows the sleep as running > waiting > running.
func TestSleepingRunsOutliveTheWorkerThatParkedThem(t *testing.T) {
	const runs, nap = 20, 10 * time.Second
	global := []string{"--data-dir", t.TempDir(), "--lease", "5s"}
	// The last step leaves a mark per execution: a run executed twice
	// leaves two.
	marks := filepath.Join(t.TempDir(), "marks")
	wf := writeWorkflow(t, fmt.Sprintf(`name: timers
steps:
  - name: before
    type: shell
    command: echo before
  - name: nap
    type: sleep
    duration: %v
  - name: after
    type: shell
    command: echo "$RUNSTATE_RUN_ID" >> %s
`, nap, marks))
	var ids []string
	for range runs {
		out, errOut, code := demo(t, with(global, "submit", wf)...)
		if code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	first := startDemo(t, with(global, "worker", "--slots", "4", "--poll", "1s")...)
	for range runs {
		first.await(t, `step nap parked until`, time.Minute)
	}
	// Every run sleeps, parked, held by nobody: the worker is killed.
	syscall.Kill(-first.cmd.Process.Pid, syscall.SIGKILL)
	first.wait()
	for _, id := range ids {
		s := runStatus(t, global, id)
		if s.Status != runstate.StatusWaiting || s.WakeAt.IsZero() {
			t.Fatalf("run %s after the kill: %s, wake_at %v", id, s.Status, s.WakeAt)
		}
	}

	second := startDemo(t, with(global, "worker", "--slots", "2", "--poll", "1s")...)
	second.await(t, `worker started`, 10*time.Second)
	var late []time.Duration
	for _, id := range ids {
		s := awaitStatus(t, global, id, 2*time.Minute, runstate.StatusSuccess, runstate.StatusFailed, runstate.StatusInterrupted)
		napStep, _ := s.Step("nap")
		after, _ := s.Step("after")
		due := napStep.StartedAt.Add(nap)
		if s.Status != runstate.StatusSuccess || napStep.Status != runstate.StepSuccess || napStep.FinishedAt.Before(due) || len(after.Hosts) != 1 {
			t.Fatalf("run %s: %s, nap %s finished %v (due %v), after %+v", id, s.Status, napStep.Status, napStep.FinishedAt, due, after.Hosts)
		}
		if got, want := strings.Join(transitions(t, global, id), " "), ">queued queued>running running>waiting waiting>running running>success"; got != want {
			t.Errorf("run %s audit trail %s, want %s", id, got, want)
		}
		late = append(late, napStep.FinishedAt.Sub(due))
	}
	b, err := os.ReadFile(marks)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if n := strings.Count(string(b), id+"\n"); n != 1 {
			t.Errorf("run %s executed its last step %d times", id, n)
		}
	}
	slices.Sort(late)
	t.Logf("%d timers of %v, parked by a worker that was then killed, woken on another: late by %v (median) to %v (most), %v",
		runs, nap, late[len(late)/2].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond), late)
}
