package serverproc

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/runstate/runstate/internal/procfs"
)

// ownGroup starts cmd in a process group of its own, as the user as when set,
// killed by the kernel if the test process dies, so that a crashed test
// leaves no server behind.
func ownGroup(cmd *exec.Cmd, as *User) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if as != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: as.Uid, Gid: as.Gid}
	}
	return nil
}

// killGroup kills cmd's process group and waits for the leader and the
// rest of the group to be gone, so that a restart finds its port, its
// files and its shared memory free. A member that has died but is not yet
// reaped counts as gone: it holds none of those, and whoever adopted it
// may reap it late or never (a reaper that reaps when a run ends, a
// container's init that never does); waiting for it failed a failover
// under make stress, whose reaper had adopted a killed server's backends.
func killGroup(cmd *exec.Cmd, done <-chan struct{}) error {
	pgid := cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	<-done
	var left []procfs.Process
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = liveMembers(pgid); len(left) == 0 {
			return nil
		}
	}
	return fmt.Errorf("processes of group %d outlived SIGKILL by 10s: %v", pgid, left)
}

// liveMembers returns the processes of group pgid that have not died.
func liveMembers(pgid int) []procfs.Process {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return nil // no member at all, dead or alive
	}
	live, err := procfs.LiveMembers(pgid)
	if err != nil {
		return []procfs.Process{{PID: pgid, Command: "/proc unreadable: " + err.Error(), State: '?'}}
	}
	return live
}

// start starts cmd from the spawner: the kernel sends a child its
// Pdeathsig when the thread that forked it exits, not the process, and the
// Go runtime ends threads (one a goroutine left locked, say), which killed
// a private server in the middle of a test ("unexpected postmaster exit").
// The spawner's thread is locked to it and never exits.
func start(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawns {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawns <- spawnRequest{cmd, done}
	return <-done
}

var (
	spawnerOnce sync.Once
	spawns      = make(chan spawnRequest)
)

// spawnRequest asks the spawner to start cmd and answer on done.
type spawnRequest struct {
	cmd  *exec.Cmd
	done chan<- error
}
