package workflow_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory/memorytest"
	"github.com/runstate/runstate/cmd/demo-runner/internal/workflow"
	"github.com/runstate/runstate/internal/testsupport/proctest"
	"github.com/runstate/runstate/tracker"
)

func TestParseRefusesBadWorkflows(t *testing.T) {
	for yaml, want := range map[string]string{
		"steps: [{name: a, type: sleep, duration: 1s}]":                                                "name is required",
		"name: w\nsteps: []":                                                                           "no steps",
		"name: w\nsteps: [{name: a, type: bake}]":                                                      "unknown type",
		"name: w\nsteps: [{name: a, type: shell}]":                                                     "needs a command",
		"name: w\nsteps: [{name: a, type: sleep}]":                                                     "positive duration",
		"name: w\nsteps: [{name: a, type: wait}]":                                                      "positive timeout",
		"name: w\nsteps: [{name: a, type: fail, status: exploded}]":                                    "failed, denied or timeout",
		"name: w\nsteps: [{name: a, type: sleep, duration: 1s}, {name: a, type: sleep, duration: 1s}]": "used twice",
		"name: w\nsteps: [{name: a, type: sleep, duration: 1s, colour: red}]":                          "colour",
	} {
		if _, err := workflow.Parse([]byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error mentioning %q", yaml, err, want)
		}
	}
}

