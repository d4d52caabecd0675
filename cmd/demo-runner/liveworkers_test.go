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
)

const slowWorkflow = `
name: slow
steps:
  - name: work
    type: shell
    command: sleep 6
  - name: finish
    type: sleep
    duration: 10ms
`

// docs/leases.md promises that runs held by live workers are never
// touched. While worker B executes a run, every other command a user may
// type on the same store — queries, recovery, another run, another worker
// taking over orphaned runs — leaves B's run alone, and B finishes it. All
// of them keep the default worker id, as a user would.
func TestCommandsBesideALiveWorkerNeverTouchItsRun(t *testing.T) {
	wf := writeWorkflow(t, slowWorkflow)
	quick := writeWorkflow(t, "name: quick\nsteps:\n  - name: only\n    type: sleep\n    duration: 10ms\n")
	for _, st := range sharedStores(t) {
		t.Run(st.name, func(t *testing.T) {
			global := with(st.args, "--data-dir", t.TempDir())
			out, errOut, code := demo(t, with(global, "submit", wf)...)
			if code != 0 {
				t.Fatalf("submit: %s", errOut)
			}
			id := strings.TrimSpace(out)
			// Every process here keeps the default worker id (the host name):
			// two live processes must still never share one.
			b := startDemo(t, with(global, "worker")...)
			b.await(t, `claimed run" run_id=`+id, 15*time.Second)
			b.await(t, `step work started`, 10*time.Second)

			for _, args := range [][]string{
				{"status", id}, {"list"}, {"audit", id},
				{"recover"},
				{"--recovery", "takeover", "recover"},
				{"run", quick},
				{"worker", "--once"},
				{"--recovery", "takeover", "worker", "--once", "--statuses", "queued,waiting,running"},
			} {
				_, errOut, code := demo(t, with(global, args...)...)
				if code != 0 {
					t.Errorf("%v: exit %d\n%s", args, code, errOut)
				}
				if strings.Contains(errOut, "recovered run") && strings.Contains(errOut, id) {
					t.Errorf("%v recovered worker B's live run:\n%s", args, errOut)
				}
			}
			if strings.Contains(b.logs(), `run done" run_id=`+id) {
				t.Fatalf("worker B finished its run before the commands beside it did, so they never met a live lease: lengthen the step\n%s", b.logs())
			}
			b.await(t, `run done" run_id=`+id+` status=success`, 20*time.Second)
			if strings.Contains(b.logs(), "ended elsewhere") {
				t.Errorf("worker B found its run ended elsewhere:\n%s", b.logs())
			}
			for _, e := range runAudit(t, global, id) {
				if e.Actor.Kind == runstate.ActorRecovery {
					t.Errorf("recovery wrote to the run a live worker held: %+v", e)
				}
			}
		})
	}
}

// Queries are read-only and quiet: no recovery, no per-run lines. Recovery
// runs where a process takes runs on, and names only the runs it changed.
func TestQueriesDoNotRecoverAndRecoveryNamesOnlyWhatItChanged(t *testing.T) {
	st := sharedStores(t)[0]
	global := with(st.args, "--data-dir", t.TempDir(), "--worker-id", "box-1")
	wf := writeWorkflow(t, strings.Replace(slowWorkflow, "sleep 6", "sleep 60", 1))
	var queued []string
	for range 3 {
		out, errOut, code := demo(t, with(global, "submit", "--priority", "5", wf)...)
		if code != 0 {
			t.Fatalf("submit: %s", errOut)
		}
		queued = append(queued, strings.TrimSpace(out))
	}
	// A worker takes the first run and dies with it: its lease stays live
	// for 30s, so only its own next incarnation may settle the run at once.
	w := startDemo(t, with(global, "worker")...)
	held := w.await(t, `claimed run" run_id=(\S+)`, 15*time.Second)[1]
	w.await(t, `step work started`, 10*time.Second)
	syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	w.cmd.Wait()
	before := runStatus(t, global, held)

	for _, args := range [][]string{{"status", held}, {"list"}, {"audit", held}, {"list", "--status", "queued"}} {
		_, errOut, code := demo(t, with(global, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut)
		}
		if strings.Contains(errOut, "recover") {
			t.Errorf("the query %v ran recovery:\n%s", args, errOut)
		}
	}
	if after := runStatus(t, global, held); after.Version != before.Version || after.Status != runstate.StatusRunning {
		t.Fatalf("queries changed the run: %s v%d -> %s v%d", before.Status, before.Version, after.Status, after.Version)
	}

	// Another worker's recovery leaves the held run alone and says nothing per run.
	_, errOut, code := demo(t, with(global, "--worker-id", "box-2", "recover")...)
	if code != 0 || strings.Contains(errOut, "recovered run") || !strings.Contains(errOut, "skipped=1") {
		t.Errorf("recovery by another worker: exit %d\n%s", code, errOut)
	}
	// The dead worker's next incarnation settles it at once, in one line;
	// the queued runs, unchanged, get none.
	_, errOut, code = demo(t, with(global, "recover")...)
	if code != 0 || strings.Count(errOut, "recovered run") != 1 || !strings.Contains(errOut, held) || !strings.Contains(errOut, "interrupted=1") {
		t.Errorf("recovery by the next incarnation: exit %d\n%s", code, errOut)
	}
	for _, id := range queued {
		if id != held && strings.Contains(errOut, id) {
			t.Errorf("recovery logged the untouched queued run %s:\n%s", id, errOut)
		}
	}
}

