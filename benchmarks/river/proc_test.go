package riverbench

import (
	"os/exec"
	"strconv"
	"strings"
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

// clockTicksPerSecond is sysconf(_SC_CLK_TCK), the unit of /proc's times,
// as getconf tells it; Linux fixes it at 100 for user space.
func clockTicksPerSecond() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// processCPU is this process's user and system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
