package procfs

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCountsFieldsFromTheCommandsLastParenthesis(t *testing.T) {
	p, ok := parseStat(42, "42 (a (b) c) Z 7 42 42 0 -1 4194560 0 0 0 0 11 12 13 14 20 0 1 0")
	tick := tickLength()
	want := Process{PID: 42, PPID: 7, PGID: 42, State: 'Z', Command: "a (b) c", CPU: 23 * tick, ReapedChildrenCPU: 27 * tick}
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

func TestAuxValueFindsItsKeyBeforeTheEnd(t *testing.T) {
	const word = bits.UintSize / 8
	vector := func(pairs ...uint64) []byte {
		var b []byte
		for _, v := range pairs {
			if word == 4 {
				b = binary.NativeEndian.AppendUint32(b, uint32(v))
			} else {
				b = binary.NativeEndian.AppendUint64(b, v)
			}
		}
		return b
	}
	if v, ok := auxValue(vector(6, 4096, atClockTick, 250, 0, 0), atClockTick); !ok || v != 250 {
		t.Errorf("auxValue = %d, %v; want 250, true", v, ok)
	}
	// A key after the end marker, or a vector cut short, is not there.
	for _, b := range [][]byte{vector(6, 4096, 0, 0, atClockTick, 250), vector(6, 4096, atClockTick)} {
		if v, ok := auxValue(b, atClockTick); ok {
			t.Errorf("auxValue(%v) = %d, want not found", b, v)
		}
	}
}

// The tick is what the C library's sysconf(_SC_CLK_TCK) says, as getconf
// prints it.
func TestTheTickIsTheCLibrarys(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc as Linux has it")
	}
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("no getconf here to ask the C library")
	}
	if err != nil {
		t.Fatalf("getconf CLK_TCK: %v", err)
	}
	hz, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || hz <= 0 {
		t.Fatalf("getconf CLK_TCK printed %q", out)
	}
	if got, want := tickLength(), time.Second/time.Duration(hz); got != want {
		t.Errorf("tickLength = %v, want %v", got, want)
	}
}
