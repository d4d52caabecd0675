package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/testsupport/proctest"
)

// stepWorkflow returns a workflow that stops in a step of type kind named
// target (for kind fail: in a sleep right before the fail step). long
// steps last until stopped; short ones end within a second.
func stepWorkflow(t *testing.T, kind string, long bool) string {
	d, shell := "500ms", "sleep 0.5"
	if long {
		d, shell = "30s", "sleep 30"
	}
	steps := map[string]string{
		"shell": "  - name: target\n    type: shell\n    hosts: [h1, h2]\n    command: " + shell + "\n    timeout: 2m\n",
		"sleep": "  - name: target\n    type: sleep\n    duration: " + d + "\n",
		"wait":  "  - name: target\n    type: wait\n    timeout: 10m\n",
		"fail":  "  - name: target\n    type: sleep\n    duration: " + d + "\n  - name: verdict\n    type: fail\n    message: refused\n",
	}[kind]
	return writeWorkflow(t, "name: "+kind+"\nsteps:\n"+steps+"  - name: after\n    type: sleep\n    duration: 10ms\n")
}

// No way a runner stops may provoke INVALID_STATE_TRANSITION: every step
// type, stopped by SIGTERM (within its grace and past it), SIGHUP, SIGINT, an
// operator's cancel, and SIGKILL followed by a restart, ends in a state the
// table allows. A run in a wait or a sleep step is not executing: a worker
// has parked it, so whatever stops the worker leaves it waiting, parked
// until its time, and a signal (a wait) or its time (a sleep) and a
// worker finish it; `run` in the foreground holds it, and releases it
// waiting (a wait) or interrupts it (a sleep).
func TestEveryWayARunnerStopsEndsInAnAllowedState(t *testing.T) {
	type outcome map[string]runstate.RunStatus // by step kind
	all := func(s runstate.RunStatus) outcome {
		return outcome{"shell": s, "sleep": s, "fail": s, "wait": runstate.StatusWaiting}
	}
	// A worker parks every kind of step but a shell step's.
	parked := func(shell runstate.RunStatus) outcome {
		return outcome{"shell": shell, "sleep": runstate.StatusWaiting, "fail": runstate.StatusWaiting, "wait": runstate.StatusWaiting}
	}
	for _, mode := range []struct {
		name string
		long bool
		want outcome
	}{
		// Sleeps under a second are slept in hand (workflow.MinParkedSleep).
		{"SIGTERM within grace", false, outcome{"shell": runstate.StatusSuccess, "sleep": runstate.StatusSuccess, "fail": runstate.StatusFailed, "wait": runstate.StatusWaiting}},
		{"SIGTERM past grace", true, parked(runstate.StatusInterrupted)},
		{"SIGHUP past grace", true, parked(runstate.StatusInterrupted)}, // the terminal went away
		{"SIGINT to run", true, all(runstate.StatusInterrupted)},
		{"cancel", true, outcome{"shell": runstate.StatusCanceled, "sleep": runstate.StatusCanceled, "fail": runstate.StatusCanceled, "wait": runstate.StatusCanceled}},
		{"SIGKILL and restart", true, parked(runstate.StatusInterrupted)},
	} {
		for _, kind := range []string{"shell", "sleep", "wait", "fail"} {
			t.Run(mode.name+"/"+kind, func(t *testing.T) {
				t.Parallel()
				global := []string{"--data-dir", t.TempDir(), "--worker-id", "sweeper", "--lease", "5s"}
				wf := stepWorkflow(t, kind, mode.long)
				started := `step target (started|waiting)`
				var p *proc
				var id string
				if mode.name == "SIGINT to run" {
					p = startDemo(t, with(global, "run", wf)...)
					id = p.await(t, `run created.* run_id=(\S+)`, 10*time.Second)[1]
				} else {
					out, errOut, code := demo(t, with(global, "submit", wf)...)
					if code != 0 {
						t.Fatalf("submit: %s", errOut)
					}
					id = strings.TrimSpace(out)
					grace := "30s"
					if strings.HasSuffix(mode.name, "past grace") {
						grace = "200ms"
					}
					p = startDemo(t, with(global, "worker", "--grace", grace)...)
				}
				p.await(t, started, 10*time.Second)
				if kind == "wait" {
					p.await(t, `step target waiting`, 10*time.Second)
				}
				inHand := kind == "shell" || mode.name == "SIGINT to run" || (kind != "wait" && !mode.long)
				if !inHand {
					p.await(t, `step target parked until`, 10*time.Second)
				}
				switch mode.name {
				case "SIGTERM within grace", "SIGTERM past grace", "SIGHUP past grace":
					sig := syscall.SIGTERM
					if strings.HasPrefix(mode.name, "SIGHUP") {
						sig = syscall.SIGHUP
					}
					p.cmd.Process.Signal(sig)
					if err := p.cmd.Wait(); err != nil {
						t.Fatalf("worker after %v: %v\n%s", sig, err, p.logs())
					}
				case "SIGINT to run":
					p.cmd.Process.Signal(syscall.SIGINT)
					err := p.cmd.Wait()
					if code := exitCode(err); code != exitRunFailed {
						t.Fatalf("run after SIGINT: exit %d (%v), want %d\n%s", code, err, exitRunFailed, p.logs())
					}
				case "cancel":
					out, errOut, code := demo(t, with(global, "cancel", "--reason", "sweep", id)...)
					if code != 0 || strings.TrimSpace(out) != id+" canceled" {
						t.Fatalf("cancel: exit %d %q\n%s", code, out, errOut)
					}
					if inHand {
						p.await(t, `ended elsewhere`, 10*time.Second)
					}
					if p.cmd.ProcessState != nil {
						t.Fatalf("the worker exited after its run was canceled")
					}
				case "SIGKILL and restart":
					syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
					p.cmd.Wait()
					if _, errOut, code := demo(t, with(global, "recover")...); code != 0 {
						t.Fatalf("recover after the restart: exit %d\n%s", code, errOut)
					}
				}
				s := runStatus(t, global, id)
				if s.Status != mode.want[kind] {
					t.Fatalf("run %s, want %s\n%s", s.Status, mode.want[kind], p.logs())
				}
				checkNoRejectedTransition(t, global, id)
				checkStepsFollowTheRun(t, s)
				if s.Status != runstate.StatusWaiting {
					return
				}
				target, _ := s.Step("target")
				if !inHand {
					// Parked until its time, counted from the step's start.
					d := map[string]time.Duration{"wait": 10 * time.Minute, "sleep": 30 * time.Second, "fail": 30 * time.Second}[kind]
					if !s.WakeAt.Equal(target.StartedAt.Add(d)) {
						t.Fatalf("parked until %v, want %v (the step started %v)", s.WakeAt, target.StartedAt.Add(d), target.StartedAt)
					}
				}
				want := map[string]runstate.RunStatus{"wait": runstate.StatusSuccess, "sleep": runstate.StatusSuccess, "fail": runstate.StatusFailed}[kind]
				if kind != "wait" {
					return // a sleep of 30s, parked: its time is past the test's (TestSleepingRunsOutliveTheWorkerThatParkedThem)
				}
				// A signal and a worker finish it.
				if _, errOut, code := demo(t, with(global, "signal", id)...); code != 0 {
					t.Fatalf("signal: exit %d\n%s", code, errOut)
				}
				if _, errOut, code := demo(t, with(global, "worker", "--once")...); code != 0 {
					t.Fatalf("worker --once: exit %d\n%s", code, errOut)
				}
				if s := runStatus(t, global, id); s.Status != want {
					t.Fatalf("the waiting run, woken and claimed: %s, want %s", s.Status, want)
				}
				checkNoRejectedTransition(t, global, id)
			})
		}
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		return ee.ExitCode()
	}
	return -1
}

