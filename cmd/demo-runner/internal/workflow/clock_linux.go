package workflow

import "golang.org/x/sys/unix"

// bootClock reads CLOCK_BOOTTIME in nanoseconds: one clock for every
// process of the machine, never set back, and running on while the
// machine sleeps (as lease expiry in the store does).
func bootClock() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("CLOCK_BOOTTIME: " + err.Error())
	}
	return ts.Nano()
}
