package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/etcd"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
	"github.com/runstate/runstate/plugin/plugintest"
	"github.com/runstate/runstate/tracker"
)

const (
	demoPkg        = "github.com/runstate/runstate/cmd/demo-runner"
	mysqlPluginPkg = "github.com/runstate/runstate/cmd/runstate-plugin-mysql"
)

var binaries = plugintest.NewBinaries(demoPkg, mysqlPluginPkg)

// sharedStore is a store that several demo-runner processes share, as the
// global flags that name it.
type sharedStore struct {
	name     string
	args     []string
	dsn      string        // the database behind it
	postgres bool          // dsn is PostgreSQL's, not MySQL's
	etcd     *etcd.Options // the etcd store behind it
}

// sharedStores returns MySQL, directly and through the MySQL plugin, each
// on a fresh database, and PostgreSQL on a fresh schema.
func sharedStores(t *testing.T) []sharedStore {
	t.Helper()
	var out []sharedStore
	for _, kind := range []string{"mysql", "plugin-mysql"} {
		dsn := freshDatabase(t)
		args := []string{"--store", "mysql:" + dsn}
		if kind == "plugin-mysql" {
			args = []string{"--store", "plugin:" + binaries.Path(t, mysqlPluginPkg), "--plugin-config", "dsn=" + dsn,
				"--plugin-config", "max_open_conns=4"}
		}
		out = append(out, sharedStore{name: kind, args: args, dsn: dsn})
	}
	dsn := freshSchema(t)
	return append(out, sharedStore{name: "postgres", args: []string{"--store", "postgres:" + dsn}, dsn: dsn, postgres: true})
}

// freshSchema makes a PostgreSQL schema for one test and returns a DSN
// whose search_path is that schema.
func freshSchema(t *testing.T) string {
	t.Helper()
	srv := sqltest.Postgres.Find(t)
	schema, err := srv.CreateSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropSchema(context.Background(), schema) })
	return srv.DSNIn(schema)
}

// freshDatabase makes a MySQL database for one test and returns its DSN.
func freshDatabase(t *testing.T) string {
	t.Helper()
	srv := sqltest.MySQL.Find(t)
	db, err := srv.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropDatabase(context.Background(), db) })
	return srv.DSN(db)
}

// with returns a copy of base followed by more.
func with(base []string, more ...string) []string {
	return append(append([]string{}, base...), more...)
}

func TestMain(m *testing.M) {
	if sock := os.Getenv("RUNSTATE_TEST_DIAL"); sock != "" {
		// A helper process, started as another user: can it reach the
		// socket (exit 3 if not), and is it then served (exit 0) or
		// dropped at once (exit 4)? A gRPC server speaks first.
		c, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			fmt.Println("connected, then:", err)
			os.Exit(4)
		}
		os.Exit(0)
	}
	code := m.Run()
	binaries.Cleanup()
	os.Exit(code)
}

// proc is a demo-runner process whose stderr (its log) the test watches.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	lines  chan string
	stdout bytes.Buffer
	// drained closes once stderr reached its end: every line is in log.
	drained chan struct{}
}

// wait waits for the process to end, once its stderr is read to the end
// (a process killed leaves its last lines in the pipe, which Wait would
// close unread), for at most 10s, as a child it left may hold the pipe.
func (p *proc) wait() error {
	select {
	case <-p.drained:
	case <-time.After(10 * time.Second):
	}
	return p.cmd.Wait()
}

// startDemo starts demo-runner with args in its own process group.
func startDemo(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCommand(t, exec.Command(binaries.Path(t, demoPkg), args...))
}

// startCommand starts cmd in its own process group, watching its stderr.
func startCommand(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, lines: make(chan string, 1000), drained: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout = &p.stdout
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.drained)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); p.cmd.Wait() })
	return p
}

