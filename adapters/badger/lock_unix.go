//go:build unix

package badger

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// directoryLocked reports whether another open of dir holds the flock
// badger takes on the directory. Badger turns the flock error of a failed
// open into text, so the lock is asked directly rather than the message
// read.
func directoryLocked(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
