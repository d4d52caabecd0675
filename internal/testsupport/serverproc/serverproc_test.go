package serverproc

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// A server that refuses to start says why: what it printed before its own
// log was open is in the error.
func TestAServerThatExitsWhileStartingSaysWhy(t *testing.T) {
	s := &Server{
		Command: func() *exec.Cmd {
			return exec.Command("sh", "-c", "echo 'could not bind IPv4 address: Address already in use' >&2; exit 1")
		},
		Ready: func(context.Context) error { return errors.New("not yet") },
		Log:   t.TempDir() + "/server.log",
	}
	err := s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("Start: %v; want the exit status and what the server printed", err)
	}
	if s.Running() {
		t.Error("a server that exited counts as running")
	}
}
