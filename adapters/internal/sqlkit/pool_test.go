package sqlkit

import (
	"testing"
	"time"

	"github.com/runstate/runstate/driver"
)

// A SQL store's group commit keeps more than one write in flight, so that
// one write waiting on a row lock does not hold up the process's others;
// what the caller sets is kept.
func TestGroupCommitOfAPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		given   driver.GroupCommit
		maxOpen int
		want    driver.GroupCommit
	}{
		{"the default pool", driver.GroupCommit{}, 0, driver.GroupCommit{MaxInFlight: 8}},
		{"a pool of 4", driver.GroupCommit{}, 4, driver.GroupCommit{MaxInFlight: 2}},
		{"a pool of 1", driver.GroupCommit{}, 1, driver.GroupCommit{MaxInFlight: 1}},
		{"set by the caller", driver.GroupCommit{MaxInFlight: 1, MaxBatch: 10, Window: time.Millisecond}, 32,
			driver.GroupCommit{MaxInFlight: 1, MaxBatch: 10, Window: time.Millisecond}},
		{"off", driver.GroupCommit{Off: true}, 32, driver.GroupCommit{Off: true, MaxInFlight: 8}},
	} {
		if got := GroupCommit(tc.given, tc.maxOpen); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
