package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

// stallRounds is RUNSTATE_STALL_ROUNDS (make soak sets it), else byDefault.
func stallRounds(byDefault int) int {
	if n, _ := strconv.Atoi(os.Getenv("RUNSTATE_STALL_ROUNDS")); n > 0 {
		return n
	}
	return byDefault
}

// The stalled-worker sequence, with real processes on MySQL: A, a run in
// the foreground (which holds a waiting run rather than park it), waits in
// a wait step and is stopped past its lease; worker B takes the run over,
// the run is signalled, and B starts the next step; A is continued — in
// half the rounds while another transaction holds the run's row. A must
// never run that step: the markers the step's command writes must show no
// two executions of it at once, and none by A (token 1, its claim of the
// run it created).
func TestAStalledWorkerNeverRunsAStepAnotherWorkerRuns(t *testing.T) {
	rounds := stallRounds(10)
	dsn := freshDatabase(t)
	store := []string{"--store", "mysql:" + dsn, "--data-dir", t.TempDir()}
	// A's lease is short, so that stopped it lapses soon; B's outlasts the
	// 1.5s the row is held, however long a loaded machine makes that: B
	// keeps its run throughout, though its renewals wait for the lock.
	leaseA := []string{"--lease", "2s", "--renew", "250ms"}
	leaseB := []string{"--lease", "20s", "--renew", "250ms"}
	markers := filepath.Join(t.TempDir(), "markers")
	wf := writeWorkflow(t, `
name: stall
steps:
  - name: approve
    type: wait
    timeout: 5m
  - name: finish
    type: shell
    hosts: [h1]
    command: '`+markCommand(markers, 1500*time.Millisecond)+`'
`)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	staleStarts := 0
	for round := range rounds {
		lockRow := round%2 == 0
		a := startDemo(t, with(store, append(leaseA, "--worker-id", "worker-a", "run", wf)...)...)
		id := a.await(t, `run created.* run_id=(\S+)`, 15*time.Second)[1]
		const tokenA = "1"
		a.await(t, `step approve waiting`, 10*time.Second)
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP) // A stalls, holding the run

		b := startDemo(t, with(store, append(leaseB, "--worker-id", "worker-b", "worker", "--poll", "100ms")...)...)
		b.await(t, `claimed run" run_id=`+id, 15*time.Second)
		b.await(t, `step approve parked`, 10*time.Second)
		if _, errOut, code := demo(t, with(store, "signal", id)...); code != 0 {
			t.Fatalf("signal: %s", errOut)
		}
		b.await(t, `step finish started`, 10*time.Second)
		waitForExecution(t, markers, id)
		var tx *sql.Tx
		if lockRow {
			if tx, err = db.BeginTx(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec("SELECT version FROM runstate_runs WHERE run_id = ? FOR UPDATE", id); err != nil {
				t.Fatal(err)
			}
		}
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT) // A wakes up
		if lockRow {
			time.Sleep(1500 * time.Millisecond)
			tx.Commit()
		}
		b.await(t, `run done" run_id=`+id+` status=success`, 20*time.Second)
		a.await(t, `lease on the run was lost`, 10*time.Second)
		for _, e := range readExecutions(t, markers) {
			if e.run == id && strconv.FormatInt(e.token, 10) == tokenA {
				staleStarts++
			}
		}
		for _, p := range []*proc{a, b} {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Wait()
		}
	}
	execs := readExecutions(t, markers)
	n, examples := overlaps(execs)
	t.Logf("%d rounds (%d with the run's row locked at A's wake-up): %d executions of step finish, %d overlapping pairs, %d started by the stalled worker",
		rounds, (rounds+1)/2, len(execs), n, staleStarts)
	if n > 0 || staleStarts > 0 || len(execs) != rounds {
		t.Errorf("%d overlapping executions and %d by the stalled worker, %d executions in %d rounds: %v", n, staleStarts, len(execs), rounds, examples)
	}
}

// waitForExecution waits until a command of run id has written a marker.
func waitForExecution(t *testing.T, markers, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, e := range readExecutions(t, markers) {
			if e.run == id {
				return
			}
		}
	}
	t.Fatalf("no command of run %s started", id)
}

// A worker stopped in the middle of a step's command, past its lease,
// while another worker takes the run over (policy takeover) and runs the
// step again: the stopped worker's command must be gone before the other
// one starts, although the stopped worker can do nothing about it. Its
// supervisor ends it when the lease's deadline passes.
func TestAStalledWorkersCommandEndsBeforeAnotherWorkerRunsTheStep(t *testing.T) {
	rounds := max(stallRounds(4)/2, 1)
	dsn := freshDatabase(t)
	store := []string{"--store", "mysql:" + dsn, "--data-dir", t.TempDir()}
	fleet := []string{"--lease", "1s", "--renew", "200ms", "--recovery", "takeover"}
	markers := filepath.Join(t.TempDir(), "markers")
	wf := writeWorkflow(t, `
name: midstep
steps:
  - name: work
    type: shell
    hosts: [h1]
    command: '`+markCommand(markers, 2500*time.Millisecond)+`'
`)
	for range rounds {
		out, errOut, code := demo(t, with(store, "submit", wf)...)
		if code != 0 {
			t.Fatalf("submit: %s", errOut)
		}
		id := strings.TrimSpace(out)
		a := startDemo(t, with(store, append(fleet, "--worker-id", "worker-a", "worker")...)...)
		a.await(t, `claimed run" run_id=`+id, 15*time.Second)
		waitForExecution(t, markers, id)
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP) // A stalls; its command does not
		b := startDemo(t, with(store, append(fleet, "--worker-id", "worker-b", "worker", "--statuses", "queued,waiting,running")...)...)
		b.await(t, `run done" run_id=`+id+` status=success`, 30*time.Second)
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
		a.await(t, `lease`, 10*time.Second)
		for _, p := range []*proc{a, b} {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Wait()
		}
	}
	execs := readExecutions(t, markers)
	n, examples := overlaps(execs)
	ended := 0
	for _, e := range execs {
		if e.ended {
			ended++
		}
	}
	t.Logf("%d rounds: %d executions of step work (%d ran to their end), %d overlapping", rounds, len(execs), ended, n)
	if n > 0 || len(execs) != 2*rounds || ended != rounds {
		t.Errorf("%d overlapping executions; %d executions, %d ran to their end, want %d and %d: %v", n, len(execs), ended, 2*rounds, rounds, examples)
	}
}