// await returns the first log line matching re, failing after timeout.
func (p *proc) await(t *testing.T, re string, timeout time.Duration) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before logging %q:\n%s", re, p.logs())
			}
			if m := rx.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-deadline:
			t.Fatalf("no log line %q within %v:\n%s", re, timeout, p.logs())
		}
	}
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// demo runs demo-runner to completion and returns stdout, stderr and the exit code.
func demo(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return demoWithEnv(t, nil, args...)
}

// demoWithEnv is demo with env added to the test's environment.
func demoWithEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binaries.Path(t, demoPkg), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func runStatus(t *testing.T, global []string, id string) runstate.RunSnapshot {
	t.Helper()
	out, errOut, code := demo(t, append(global, "status", id)...)
	if code != 0 {
		t.Fatalf("status %s: exit %d\n%s", id, code, errOut)
	}
	var s runstate.RunSnapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status is not JSON: %v\n%s", err, out)
	}
	return s
}

func runAudit(t *testing.T, global []string, id string) []runstate.AuditEvent {
	t.Helper()
	out, errOut, code := demo(t, append(global, "audit", id)...)
	if code != 0 {
		t.Fatalf("audit %s: exit %d\n%s", id, code, errOut)
	}
	var evs []runstate.AuditEvent
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		t.Fatalf("audit is not JSON: %v\n%s", err, out)
	}
	return evs
}

