package riverbench

import (
	"syscall"
	"time"

	"github.com/runstate/runstate/internal/procfs"
)

// childrenOf lists the live (or not yet reaped) children of parent.
func childrenOf(parent int) []int {
	ps, _ := procfs.List()
	var pids []int
	for _, p := range ps {
		if p.PPID == parent {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// processCPU is this process's user and system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