func checkNoRejectedTransition(t *testing.T, global []string, id string) {
	t.Helper()
	for _, e := range runAudit(t, global, id) {
		if e.Kind == runstate.AuditRejected || e.ErrorCode == string(runstate.CodeInvalidTransition) {
			t.Errorf("a rejected transition in the audit trail: %+v", e)
		}
	}
}

// checkStepsFollowTheRun: a finished run has no step or host left running.
func checkStepsFollowTheRun(t *testing.T, s runstate.RunSnapshot) {
	t.Helper()
	if !s.Status.Terminal() {
		return
	}
	for _, st := range s.Steps {
		if st.Status == runstate.StepRunning {
			t.Errorf("run %s, but step %s is still running", s.Status, st.Name)
		}
		for _, h := range st.Hosts {
			if h.Status == runstate.StepRunning {
				t.Errorf("run %s, but step %s host %s is still running", s.Status, st.Name, h.Host)
			}
		}
	}
}

// A canceled run carries no state from before the cancel: the step it
// waited in ends canceled with it, and its message says why it ended.
func TestCancelLeavesNoStaleState(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	p := startDemo(t, with(global, "run", "../../examples/workflows/approval.yaml")...)
	id := p.await(t, `run created.* run_id=(\S+)`, 10*time.Second)[1]
	p.await(t, `step approve waiting for a signal`, 10*time.Second)
	if _, errOut, code := demo(t, with(global, "cancel", "--reason", "wrong branch", id)...); code != 0 {
		t.Fatalf("cancel: exit %d\n%s", code, errOut)
	}
	if err := p.cmd.Wait(); exitCode(err) != exitRunFailed {
		t.Fatalf("the run process after the cancel: %v\n%s", err, p.logs())
	}
	s := runStatus(t, global, id)
	approve, _ := s.Step("approve")
	if s.Status != runstate.StatusCanceled || approve.Status != runstate.StepCanceled || strings.Contains(s.Message, "waiting") || !strings.Contains(s.Message, "wrong branch") {
		t.Fatalf("after the cancel: run %s, message %q, step approve %s", s.Status, s.Message, approve.Status)
	}
	evs := runAudit(t, global, id)
	if last := evs[len(evs)-1]; last.To != runstate.StatusCanceled || last.Reason != "wrong branch" || last.Actor.Kind != runstate.ActorOperator {
		t.Fatalf("the cancel's audit event: %+v", last)
	}
}

