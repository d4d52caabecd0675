//go:build !linux

package benchutil

import "time"

// sleepPrecisely is time.Sleep where nanosleep is not at hand.
func sleepPrecisely(d time.Duration) { time.Sleep(d) }
