package driver

import "time"

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Timestamp normalises t the way every store keeps times: UTC, truncated to
// microseconds, so that all adapters return identical values.
func Timestamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
