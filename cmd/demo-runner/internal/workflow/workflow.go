// Package workflow is the demo runner's engine: it reads workflow YAML and
// executes it, reporting every state change through a tracker.Run.
package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/tracker"
)

// Workflow is a parsed workflow file.
type Workflow struct {
	Name  string `yaml:"name"`
	Steps []Step `yaml:"steps"`
}

// Step types.
const (
	Shell = "shell" // runs command on each host, in parallel
	Sleep = "sleep" // waits for duration
	Fail  = "fail"  // ends the run in status (failed, denied or timeout) with message
	Wait  = "wait"  // the run waits for a signal, at most timeout; then it ends in timeout
)

// Step is one step of a workflow.
type Step struct {
	Name      string        `yaml:"name"`
	Type      string        `yaml:"type"`
	Hosts     []string      `yaml:"hosts"`
	Command   string        `yaml:"command"`
	Timeout   time.Duration `yaml:"timeout"`
	Duration  time.Duration `yaml:"duration"`
	Message   string        `yaml:"message"`
	Status    string        `yaml:"status"`
	Retryable bool          `yaml:"retryable"`
}

// MaxFileBytes bounds a workflow file: it describes steps, not data, and a
// bound keeps a wrong file from taking the machine's memory to parse.
const MaxFileBytes = 1 << 20

// ErrInvalid is matched (errors.Is) by every error that says a workflow
// file cannot be run: too large, not YAML, or not a workflow.
var ErrInvalid = errors.New("workflow: invalid")

// invalid is a workflow error; its text shows control bytes escaped, so
// that a file's content cannot rewrite the terminal it is reported on.
type invalid string

func (e invalid) Error() string        { return string(e) }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return invalid(Printable(fmt.Sprintf(format, args...)))
}

