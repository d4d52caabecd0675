package riverbench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat is what these benchmarks read of /proc/<pid>/stat.
type procStat struct {
	state byte
	ppid  int
	// ownTicks is utime+stime, reapedChildrenTicks cutime+cstime, in clock ticks.
	ownTicks            int64
	reapedChildrenTicks int64
}

func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields that follow start after the last ')'.
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unexpected form", pid)
	}
	fields := strings.Fields(string(raw[end+1:]))
	// fields[0] is field 3 (state); utime..cstime are fields 14..17.
	if len(fields) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	num := func(field int) int64 {
		n, _ := strconv.ParseInt(fields[field-3], 10, 64)
		return n
	}
	return procStat{
		state:               fields[0][0],
		ppid:                int(num(4)),
		ownTicks:            num(14) + num(15),
		reapedChildrenTicks: num(16) + num(17),
	}, nil
}

// childrenOf lists the live (or not yet reaped) children of parent.
func childrenOf(parent int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.ppid == parent {
			pids = append(pids, pid)
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