// A worker killed with SIGKILL takes its steps' commands with it: nothing
// it started runs on, reparented to init.
func TestAKilledWorkersCommandsDieWithIt(t *testing.T) {
	proctest.Require(t)
	global := []string{"--data-dir", t.TempDir()}
	pids := filepath.Join(t.TempDir(), "pids")
	wf := writeWorkflow(t, fmt.Sprintf(`
name: orphans
steps:
  - name: work
    type: shell
    hosts: [h1, h2]
    command: 'sleep 20 & echo $! >> %s; wait'
`, pids))
	if _, errOut, code := demo(t, with(global, "submit", wf)...); code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	w := startDemo(t, with(global, "worker")...)
	w.await(t, `step work started`, 10*time.Second)
	var children []int
	for deadline := time.Now().Add(10 * time.Second); len(children) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(pids)
		children = children[:0]
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			children = append(children, n)
		}
	}
	if len(children) < 2 {
		t.Fatalf("the step's commands did not start: %v", children)
	}
	syscall.Kill(w.cmd.Process.Pid, syscall.SIGKILL) // the worker alone, as the OOM killer would
	w.cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !alive(children[0]) && !alive(children[1]) {
			return
		}
	}
	for _, pid := range children {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("command %d outlived its killed worker", pid)
		}
	}
}

var alive = proctest.Alive