func writeWorkflow(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRunIsQueryableAfterItEndsAfterRestartAndThroughServe(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	out, errOut, code := demo(t, append(global, "run", "../../examples/workflows/hello.yaml")...)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errOut)
	}
	id := strings.Fields(out)[0]
	if !strings.Contains(errOut, "using store") || !strings.Contains(errOut, "badger") {
		t.Errorf("no startup line naming the store:\n%s", errOut)
	}
	// Each command below is a new process on the same store: a restart.
	s := runStatus(t, global, id)
	greet, _ := s.Step("greet")
	if s.Status != runstate.StatusSuccess || greet == nil || len(greet.Hosts) != 2 || !strings.Contains(greet.Hosts[0].OutputSummary, "hello from") {
		t.Fatalf("after the run: %+v", s)
	}
	addr := freePort(t)
	srv := startDemo(t, append(global, "serve", "--addr", addr)...)
	srv.await(t, "serving", 10*time.Second)
	var got runstate.RunSnapshot
	getJSON(t, "http://"+addr+"/runs/"+id, &got)
	if got.RunID != id || got.Status != runstate.StatusSuccess || got.Version != s.Version {
		t.Errorf("served run: %+v", got)
	}
	var missing map[string]any
	if code := getJSON(t, "http://"+addr+"/runs/no-such-run", &missing); code != 404 || missing["code"] != "NOT_FOUND" {
		t.Errorf("unknown run: HTTP %d %v", code, missing)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "runstate_recovery_duration_seconds") || !strings.Contains(string(body), "runstate_recovery_runs_total") {
		t.Errorf("recovery metrics missing from /metrics")
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

func TestKilledRunnerIsRecoveredOnRestart(t *testing.T) {
	global := []string{"--data-dir", t.TempDir(), "--worker-id", "box-1"}
	slow := writeWorkflow(t, `
name: slow
steps:
  - name: prepare
    type: sleep
    duration: 10ms
  - name: work
    type: shell
    hosts: [web-1, web-2]
    command: sleep 60
    timeout: 2m
  - name: never
    type: sleep
    duration: 1s
`)
	quick := writeWorkflow(t, "name: quick\nsteps:\n  - name: only\n    type: sleep\n    duration: 10ms\n")
	out, errOut, code := demo(t, append(global, "submit", "--priority", "7", quick)...)
	if code != 0 {
		t.Fatalf("submit: %d\n%s", code, errOut)
	}
	queued := strings.TrimSpace(out)

	p := startDemo(t, append(global, "run", slow)...)
	id := p.await(t, `run created.* run_id=(\S+)`, 10*time.Second)[1]
	p.await(t, `step work started`, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // the hosts are running
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.cmd.Wait()

	// The restart: any command runs recovery first.
	_, errOut, _ = demo(t, append(global, "recover")...)
	if !strings.Contains(errOut, "recovered run") || !strings.Contains(errOut, id) || !strings.Contains(errOut, "interrupted=1") {
		t.Errorf("recovery did not log the run and a summary:\n%s", errOut)
	}
	s := runStatus(t, global, id)
	if s.Status != runstate.StatusInterrupted || s.InterruptedReason != runstate.ReasonCrashRecovery || s.FinishedAt.IsZero() {
		t.Fatalf("killed run after restart: %s %q", s.Status, s.InterruptedReason)
	}
	work, _ := s.Step("work")
	never, _ := s.Step("never")
	if work.Status != runstate.StepInterrupted || work.Hosts[0].Status != runstate.StepInterrupted || work.Hosts[1].Status != runstate.StepInterrupted || never.Status != runstate.StepQueued {
		t.Errorf("steps and hosts did not follow the run: %+v", s.Steps)
	}
	evs := runAudit(t, global, id)
	var trail []string
	for _, e := range evs {
		trail = append(trail, fmt.Sprintf("%s>%s/%s", e.From, e.To, e.Actor.Kind))
	}
	if strings.Join(trail, " ") != ">queued/worker queued>running/worker running>interrupted/recovery" {
		t.Errorf("audit trail %v", trail)
	}
	q := runStatus(t, global, queued)
	if q.Status != runstate.StatusQueued || q.Priority != 7 {
		t.Errorf("the queued run after recovery: %s priority %d", q.Status, q.Priority)
	}
	// Still claimable: a worker takes it.
	_, errOut, code = demo(t, append(global, "--lease", "3s", "worker", "--once", "--statuses", "queued")...)
	if code != 0 || !strings.Contains(errOut, "claimed run") || !strings.Contains(errOut, queued) {
		t.Errorf("the queued run was not claimable: %d\n%s", code, errOut)
	}
}

func TestTwoWorkersOnMySQLTakeOverWithFencing(t *testing.T) {
	srv := sqltest.MySQL.Find(t)
	ctx := context.Background()
	db, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropDatabase(context.Background(), db) })
	store := "mysql:" + srv.DSN(db)
	wf := writeWorkflow(t, `
name: long
steps:
  - name: work
    type: shell
    command: sleep 2
  - name: finish
    type: sleep
    duration: 10ms
`)
	// A shared store whose steps may resume: the takeover policy (docs/requirements.md#d-recovery).
	lease := []string{"--recovery", "takeover", "--lease", "1500ms", "--renew", "300ms"}
	out, errOut, code := demo(t, "--store", store, "--data-dir", t.TempDir(), "submit", wf)
	if code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	id := strings.TrimSpace(out)

	a := startDemo(t, append([]string{"--store", store, "--data-dir", t.TempDir(), "--worker-id", "worker-a"}, append(lease, "worker")...)...)
	tokenA := atoi(t, a.await(t, `claimed run" run_id=`+id+` token=(\d+)`, 10*time.Second)[1])
	a.await(t, `step work started`, 10*time.Second)
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGSTOP) // a paused zombie: it holds the run but cannot renew

	b := startDemo(t, append([]string{"--store", store, "--data-dir", t.TempDir(), "--worker-id", "worker-b"}, append(lease, "worker", "--statuses", "queued,waiting,running")...)...)
	// A may have stopped inside a transaction: the server ends its session
	// after the stalled-session timeout (10s), and its row lock with it.
	tokenB := atoi(t, b.await(t, `claimed run" run_id=`+id+` token=(\d+)`, 30*time.Second)[1])
	if tokenB <= tokenA {
		t.Fatalf("worker B's token %d is not larger than A's %d", tokenB, tokenA)
	}
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGCONT) // the zombie wakes up and tries to go on
	a.await(t, `lease on the run was lost`, 15*time.Second)
	b.await(t, `run done" run_id=`+id+` status=success`, 20*time.Second)

	s := runStatus(t, []string{"--store", store, "--data-dir", t.TempDir()}, id)
	if s.Status != runstate.StatusSuccess {
		t.Fatalf("the run ended %s", s.Status)
	}
	for _, e := range runAudit(t, []string{"--store", store, "--data-dir", t.TempDir()}, id) {
		if e.Seq > 2 && strings.HasPrefix(e.Actor.ID, "worker-a/") {
			t.Errorf("worker A wrote after the takeover: %+v", e)
		}
	}
	t.Logf("A held token %d; B took over with token %d; A's late write was refused", tokenA, tokenB)
}

