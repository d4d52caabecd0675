// Package procfs reads what Linux's /proc says of processes: each one's
// parent, process group, state and CPU time. The test harnesses use it to
// tell a process that runs from one that has died but is not yet reaped,
// the benchmarks to read a server's CPU time.
package procfs

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Process is one process as /proc/PID/stat describes it.
type Process struct {
	PID, PPID, PGID int
	// State is stat's one-letter state: R running, S sleeping, D in an
	// uninterruptible wait, Z dead and not yet reaped (a zombie), …
	State   byte
	Command string // the executable's name, as the kernel truncates it
	// CPU is the user and system time the process has used,
	// ReapedChildrenCPU that of the children it has reaped; /proc counts
	// both in clock ticks (see tickLength).
	CPU, ReapedChildrenCPU time.Duration
}

// Dead reports whether the process has exited: a zombie (or one being
// reaped) holds no memory, file, socket or port any more, only its entry
// in the process table until its parent reaps it.
func (p Process) Dead() bool { return p.State == 'Z' || p.State == 'X' }

// String names the process in messages: "1234 postgres (Z)".
func (p Process) String() string { return fmt.Sprintf("%d %s (%c)", p.PID, p.Command, p.State) }

// Read returns the process pid.
func Read(pid int) (Process, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Process{}, err
	}
	p, ok := parseStat(pid, string(stat))
	if !ok {
		return Process{}, fmt.Errorf("/proc/%d/stat has a form this package does not know: %q", pid, stat)
	}
	return p, nil
}

// List returns every process /proc shows; one that ends while List reads
// is left out.
func List() ([]Process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := Read(pid); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// LiveMembers returns the processes of group pgid that have not died.
func LiveMembers(pgid int) ([]Process, error) {
	ps, err := List()
	return slices.DeleteFunc(ps, func(p Process) bool { return p.PGID != pgid || p.Dead() }), err
}

// parseStat reads "PID (COMMAND) STATE PPID PGRP …". The command may hold
// spaces and parentheses, so the fields are counted from its last ')'.
func parseStat(pid int, stat string) (Process, bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return Process{}, false
	}
	// fields[0] is stat's field 3, the state.
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 15 || len(fields[0]) != 1 {
		return Process{}, false
	}
	var nums [18]int64 // by stat's field number
	for _, n := range []int{4, 5, 14, 15, 16, 17} {
		v, err := strconv.ParseInt(fields[n-3], 10, 64)
		if err != nil {
			return Process{}, false
		}
		nums[n] = v
	}
	tick := tickLength()
	return Process{PID: pid, PPID: int(nums[4]), PGID: int(nums[5]), State: fields[0][0], Command: stat[open+1 : end],
		CPU: time.Duration(nums[14]+nums[15]) * tick, ReapedChildrenCPU: time.Duration(nums[16]+nums[17]) * tick}, true
}

// tickLength is the unit of /proc's CPU times: a second over
// sysconf(_SC_CLK_TCK), which the C library reads from the kernel's
// auxiliary vector (AT_CLKTCK), as this does. Linux gives 100 a second on
// every architecture Go runs on; that is the answer when the vector
// cannot be read.
var tickLength = sync.OnceValue(func() time.Duration {
	hz := uint64(100)
	if auxv, err := os.ReadFile("/proc/self/auxv"); err == nil {
		// More than a tick a nanosecond is no rate a kernel gives.
		if v, ok := auxValue(auxv, atClockTick); ok && v > 0 && v <= uint64(time.Second) {
			hz = v
		}
	}
	return time.Second / time.Duration(hz)
})

// atClockTick is AT_CLKTCK, the auxiliary vector's key for the tick rate.
const atClockTick = 17

// auxValue finds key in an auxiliary vector: pairs of native words, key
// then value, ended by a zero key.
func auxValue(auxv []byte, key uint64) (uint64, bool) {
	const word = bits.UintSize / 8
	read := func(b []byte) uint64 {
		if word == 4 {
			return uint64(binary.NativeEndian.Uint32(b))
		}
		return binary.NativeEndian.Uint64(b)
	}
	for i := 0; i+2*word <= len(auxv); i += 2 * word {
		switch k := read(auxv[i:]); k {
		case 0:
			return 0, false
		case key:
			return read(auxv[i+word:]), true
		}
	}
	return 0, false
}