// A worker id given explicitly is refused while another live process on
// this machine uses it for the same store.
func TestAWorkerIDInUseIsRefused(t *testing.T) {
	global := []string{"--data-dir", t.TempDir()}
	w := startDemo(t, with(global, "--worker-id", "box-1", "worker")...)
	w.await(t, `worker started`, 10*time.Second)
	_, errOut, code := demo(t, with(global, "--worker-id", "box-1", "worker", "--once")...)
	if code != exitUsage || !strings.Contains(errOut, `worker id "box-1" is in use`) {
		t.Fatalf("a second worker box-1: exit %d\n%s", code, errOut)
	}
	// The default id steps aside instead: host, host-2, …
	_, errOut, code = demo(t, with(global, "worker", "--once")...)
	if code != 0 {
		t.Fatalf("a worker with the default id beside box-1: exit %d\n%s", code, errOut)
	}
}

// A worker that dies and is not restarted leaves its running run behind.
// Under the default policy no worker claims a running run, so the live
// workers settle it by their periodic recovery once its lease has expired,
// never before: while its worker lives, recovery leaves it alone.
func TestLiveWorkersSettleARunADeadWorkerLeftBehind(t *testing.T) {
	global := []string{"--store", "mysql:" + freshDatabase(t), "--data-dir", t.TempDir(), "--lease", "2s", "--renew", "500ms"}
	wf := writeWorkflow(t, strings.Replace(slowWorkflow, "sleep 6", "sleep 60", 1))
	out, errOut, code := demo(t, with(global, "submit", wf)...)
	if code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	id := strings.TrimSpace(out)
	a := startDemo(t, with(global, "--worker-id", "a", "worker", "--recover-every", "0")...)
	a.await(t, `step work started`, 15*time.Second)
	b := startDemo(t, with(global, "--worker-id", "b", "worker", "--recover-every", "300ms")...)
	// B's recovery passes while A lives: A's run is skipped, every time.
	b.await(t, `crash recovery finished.* skipped=1`, 10*time.Second)
	time.Sleep(time.Second)
	b.await(t, `crash recovery finished.* skipped=1`, 5*time.Second)
	if s := runStatus(t, global, id); s.Status != runstate.StatusRunning {
		t.Fatalf("A's run while A lives: %s", s.Status)
	}
	killed := time.Now()
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	a.cmd.Wait()
	b.await(t, `recovered run.* run_id=`+id, 15*time.Second)
	settled := time.Since(killed)
	s := runStatus(t, global, id)
	if s.Status != runstate.StatusInterrupted || s.InterruptedReason != runstate.ReasonCrashRecovery {
		t.Fatalf("the dead worker's run: %s %q, want interrupted by crash recovery", s.Status, s.InterruptedReason)
	}
	t.Logf("the dead worker's run was settled %v after it died (lease 2s, renewed every 500ms; recovery every 300ms)", settled.Round(time.Millisecond))
}

// On PostgreSQL an idle worker is woken by the store when a run is
// submitted: with a poll of ten minutes, the run is claimed at once.
func TestIdleWorkerIsWokenBySubmit(t *testing.T) {
	global := []string{"--store", "postgres:" + freshSchema(t), "--data-dir", t.TempDir()}
	w := startDemo(t, with(global, "worker", "--poll", "10m")...)
	w.await(t, `worker started.*wakeups="notify and poll"`, 20*time.Second)
	// Its first look finds nothing; it then sleeps until woken.
	time.Sleep(time.Second)
	out, errOut, code := demo(t, with(global, "submit", "../../examples/workflows/hello.yaml")...)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, errOut)
	}
	id := strings.TrimSpace(out)
	// Far less than the poll: only a notice wakes the worker in time.
	w.await(t, `claimed run" run_id=`+id, 60*time.Second)
	w.await(t, `run done" run_id=`+id+` status=success`, 30*time.Second)
}

// A worker whose store plugin is killed (SIGKILL, as a crash) starts the
// plugin again and goes on working: a run submitted afterwards is done.
func TestAWorkerOutlivesItsStorePlugin(t *testing.T) {
	global := []string{"--store", "plugin:" + binaries.Path(t, mysqlPluginPkg), "--plugin-config", "dsn=" + freshDatabase(t),
		"--data-dir", t.TempDir()}
	w := startDemo(t, with(global, "worker", "--poll", "200ms")...)
	w.await(t, `worker started`, 20*time.Second)
	plugin := childOf(t, w.cmd.Process.Pid)
	if err := syscall.Kill(-plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.await(t, `store plugin exited; starting it again`, 10*time.Second)
	w.await(t, `store plugin started again`, 30*time.Second)
	if again := childOf(t, w.cmd.Process.Pid); again == plugin {
		t.Fatalf("the plugin process %d is the one killed", again)
	}
	out, errOut, code := demo(t, with(global, "submit", "../../examples/workflows/hello.yaml")...)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, errOut)
	}
	id := strings.TrimSpace(out)
	w.await(t, `run done" run_id=`+id+` status=success`, 60*time.Second)
}

// childOf returns the process id of pid's one child.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Each thread lists the children it forked.
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("no threads of process %d: %v", pid, err)
		}
		var f []string
		for _, task := range tasks {
			b, _ := os.ReadFile(task)
			f = append(f, strings.Fields(string(b))...)
		}
		if len(f) == 1 {
			child, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return child
		} else if time.Now().After(deadline) {
			t.Fatalf("process %d has children %v, want one", pid, f)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
