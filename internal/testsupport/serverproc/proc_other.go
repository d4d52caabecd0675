//go:build !linux

package serverproc

import (
	"errors"
	"os/exec"
)

// ownGroup: outside Linux the server is killed alone, its children (a
// PostgreSQL server's backends) may outlive it, and a crashed test may
// leave it running.
func ownGroup(_ *exec.Cmd, as *User) error {
	if as != nil {
		return errors.New("running a private server as another user needs Linux")
	}
	return nil
}

func killGroup(cmd *exec.Cmd, done <-chan struct{}) error {
	err := cmd.Process.Kill()
	<-done
	return err
}

func start(cmd *exec.Cmd) error { return cmd.Start() }