func TestMain(m *testing.M) {
	// The tests' supervisor is this test binary, as the demo runner's is itself.
	if len(os.Args) > 1 && os.Args[1] == workflow.SupervisorArg {
		os.Exit(workflow.Supervise(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func supervisor(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, workflow.SupervisorArg}
}

// execute runs a workflow on a fresh memory store and returns the final run.
func execute(t *testing.T, yaml string, during func(store runstate.RunStateStore, id string)) (runstate.RunSnapshot, error) {
	t.Helper()
	wf, err := workflow.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	store := memorytest.Open(t, nil)
	tr := tracker.New(store, tracker.Options{})
	s, err := tr.Create(context.Background(), runstate.CreateRunParams{WorkflowName: wf.Name, Steps: wf.StepSpecs()})
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		go during(store, s.RunID)
	}
	run, _ := tr.Attach(s, tracker.Lease{})
	err = workflow.Execute(context.Background(), run, wf, workflow.Options{Hold: true, Poll: 10 * time.Millisecond, Supervisor: supervisor(t)})
	final, _ := store.GetRun(context.Background(), s.RunID)
	return final, err
}

func TestShellFailureFailsTheRunWithADiagnostic(t *testing.T) {
	run, err := execute(t, `
name: w
steps:
  - name: build
    type: shell
    hosts: [ok-host, bad-host]
    command: 'echo "on $RUNSTATE_HOST"; test "$RUNSTATE_HOST" = ok-host || exit 3'
  - name: deploy
    type: sleep
    duration: 1s
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	build, _ := run.Step("build")
	good, _ := build.Host("ok-host")
	bad, _ := build.Host("bad-host")
	deploy, _ := run.Step("deploy")
	if run.Status != runstate.StatusFailed || run.Diagnostic == nil || run.Diagnostic.ErrorCode != "STEP_FAILED" ||
		run.Diagnostic.SourceStep != "build" || run.Diagnostic.SourceHost != "bad-host" {
		t.Fatalf("run %s, diagnostic %+v", run.Status, run.Diagnostic)
	}
	if good.Status != runstate.StepSuccess || bad.Status != runstate.StepFailed || !strings.Contains(bad.Error, "exit status 3") ||
		bad.OutputSummary != "on bad-host\n" || build.Status != runstate.StepFailed || deploy.Status != runstate.StepQueued {
		t.Fatalf("steps: %+v", run.Steps)
	}
}

func TestWaitResumesOnSignalAndTimesOutWithout(t *testing.T) {
	const wf = `
name: w
steps:
  - name: approval
    type: wait
    timeout: %s
  - name: after
    type: sleep
    duration: 10ms
`
	signal := func(store runstate.RunStateStore, id string) {
		op := tracker.Operator{Store: store, Actor: runstate.Actor{Kind: runstate.ActorOperator}}
		for {
			if _, err := op.Signal(context.Background(), id); err == nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	run, err := execute(t, strings.Replace(wf, "%s", "1m", 1), signal)
	if err != nil || run.Status != runstate.StatusSuccess {
		t.Fatalf("signalled wait: %s %v", run.Status, err)
	}
	run, err = execute(t, strings.Replace(wf, "%s", "100ms", 1), nil)
	if err != nil || run.Status != runstate.StatusTimeout || run.Diagnostic == nil || run.Diagnostic.ErrorCode != "WAIT_TIMEOUT" || !run.Diagnostic.Retryable {
		t.Fatalf("unsignalled wait: %s %+v %v", run.Status, run.Diagnostic, err)
	}
}

func TestFailStepAndCancellation(t *testing.T) {
	run, err := execute(t, "name: w\nsteps:\n  - name: policy\n    type: fail\n    status: denied\n    message: not on Fridays\n", nil)
	if err != nil || run.Status != runstate.StatusDenied || run.Diagnostic.Message != "not on Fridays" {
		t.Fatalf("fail step: %s %+v %v", run.Status, run.Diagnostic, err)
	}
	cancel := func(store runstate.RunStateStore, id string) {
		for {
			s, _ := store.GetRun(context.Background(), id)
			if st, _ := s.Step("long"); st != nil && st.Status == runstate.StepRunning {
				store.UpdateRun(context.Background(), runstate.UpdateRunParams{RunID: id, ExpectedVersion: s.Version, Status: "canceled"})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	run, err = execute(t, "name: w\nsteps:\n  - name: long\n    type: wait\n    timeout: 1m\n", cancel)
	if !errors.Is(err, tracker.ErrRunEnded) || run.Status != runstate.StatusCanceled {
		t.Fatalf("a run canceled by an operator: %s %v", run.Status, err)
	}
}

// A timed-out shell step kills the command's whole process group: no child
// of the shell outlives the step.
func TestShellTimeoutKillsTheWholeCommand(t *testing.T) {
	proctest.Require(t)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The timeout leaves the shell, on a loaded machine, ample time to
	// start its child and write the pid before the whole group is killed.
	run, err := execute(t, "name: w\nsteps:\n  - name: slow\n    type: shell\n    command: 'sleep 30 & echo $! > "+pidFile+"; wait; echo done'\n    timeout: 2s\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := run.Step("slow")
	if run.Status != runstate.StatusFailed || !strings.Contains(slow.Hosts[0].Error, "timed out after 2s") || strings.Contains(slow.Hosts[0].OutputSummary, "done") {
		t.Fatalf("run %s, host %+v", run.Status, slow.Hosts[0])
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the shell's child %d is still alive after the step timed out", pid)
	}
}

var alive = proctest.Alive

func TestOversizedFileIsRefusedBeforeParsing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// 200 MB took 22 s and 7.5 GB to fail when the file was parsed whole.
	if err := f.Truncate(200 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = workflow.Load(path)
	if !errors.Is(err, workflow.ErrInvalid) || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("a 200 MB file: %v", err)
	}
}

func TestControlBytesAreEscapedInErrors(t *testing.T) {
	for _, doc := range []string{
		"name: \"\\e[2J\\e[31mred\"\nsteps: [{name: x, type: shell}]\n", // a valid YAML escape in the name
		"name: \x1b[2Jraw\nsteps: []\n",                                 // a raw escape byte in the file
		"name: ok\nsteps: [{name: \"\\u0007bell\", type: fail, status: broken}]\n",
		"name: \xff\xfe\nsteps: []\n", // invalid UTF-8
	} {
		_, err := workflow.Parse([]byte(doc))
		if !errors.Is(err, workflow.ErrInvalid) {
			t.Fatalf("%q: %v", doc, err)
		}
		msg := err.Error()
		for _, r := range msg {
			if r != '\n' && r != '\t' && (unicode.IsControl(r) || r == utf8.RuneError) {
				t.Errorf("%q: the error holds %U raw: %q", doc, r, msg)
			}
		}
	}
}