func TestDeadWebhookNeverDelaysTheRun(t *testing.T) {
	dir := t.TempDir()
	dead := "http://" + freePort(t) + "/hook" // nothing listens there
	global := []string{"--data-dir", dir, "--notify", dead, "--notify-attempts", "3", "--notify-backoff", "100ms"}
	start := time.Now()
	out, errOut, code := demo(t, append(global, "run", "../../examples/workflows/hello.yaml")...)
	if code != 0 {
		t.Fatalf("run: %d\n%s", code, errOut)
	}
	id := strings.Fields(out)[0]
	s := runStatus(t, []string{"--data-dir", dir}, id)
	t.Logf("run %s took %v; the process ended after %v", id, s.FinishedAt.Sub(s.StartedAt), time.Since(start))
	out, _, code = demo(t, "--data-dir", dir, "deadletters")
	var letters []tracker.DeadLetter
	if err := json.Unmarshal([]byte(out), &letters); err != nil || code != 0 {
		t.Fatalf("deadletters: %v\n%s", err, out)
	}
	statuses := map[string]bool{}
	for _, l := range letters {
		if l.URL != dead || l.Event.RunID != id || l.LastError == "" {
			t.Errorf("dead letter %+v", l)
		}
		if l.Attempts != 3 {
			t.Errorf("dead letter after %d attempts, want 3 (retried first): %+v", l.Attempts, l)
		}
		statuses[l.Event.Status] = true
	}
	if !statuses["queued"] || !statuses["running"] || !statuses["success"] {
		t.Errorf("dead letters do not cover the run's changes: %v", statuses)
	}
	// The run did not wait for its notifications: it had finished before
	// the deliveries were given up, the first of them long before.
	if last := letters[len(letters)-1]; !s.FinishedAt.Before(last.At) {
		t.Errorf("the run finished at %v, after the last notification was given up at %v", s.FinishedAt, last.At)
	}
}

func TestSignalAndStatusReachARunInAnotherProcess(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	p := startDemo(t, append(global, "run", "../../examples/workflows/approval.yaml")...)
	id := p.await(t, `run created.* run_id=(\S+)`, 10*time.Second)[1]
	p.await(t, `step approve waiting for a signal`, 10*time.Second)

	// The Badger store is held by the running process: these go through its API.
	if s := runStatus(t, global, id); s.Status != runstate.StatusWaiting {
		t.Fatalf("status while waiting: %s", s.Status)
	}
	out, errOut, code := demo(t, append(global, "list", "--status", "waiting", "--workflow", "approval")...)
	var page runList
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Runs) != 1 || page.Runs[0].RunID != id {
		t.Fatalf("list through the API: exit %d %s\n%s", code, out, errOut)
	}
	out, errOut, code = demo(t, append(global, "signal", id)...)
	if code != 0 || strings.TrimSpace(out) != id+" waiting" {
		t.Fatalf("signal: exit %d %q\n%s", code, out, errOut)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the run process: %v\n%s", err, p.logs())
	}
	if got := strings.TrimSpace(p.stdout.String()); got != id+" success" {
		t.Fatalf("run printed %q", got)
	}
	s := runStatus(t, global, id)
	deploy, _ := s.Step("deploy")
	if s.Status != runstate.StatusSuccess || deploy.Status != runstate.StepSuccess || len(deploy.Hosts) != 3 {
		t.Fatalf("after the signal: %+v", s)
	}
	var kinds []string
	for _, e := range runAudit(t, global, id) {
		kinds = append(kinds, fmt.Sprintf("%s>%s/%s", e.From, e.To, e.Actor.Kind))
	}
	// The operator's signal is acted on by the run's lease holder: the
	// resume is the worker's fenced write.
	if strings.Join(kinds, " ") != ">queued/worker queued>running/worker running>waiting/worker waiting>running/worker running>success/worker" {
		t.Errorf("audit trail %v", kinds)
	}
	// Signalling a run that is not waiting, or one that does not exist, is refused.
	if _, _, code := demo(t, append(global, "signal", id)...); code != exitUsage {
		t.Errorf("signalling a finished run: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := demo(t, append(global, "status", "no-such-run")...); code != exitUsage {
		t.Errorf("status of an unknown run: exit %d, want %d", code, exitUsage)
	}
}

