package benchutil

import (
	"errors"
	"syscall"
	"time"
)

// sleepPrecisely blocks the calling thread in nanosleep. Go's timers wake
// an idle process through epoll with whole milliseconds, which would turn
// a 0.25 ms delay into 1 ms; the kernel's high-resolution timer keeps it
// within tens of microseconds.
func sleepPrecisely(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for {
		var left syscall.Timespec
		err := syscall.Nanosleep(&ts, &left)
		if !errors.Is(err, syscall.EINTR) {
			return
		}
		ts = left // interrupted by a signal (the runtime's preemption): sleep the rest
	}
}