// Printable returns s with control bytes other than newline and tab, and
// invalid UTF-8, written as Go escapes.
func Printable(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Load reads and checks a workflow file of at most MaxFileBytes.
func Load(path string) (Workflow, error) {
	f, err := os.Open(path)
	if err != nil {
		return Workflow{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return Workflow{}, err
	}
	if len(b) > MaxFileBytes {
		return Workflow{}, invalidf("workflow %s: larger than %d bytes (1 MiB); a workflow file lists steps, is this the right file?", path, MaxFileBytes)
	}
	return Parse(b)
}

// Parse reads and checks workflow YAML; its errors match ErrInvalid.
func Parse(b []byte) (Workflow, error) {
	if len(b) > MaxFileBytes {
		return Workflow{}, invalidf("workflow: larger than %d bytes (1 MiB)", MaxFileBytes)
	}
	w, err := parse(b)
	if err != nil {
		return w, invalid(Printable(err.Error()))
	}
	return w, nil
}

func parse(b []byte) (Workflow, error) {
	var w Workflow
	if err := yaml.UnmarshalWithOptions(b, &w, yaml.Strict()); err != nil {
		return w, fmt.Errorf("workflow: %w", err)
	}
	if strings.TrimSpace(w.Name) == "" {
		return w, errors.New("workflow: name is required")
	}
	if len(w.Steps) == 0 {
		return w, errors.New("workflow: it has no steps")
	}
	seen := map[string]bool{}
	for i := range w.Steps {
		s := &w.Steps[i]
		where := fmt.Sprintf("workflow %s, step %d (%s)", w.Name, i+1, s.Name)
		switch {
		case strings.TrimSpace(s.Name) == "":
			return w, fmt.Errorf("workflow %s, step %d: name is required", w.Name, i+1)
		case seen[s.Name]:
			return w, fmt.Errorf("%s: the name is used twice", where)
		case s.Type == Shell && strings.TrimSpace(s.Command) == "":
			return w, fmt.Errorf("%s: a shell step needs a command", where)
		case s.Type == Sleep && s.Duration <= 0:
			return w, fmt.Errorf("%s: a sleep step needs a positive duration", where)
		case s.Type == Wait && s.Timeout <= 0:
			return w, fmt.Errorf("%s: a wait step needs a positive timeout", where)
		case s.Type == Fail && s.Status != "" && !slices.Contains([]string{"failed", "denied", "timeout"}, s.Status):
			return w, fmt.Errorf("%s: status must be failed, denied or timeout", where)
		case !slices.Contains([]string{Shell, Sleep, Fail, Wait}, s.Type):
			return w, fmt.Errorf("%s: unknown type %q (want shell, sleep, fail or wait)", where, s.Type)
		}
		seen[s.Name] = true
		if s.Type == Shell && len(s.Hosts) == 0 {
			s.Hosts = []string{"localhost"}
		}
		if s.Type == Shell && s.Timeout == 0 {
			s.Timeout = time.Minute
		}
	}
	return w, nil
}

// StepSpecs declares the workflow's steps and hosts for a new run.
func (w Workflow) StepSpecs() []runstate.StepSpec {
	out := make([]runstate.StepSpec, len(w.Steps))
	for i, s := range w.Steps {
		out[i] = runstate.StepSpec{Name: s.Name, Hosts: s.Hosts}
	}
	return out
}

// Options adjust Execute.
type Options struct {
	// Progress, when set, receives one line per change.
	Progress func(format string, args ...any)
	// Hold keeps a run that waits (a wait step, a sleep step) in hand
	// until it goes on: its lease renewed, polling every Poll for a
	// signal. Without it such a run is parked in the store
	// (tracker.Run.Park) and Execute returns ErrParked: the caller holds
	// nothing while the run waits, and whoever claims the run when it
	// wakes goes on with it. A store that cannot park (a plugin or
	// gateway of protocol 1.7 or older) is held as if Hold were set.
	Hold bool
	// Poll is how often a held waiting run looks for its signal (default 200ms).
	Poll time.Duration
	// Park, when it closes, makes a held wait step stop waiting: Execute
	// returns ErrParked and the run stays waiting, for the caller to
	// release. A waiting run executes nothing, so a worker that is
	// shutting down leaves it for another instead of interrupting it.
	Park <-chan struct{}
	// Supervisor is the command that runs each host command under a step
	// supervisor (see Supervise), for example
	// {os.Executable(), SupervisorArg}. The supervisor ends the command when
	// this process dies and when the run's lease is not renewed in time.
	// Without one, commands run directly and outlive a killed worker.
	Supervisor []string
}

// ErrParked: the run waits, with its step running, for a signal or a
// time: parked in the store with its lease released (its wake time is
// RunSnapshot.WakeAt), or, held, left because Options.Park closed, for
// the caller to release.
var ErrParked = errors.New("workflow: the waiting run was parked")

// Execute runs w as run. It returns nil when the run reached its end
// (whatever the status), tracker.ErrRunEnded when someone else ended it,
// runstate.ErrLeaseLost when another worker took it over, ErrParked when it
// was left waiting, or ctx's error.
//
// Every side effect is preceded by a write or a lease check carrying the
// run's token (docs/leases.md): a worker that wakes after another took its
// run over stops before it starts anything.
func Execute(ctx context.Context, run *tracker.Run, w Workflow, opts Options) error {
	if opts.Progress == nil {
		opts.Progress = func(string, ...any) {}
	}
	if opts.Poll == 0 {
		opts.Poll = 200 * time.Millisecond
	}
	e := &execution{run: run, opts: opts, id: run.Snapshot().RunID}
	// A waiting run (parked, then claimed again) goes on waiting in its
	// wait step; otherwise the run is, or becomes, running.
	if run.Snapshot().Status != runstate.StatusWaiting {
		if err := run.Begin(ctx); err != nil {
			return err
		}
	}
	e.say("running workflow %s", w.Name)
	for _, s := range w.Steps {
		snap := run.Snapshot()
		if st, ok := snap.Step(s.Name); ok && st.Status.Terminal() {
			continue // done by an earlier incarnation (takeover)
		}
		ended, err := e.step(ctx, s)
		if err != nil || ended {
			return err
		}
	}
	if err := run.Finish(ctx, runstate.StatusSuccess, nil, ""); err != nil {
		return err
	}
	e.say("success")
	return nil
}

type execution struct {
	run  *tracker.Run
	opts Options
	id   string
}

func (e *execution) say(format string, args ...any) {
	e.opts.Progress("%s %s", e.id, fmt.Sprintf(format, args...))
}

// step executes one step; ended reports that the run reached its end.
func (e *execution) step(ctx context.Context, s Step) (ended bool, err error) {
	if err := e.run.StepStarted(ctx, s.Name); err != nil {
		return false, err
	}
	e.say("step %s started", s.Name)
	switch s.Type {
	case Sleep:
		if err := e.sleep(ctx, s); err != nil {
			return false, err
		}
	case Shell:
		failedHost, failure, err := e.shell(ctx, s)
		if err != nil {
			return false, err
		}
		if failedHost != "" {
			return true, e.fail(ctx, s, runstate.StatusFailed, &runstate.Diagnostic{ErrorCode: "STEP_FAILED", Message: failure,
				Retryable: s.Retryable, SourceStep: s.Name, SourceHost: failedHost})
		}
	case Fail:
		status := runstate.RunStatus(s.Status)
		if status == "" {
			status = runstate.StatusFailed
		}
		msg := s.Message
		if msg == "" {
			msg = "the workflow's fail step ran"
		}
		return true, e.fail(ctx, s, status, &runstate.Diagnostic{ErrorCode: "FAIL_STEP", Message: msg, Retryable: s.Retryable, SourceStep: s.Name})
	case Wait:
		return e.wait(ctx, s)
	}
	if err := e.run.StepFinished(ctx, s.Name, runstate.StepSuccess); err != nil {
		return false, err
	}
	e.say("step %s success", s.Name)
	return false, nil
}

func (e *execution) fail(ctx context.Context, s Step, status runstate.RunStatus, d *runstate.Diagnostic) error {
	if err := e.run.StepFinished(ctx, s.Name, runstate.StepFailed); err != nil {
		return err
	}
	if err := e.run.Finish(ctx, status, d, ""); err != nil {
		return err
	}
	e.say("step %s failed: %s; run %s", s.Name, d.Message, status)
	return nil
}

// shell runs the command on every host in parallel; it returns the first
// failing host and why.
func (e *execution) shell(ctx context.Context, s Step) (failedHost, failure string, err error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, host := range s.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runErr, err := e.host(ctx, s, host)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp(firstErr, err)
				return
			}
			if runErr != nil && failedHost == "" {
				failedHost, failure = host, fmt.Sprintf("host %s: %v", host, runErr)
			}
			status := runstate.StepSuccess
			if runErr != nil {
				status = runstate.StepFailed
			}
			e.say("step %s host %s %s", s.Name, host, status)
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return failedHost, failure, firstErr
}

// host runs a shell step on one host and records the outcome: runErr is
// the command's failure, err a failure to record it or to go ahead at all.
func (e *execution) host(ctx context.Context, s Step, host string) (runErr, err error) {
	if err := e.run.HostStarted(ctx, s.Name, host); err != nil {
		return nil, err
	}
	var out string
	for attempt := 1; ; attempt++ {
		// The last check before the side effect: the lease is still this
		// worker's, and stays so at least until the supervisor's deadline.
		if err := e.run.Confirm(ctx); err != nil {
			return nil, err
		}
		out, runErr = e.runCommand(ctx, s, host)
		// A check that took longer than the lease proves nothing: check again.
		if !errors.Is(runErr, errLeaseWindowClosed) {
			break
		}
		if attempt == 3 {
			return nil, fmt.Errorf("%w: %v", runstate.ErrLeaseLost, runErr)
		}
	}
	if errors.Is(runErr, ErrLeaseLapsed) {
		// The command was ended for the lease, not for what it did: the
		// host's outcome is not the command's, and the run is no longer
		// certainly this worker's to write.
		return nil, runErr
	}
	status, errText := runstate.StepSuccess, ""
	if runErr != nil {
		status, errText = runstate.StepFailed, runErr.Error()
	}
	return runErr, e.run.HostFinished(ctx, s.Name, host, status, out, errText)
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// runCommand runs a shell step on one host (here: locally, with the host's
// name in RUNSTATE_HOST) and returns its combined output. The command
// learns its run, step, host and lease token from the environment; the
// token is how it fences systems outside the store (docs/leases.md).
func (e *execution) runCommand(ctx context.Context, s Step, host string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	argv := append(slices.Clone(e.opts.Supervisor), "sh", "-c", s.Command)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "RUNSTATE_HOST="+host, "RUNSTATE_RUN_ID="+e.id, "RUNSTATE_STEP="+s.Name,
		fmt.Sprintf("RUNSTATE_LEASE_TOKEN=%d", e.run.Token()))
	// The command runs in its own process group, and a timeout or a
	// cancellation kills the whole group: killing only the shell would leave
	// its children running, holding the output pipe open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	var err error
	if len(e.opts.Supervisor) > 0 {
		// The command is ended a little before the lease can end, for the
		// time ending it takes.
		err = superviseCommand(cmd, e.run, min(e.run.Lease().TTL/10, time.Second))
	} else {
		err = cmd.Run()
	}
	if (ctx.Err() != nil || errors.Is(err, ErrLeaseLapsed)) && cmd.Process != nil {
		// The group was killed (by the timeout, the cancellation, or the
		// supervisor when the lease could lapse): the step ends once its
		// processes are gone, not merely signalled (a process dies when
		// next scheduled, which on a loaded machine may be a while).
		awaitGroupGone(cmd.Process.Pid, 5*time.Second)
	}
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("timed out after %v", s.Timeout)
	}
	return out.String(), err
}

