//go:build !linux

package workflow

import "golang.org/x/sys/unix"

// bootClock reads CLOCK_MONOTONIC in nanoseconds: one clock for every
// process of the machine, never set back.
func bootClock() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}
