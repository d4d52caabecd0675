package serverproc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A server's children that die with it are gone even when the process
// that adopts them never reaps them: this test process becomes their
// reaper (as make stress is for the tests it runs) and reaps nothing, so
// they stay in the process table as zombies, in the server's group.
func TestKillDoesNotWaitForAReaperThatNeverReaps(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	log := t.TempDir() + "/server.log"
	s := &Server{
		// Each child writes a line as it starts, so Ready knows all run.
		Command: func() *exec.Cmd {
			return exec.Command("sh", "-c", `for i in 1 2 3; do (echo up >>"$0"; exec sleep 600) & done; wait`, log)
		},
		Ready: func(context.Context) error {
			if b, _ := os.ReadFile(log); strings.Count(string(b), "up") < 3 {
				return errors.New("not every child runs yet")
			}
			return nil
		},
		Log: log,
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
}