// awaitGroupGone waits, at most for limit, until no process of the group
// pgid is left but zombies (which have run their last instruction).
func awaitGroupGone(pgid int, limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !groupHasLiving(pgid) {
			return
		}
	}
}

// wait waits for a signal for this step, at most its timeout, counted
// from when the step started, across workers; without one it ends the run
// in timeout. While there is nothing to do the run is parked until the
// deadline (park) and Execute returns ErrParked; whoever claims the run
// when it wakes, signalled or at the deadline, goes on here. A held run
// (Options.Hold, or a store that cannot park) polls for its signal.
func (e *execution) wait(ctx context.Context, s Step) (bool, error) {
	why := "waiting in step " + s.Name + " for a signal"
	if e.run.Snapshot().Status != runstate.StatusWaiting {
		if err := e.run.Wait(ctx, why); err != nil {
			return false, err
		}
		e.say("step %s waiting for a signal (at most %v): demo-runner signal %s", s.Name, s.Timeout, e.id)
	}
	deadline := stepStart(e.run.Snapshot(), s.Name).Add(s.Timeout)
	hold := e.opts.Hold
	var tick <-chan time.Time
	for {
		cur := e.run.Snapshot()
		switch {
		case cur.Status.Terminal():
			return false, fmt.Errorf("%w: it is %s", tracker.ErrRunEnded, cur.Status)
		case tracker.Signalled(cur, s.Name):
			// The signal is consumed by a write fenced by this worker's
			// lease: a worker that lost the run while it waited stops here.
			if err := e.run.Resume(ctx, s.Name); err != nil { // the wait step ends with it
				return false, err
			}
			e.say("step %s signalled", s.Name)
			return false, nil
		case cur.Status == runstate.StatusRunning:
			// Running without a signal is no signal: another worker may have
			// resumed the run after taking it over. A renewal carrying this
			// worker's token decides, and a takeover refuses it. Granted,
			// no worker has held the run since, so whoever moved it wrote
			// without a lease (an operator), and the wait is over.
			if err := e.run.Confirm(ctx); err != nil {
				return false, err
			}
			if err := e.run.Resume(ctx, s.Name); err != nil {
				return false, err
			}
			e.say("step %s resumed by a write without a lease", s.Name)
			return false, nil
		case reached(cur, deadline):
			if err := e.run.Resume(ctx, ""); err != nil {
				return false, err
			}
			return true, e.fail(ctx, s, runstate.StatusTimeout, &runstate.Diagnostic{ErrorCode: "WAIT_TIMEOUT",
				Message: fmt.Sprintf("no signal within %v", s.Timeout), Retryable: true, SourceStep: s.Name})
		case !hold:
			parked, err := e.park(ctx, s, deadline, why)
			switch {
			case parked:
				return false, ErrParked
			case err != nil && !errors.Is(err, runstate.ErrUnsupported):
				return false, err
			}
			hold = err != nil
			continue // signalled or moved meanwhile: look again
		}
		if tick == nil {
			t := time.NewTicker(e.opts.Poll)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-e.opts.Park:
			return false, ErrParked
		case <-tick:
		}
		if _, err := e.run.Refresh(ctx); err != nil {
			return false, err
		}
	}
}

