package procfs

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCountsFieldsFromTheCommandsLastParenthesis(t *testing.T) {
	p, ok := parseStat(42, "42 (a (b) c) Z 7 42 42 0 -1 4194560 0 0 0 0 11 12 13 14 20 0 1 0")
	want := Process{PID: 42, PPID: 7, PGID: 42, State: 'Z', Command: "a (b) c", CPUTicks: 23, ReapedChildrenTicks: 27}
	if !ok || p != want {
		t.Fatalf("parseStat: %+v, %v; want %+v", p, ok, want)
	}
	if !p.Dead() {
		t.Error("a zombie is not dead")
	}
	for _, bad := range []string{"", "42 no parentheses", "42 (x)", "42 (x) R 1 2",
		"42 (x) RR 1 2 2 0 -1 0 0 0 0 0 1 1 1 1", "42 (x) R one 2 2 0 -1 0 0 0 0 0 1 1 1 1"} {
		if p, ok := parseStat(42, bad); ok {
			t.Errorf("parseStat(%q) = %+v, want refused", bad, p)
		}
	}
}

// A running child is live in the group it leads; once killed and not yet
// reaped it is read as dead, and its group has no live member.
func TestAnUnreapedChildIsDead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc as Linux has it")
	}
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	p, err := Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	if p.PPID != os.Getpid() || p.PGID != pid || p.Dead() {
		t.Fatalf("the child: %+v, want it alive, with parent %d and group %d", p, os.Getpid(), pid)
	}
	if live, err := LiveMembers(pid); err != nil || len(live) != 1 || live[0].PID != pid {
		t.Fatalf("the running child's group has live members %v (%v), want it alone", live, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if p, err = Read(pid); err != nil {
			t.Fatal(err)
		}
		if p.Dead() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child is still %v a minute after SIGKILL", p)
		}
	}
	if live, err := LiveMembers(pid); err != nil || len(live) != 0 {
		t.Fatalf("the dead child's group has live members %v (%v)", live, err)
	}
}
