// Package orphans holds a test that stress's own test runs: it leaves an
// orphan to stress, kills it, and waits for its process group to empty,
// as a test waits for a killed server's group before it starts it again.
package orphans

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAKilledOrphanLeavesItsGroup(t *testing.T) {
	// sh leads a group of its own, starts sleep in it and exits at once:
	// sleep is an orphan, adopted by the nearest reaper.
	sh := exec.Command("sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!")
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := sh.Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("sh printed %q", out)
	}
	group := sh.Process.Pid
	if err := syscall.Kill(orphan, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A zombie stays in its group until its parent, the reaper, reaps it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(-group, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %d still has a member a minute after its last process was killed: nobody reaped it", group)
		}
	}
}
