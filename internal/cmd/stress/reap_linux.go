package main

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runstate/runstate/internal/procfs"
)

// family is this process's children: those it starts itself (a test
// binary, the burners), whose exit statuses are their exec.Cmd's to
// collect, and the orphans it adopts as their reaper.
type family struct {
	mu  sync.Mutex
	own map[int]bool
}

// adopt makes this process the reaper of its descendants: a test's
// workers, plugins and servers, which lead process groups of their own,
// come to it when their parent dies, instead of living on beyond the run.
// It reaps them as they die, until ctx ends: a zombie stays in its process
// group, and a test that waits for a killed server's group to empty (a
// failover's) would wait for it.
func adopt(ctx context.Context) (*family, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, err
	}
	f := &family{own: map[int]bool{}}
	died := make(chan os.Signal, 1)
	signal.Notify(died, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(died)
		// The ticker backs up SIGCHLD, which coalesces.
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-died:
			case <-tick.C:
			}
			f.reap()
		}
	}()
	return f, nil
}

// start starts cmd as a child of this process's own, which reap leaves
// to cmd.Wait; wait waits for it.
func (f *family) start(cmd *exec.Cmd) error {
	f.mu.Lock() // reap must not see the child before it is known as own
	defer f.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	f.own[cmd.Process.Pid] = true
	return nil
}

// wait waits for a child start started, and forgets it.
func (f *family) wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.own, cmd.Process.Pid)
	return err
}

// adopted returns this process's children but its own.
func (f *family) adopted() []procfs.Process {
	ps, _ := procfs.List()
	self := os.Getpid()
	var out []procfs.Process
	for _, p := range ps {
		if p.PPID == self && !f.own[p.PID] {
			out = append(out, p)
		}
	}
	return out
}

// reap reaps the adopted children that have died.
func (f *family) reap() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.adopted() {
		if p.Dead() {
			var ws syscall.WaitStatus
			syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil)
		}
	}
}

// endOrphans kills every adopted child (and the group each leads): what a
// test run left behind. reap collects them as they die.
func (f *family) endOrphans() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.adopted() {
		syscall.Kill(-p.PID, syscall.SIGKILL)
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// burnerAttrs puts a burner in a group of its own, killed with this
// process whatever way it ends.
func burnerAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