func TestRetryOnlyWhatTheDiagnosticAllows(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	out, _, code := demo(t, append(global, "run", "../../examples/workflows/flaky.yaml")...)
	if code != exitRunFailed {
		t.Fatalf("the flaky run: exit %d", code)
	}
	first := strings.Fields(out)[0]
	out, errOut, code := demo(t, append(global, "retry", first)...)
	if code != exitRunFailed {
		t.Fatalf("retry: exit %d\n%s", code, errOut)
	}
	second := strings.Fields(out)[0]
	s := runStatus(t, global, second)
	if second == first || s.RetryOf != first || s.Attempt != 2 {
		t.Fatalf("the retry: %+v", s)
	}
	good, _, _ := demo(t, append(global, "run", "../../examples/workflows/hello.yaml")...)
	if _, _, code := demo(t, append(global, "retry", strings.Fields(good)[0])...); code != exitUsage {
		t.Errorf("retrying a success: exit %d, want %d", code, exitUsage)
	}
}

func TestWorkerStopsCleanlyOnSIGTERM(t *testing.T) {
	global := []string{"--data-dir", t.TempDir(), "--lease", "3s"}
	short := writeWorkflow(t, "name: short\nsteps:\n  - name: work\n    type: shell\n    command: sleep 1\n")
	long := writeWorkflow(t, "name: long\nsteps:\n  - name: work\n    type: shell\n    command: sleep 60\n")
	for _, tc := range []struct {
		name, workflow, grace string
		want                  runstate.RunStatus
	}{
		{"finishes the run in hand", short, "30s", runstate.StatusSuccess},
		{"interrupts it when the grace runs out", long, "200ms", runstate.StatusInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := demo(t, append(global, "submit", tc.workflow)...)
			if code != 0 {
				t.Fatalf("submit: %s", errOut)
			}
			id := strings.TrimSpace(out)
			w := startDemo(t, append(global, "worker", "--grace", tc.grace)...)
			w.await(t, `claimed run" run_id=`+id, 10*time.Second)
			w.await(t, `step work started`, 10*time.Second)
			w.cmd.Process.Signal(syscall.SIGTERM)
			if err := w.cmd.Wait(); err != nil {
				t.Fatalf("worker exit: %v\n%s", err, w.logs())
			}
			s := runStatus(t, global, id)
			if s.Status != tc.want {
				t.Fatalf("run %s after SIGTERM, want %s\n%s", s.Status, tc.want, w.logs())
			}
			if tc.want == runstate.StatusInterrupted && !strings.HasPrefix(s.InterruptedReason, "WORKER_SHUTDOWN") {
				t.Errorf("interrupted_reason %q", s.InterruptedReason)
			}
			if !strings.Contains(w.logs(), "worker stopped") {
				t.Errorf("no clean stop in the log:\n%s", w.logs())
			}
		})
	}
}