// sleep waits for the step's duration, counted from when the step
// started, across workers: a durable timer. The run is parked until then
// (park), and whoever claims it when it wakes goes on here: a worker that
// dies meanwhile loses nothing, and none holds the run while it sleeps. A
// signal does not end a sleep: a run claimed before its time is parked
// again. A held run (Options.Hold, a store that cannot park, or a sleep
// shorter than MinParkedSleep) sleeps here.
func (e *execution) sleep(ctx context.Context, s Step) error {
	due := stepStart(e.run.Snapshot(), s.Name).Add(s.Duration)
	cur := e.run.Snapshot()
	if reached(cur, due) {
		if cur.Status == runstate.StatusWaiting {
			return e.run.Resume(ctx, "") // the caller ends the step
		}
		return nil
	}
	if !e.opts.Hold && s.Duration >= MinParkedSleep {
		why := fmt.Sprintf("sleeping in step %s until %s", s.Name, due.UTC().Format(time.RFC3339Nano))
		parked, err := e.park(ctx, s, due, why)
		switch {
		case parked:
			return ErrParked
		case err != nil && !errors.Is(err, runstate.ErrUnsupported):
			return err
		case err == nil: // someone else moved the run meanwhile
			return fmt.Errorf("%w: it is %s", tracker.ErrRunEnded, e.run.Snapshot().Status)
		}
	}
	if e.run.Snapshot().Status == runstate.StatusWaiting {
		if err := e.run.Resume(ctx, ""); err != nil {
			return err
		}
	}
	select {
	case <-time.After(time.Until(due)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MinParkedSleep is the shortest sleep step that is parked: a shorter one
// is slept in hand, as parking it would cost about as long (two writes, a
// claim), and a worker that dies during it leaves the run to recovery.
const MinParkedSleep = time.Second

// park parks the run until wake (tracker.Run.Park), for step s; it
// reports false when there is something to do now (a signal, another
// status), and runstate.ErrUnsupported from a store that cannot park.
func (e *execution) park(ctx context.Context, s Step, wake time.Time, why string) (bool, error) {
	signalFor := ""
	if s.Type == Wait {
		signalFor = s.Name
	}
	parked, err := e.run.Park(ctx, tracker.ParkParams{Until: wake, Why: why, Step: signalFor})
	switch {
	case errors.Is(err, runstate.ErrUnsupported):
		e.say("step %s: the store cannot park the run, so it stays in hand (%v)", s.Name, err)
	case parked:
		e.say("step %s parked until %s: no worker holds the run until then", s.Name, wake.UTC().Format(time.RFC3339Nano))
	}
	return parked, err
}

// stepStart is when step started, in the store's clock; now when unknown.
func stepStart(run runstate.RunSnapshot, step string) time.Time {
	if st, ok := run.Step(step); ok && !st.StartedAt.IsZero() {
		return st.StartedAt
	}
	return time.Now()
}

// reached reports whether the time at has come for run: this worker's
// clock says so, or the run was claimed while parked until at or later
// (the store admits a parked run once its clock reached the wake time).
func reached(run runstate.RunSnapshot, at time.Time) bool {
	return !time.Now().Before(at) || (!run.WakeAt.IsZero() && !run.WakeAt.Before(at))
}
