package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/cmd/demo-runner/internal/badgershare"
)

// checkShared runs a command beside the process holding the default
// Badger store: it must work, not fail because the directory is held.
func checkShared(t *testing.T, global []string, wantCode int, args ...string) string {
	t.Helper()
	out, errOut, code := demo(t, with(global, args...)...)
	if code != wantCode || strings.Contains(errOut, "in use by another process") {
		t.Errorf("%v beside the holder: exit %d, want %d\n%s", args, code, wantCode, errOut)
	}
	return strings.TrimSpace(out)
}

// Every documented command works while a worker holds the default store.
func TestEveryCommandWorksBesideTheProcessHoldingTheDefaultStore(t *testing.T) {
	global := []string{"--data-dir", t.TempDir(), "--lease", "5s"}
	out, _, code := demo(t, with(global, "run", "../../examples/workflows/flaky.yaml")...)
	if code != exitRunFailed {
		t.Fatalf("the flaky run: exit %d", code)
	}
	flaky := strings.Fields(out)[0]
	w := startDemo(t, with(global, "worker", "--poll", "100ms")...)
	w.await(t, `worker started`, 10*time.Second)

	queued := checkShared(t, global, 0, "submit", "../../examples/workflows/hello.yaml")
	w.await(t, `run done" run_id=`+queued+` status=success`, 20*time.Second)
	checkShared(t, global, 0, "run", "../../examples/workflows/hello.yaml")
	retry := checkShared(t, global, 0, "retry", "--queue", flaky)
	w.await(t, `run done" run_id=`+retry, 20*time.Second)
	// A retry in the foreground races the worker, which hears of the new
	// run at once: whichever claims it, it fails.
	out, errOut, code := demo(t, with(global, "retry", flaky)...)
	if (code != exitRunFailed && code != 0) || strings.Contains(errOut, "in use by another process") {
		t.Errorf("retry beside the holder: exit %d\n%s", code, errOut)
	}
	if s := awaitStatus(t, global, strings.Fields(out)[0], 20*time.Second, runstate.StatusFailed, runstate.StatusSuccess); s.Status != runstate.StatusFailed {
		t.Errorf("the retry beside the holder: %s", s.Status)
	}
	checkShared(t, global, 0, "recover")
	checkShared(t, global, 0, "deadletters")
	checkShared(t, global, 0, "status", queued)
	checkShared(t, global, 0, "list")
	checkShared(t, global, 0, "audit", queued)

	// A waiting run, parked: canceled with a reason, then another signalled.
	doomed := checkShared(t, global, 0, "submit", "../../examples/workflows/approval.yaml")
	w.await(t, doomed+` step approve parked`, 10*time.Second)
	checkShared(t, global, 0, "cancel", "--reason", "not today", doomed)
	evs := runAudit(t, global, doomed)
	if last := evs[len(evs)-1]; last.To != runstate.StatusCanceled || last.Reason != "not today" {
		t.Errorf("the cancel's reason was lost: %+v", last)
	}
	approved := checkShared(t, global, 0, "submit", "../../examples/workflows/approval.yaml")
	w.await(t, approved+` step approve waiting`, 10*time.Second)
	checkShared(t, global, 0, "signal", approved)
	w.await(t, `run done" run_id=`+approved+` status=success`, 20*time.Second)

	// serve beside the worker.
	addr := freePort(t)
	srv := startDemo(t, with(global, "serve", "--addr", addr)...)
	srv.await(t, "serving", 10*time.Second)
	resp, err := http.Get("http://" + addr + "/runs/" + approved)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"status":"success"`) {
		t.Errorf("serve beside the worker: HTTP %d %s", resp.StatusCode, body)
	}
}

// The socket belongs to the store, not to the data directory: commands on
// one store never reach another's runs.
func TestTheSocketFollowsTheStore(t *testing.T) {
	dir := t.TempDir()
	storeA := []string{"--data-dir", dir, "--store", "badger:" + filepath.Join(dir, "a")}
	storeB := []string{"--data-dir", dir, "--store", "badger:" + filepath.Join(dir, "b")}
	inA := checkShared(t, storeA, 0, "submit", "../../examples/workflows/approval.yaml")
	wa := startDemo(t, with(storeA, "--worker-id", "wa", "worker")...)
	wa.await(t, `step approve waiting`, 10*time.Second)
	wb := startDemo(t, with(storeB, "--worker-id", "wb", "worker")...)
	wb.await(t, `worker started`, 10*time.Second)
	if _, errOut, code := demo(t, with(storeB, "status", inA)...); code != exitUsage || !strings.Contains(errOut, "NOT_FOUND") && !strings.Contains(errOut, "not found") {
		t.Errorf("store B's status of store A's run: exit %d, want %d (not found)\n%s", code, exitUsage, errOut)
	}
	if s := runStatus(t, storeA, inA); s.Status != runstate.StatusWaiting {
		t.Errorf("store A's run through A's socket: %s", s.Status)
	}
}

// The socket is private to the user who runs the store, whatever the
// umask: another local user cannot reach it.
func TestTheSocketIsPrivateWhateverTheUmask(t *testing.T) {
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // only the socket's own mode may keep others out
	}
	global := []string{"--data-dir", dir}
	p := &proc{}
	sh := "umask 000; exec " + binaries.Path(t, demoPkg) + " --data-dir " + dir + " serve --addr " + freePort(t)
	p = startShell(t, sh)
	p.await(t, "serving", 10*time.Second)
	sock, err := badgershare.SocketPath(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("socket mode %v under umask 000, want 0600", mode)
	}
	if os.Getuid() != 0 {
		t.Skip("the rest needs root, to try the socket as another user")
	}
	exe, _ := os.Executable()
	probe := filepath.Join(dir, "probe")
	b, _ := os.ReadFile(exe)
	os.WriteFile(probe, b, 0o755)
	asNobody := func() (int, string) {
		cmd := exec.Command(probe)
		cmd.Env = append(os.Environ(), "RUNSTATE_TEST_DIAL="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return exitCode(err), strings.TrimSpace(string(out))
	}
	if code, out := asNobody(); code != 3 || !strings.Contains(out, "permission denied") {
		t.Errorf("user nobody and the socket: exit %d %q, want 3 (permission denied)", code, out)
	}
	// Even a socket whose mode someone opened up serves only its user.
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	if code, out := asNobody(); code != 4 {
		t.Errorf("user nobody and the opened-up socket: exit %d %q, want 4 (dropped by the server)", code, out)
	}
	if code, out := func() (int, string) { // while the store's own user is served
		cmd := exec.Command(probe)
		cmd.Env = append(os.Environ(), "RUNSTATE_TEST_DIAL="+sock)
		out, err := cmd.CombinedOutput()
		return exitCode(err), string(out)
	}(); code != 0 {
		t.Errorf("the store's own user and the socket: exit %d %q, want 0 (served)", code, out)
	}
	checkShared(t, global, 0, "list")
}

// startShell starts sh -c script in its own process group.
func startShell(t *testing.T, script string) *proc {
	t.Helper()
	return startCommand(t, exec.Command("sh", "-c", script))
}

// When the process holding the store exits, a process using it through
// the socket takes the directory over and carries on.
func TestTheStoreOutlivesTheProcessHoldingIt(t *testing.T) {
	global := []string{"--data-dir", t.TempDir(), "--lease", "5s"}
	holder := startDemo(t, with(global, "serve", "--addr", freePort(t))...)
	holder.await(t, "serving", 10*time.Second)
	w := startDemo(t, with(global, "worker", "--poll", "100ms")...)
	w.await(t, `worker started`, 10*time.Second)
	wf := writeWorkflow(t, "name: steps\nsteps:\n  - name: one\n    type: shell\n    command: sleep 1\n  - name: two\n    type: shell\n    command: sleep 0.2\n")
	id := checkShared(t, global, 0, "submit", wf)
	w.await(t, `step one started`, 10*time.Second)
	syscall.Kill(-holder.cmd.Process.Pid, syscall.SIGKILL)
	holder.cmd.Wait()
	w.await(t, `run done" run_id=`+id+` status=success`, 20*time.Second)
	if s := runStatus(t, global, id); s.Status != runstate.StatusSuccess {
		t.Fatalf("the run after its store's holder died: %s", s.Status)
	}
}