// A worker counts, on /metrics, a renewal the store accepted after its
// lease had expired (it stalled, nobody took the run), and a lease it lost
// (it stalled, another worker took the run), and logs each with its margin.
func TestAWorkerCountsItsLateRenewalsAndLostLeases(t *testing.T) {
	dsn := freshDatabase(t)
	store := []string{"--store", "mysql:" + dsn, "--data-dir", t.TempDir()}
	fleet := []string{"--lease", "1s", "--renew", "200ms", "--recovery", "takeover"}
	wf := writeWorkflow(t, "name: long\nsteps:\n  - name: work\n    type: shell\n    command: sleep 60\n")
	submit := func() string {
		out, errOut, code := demo(t, with(store, "submit", wf)...)
		if code != 0 {
			t.Fatalf("submit: %s", errOut)
		}
		return strings.TrimSpace(out)
	}
	addr := freePort(t)
	a := startDemo(t, with(store, append(fleet, "--worker-id", "worker-a", "worker", "--grace", "1s", "--metrics-addr", addr, "--statuses", "queued,waiting,running")...)...)
	defer func() { a.cmd.Process.Signal(syscall.SIGTERM); a.cmd.Wait() }()

	// Stalled past its lease, with nobody to take the run: the renewal the
	// worker sends when it wakes is late, and the store accepts it. A stop
	// that lands while a renewal is in flight (part of every 200ms, more
	// on a loaded machine) makes that renewal miss its deadline instead: the worker says
	// so, with how long the lease may have lapsed, and stops the run's work
	// unless a retry is accepted late; it claims the run again, and the
	// test stops it once more.
	first := submit()
	a.await(t, `claimed run" run_id=`+first, 15*time.Second)
	for attempt := 1; ; attempt++ {
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP)
		time.Sleep(1600 * time.Millisecond)
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
		m := a.await(t, `(lease renewed late)|lease renewal failed, and the lease may have lapsed.* run_id=`+first+`.* lapsed_for=\S+`, 10*time.Second)
		if m[1] != "" {
			break
		}
		// Its retry may yet be accepted, late; else the work stops.
		if m := a.await(t, `(lease renewed late)|the run stopped on a store error; releasing it" run_id=`+first, 10*time.Second); m[1] != "" {
			break
		}
		if attempt == 3 {
			t.Fatalf("each of 3 stops landed on a renewal in flight:\n%s", a.logs())
		}
		t.Logf("stop %d landed on a renewal in flight: the worker reported it and stopped the work; stopping it again", attempt)
		a.await(t, `claimed run" run_id=`+first, 15*time.Second)
	}
	if _, errOut, code := demo(t, with(store, "cancel", first)...); code != 0 {
		t.Fatalf("cancel: %s", errOut)
	}

	// Stalled past its lease while another worker takes the run: lost.
	second := submit()
	a.await(t, `claimed run" run_id=`+second, 15*time.Second)
	syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP)
	b := startDemo(t, with(store, append(fleet, "--worker-id", "worker-b", "worker", "--grace", "1s", "--statuses", "queued,waiting,running")...)...)
	defer func() { b.cmd.Process.Signal(syscall.SIGTERM); b.cmd.Wait() }()
	b.await(t, `claimed run" run_id=`+second, 15*time.Second)
	syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
	a.await(t, `the lease on the run was lost`, 10*time.Second)

	families := scrapeMetrics(t, "http://"+addr+"/metrics")
	for name, want := range map[string]float64{"runstate_lease_renewals_late_total": 1, "runstate_leases_lost_total": 1} {
		f := families[name]
		if f == nil || f.GetMetric()[0].GetCounter().GetValue() < want {
			t.Errorf("%s = %v, want at least %v", name, f, want)
		}
	}
	log := a.logs()
	for _, want := range []string{`msg="lease renewed late: the store accepted the renewal after the lease had expired`,
		`msg="the lease on the run was lost: another worker owns it now; stopping without writing" run_id=` + second} {
		if !strings.Contains(log, want) {
			t.Errorf("worker a's log lacks %q", want)
		}
	}
	if !regexp.MustCompile(`run_id=` + second + ` token=\d+ went_on_after_last_renewal=\S+`).MatchString(log) {
		t.Errorf("worker a's log does not say how long the run went on after its last renewal:\n%s", log)
	}
}
