// Package proctest helps tests that watch real processes.
package proctest

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/procfs"
)

// Alive reports whether pid runs: a zombie (killed, not yet reaped by
// whoever adopted it) does not count. It reads /proc, so it answers only on
// Linux.
func Alive(pid int) bool {
	p, err := procfs.Read(pid)
	return err == nil && !p.Dead()
}

// Require skips a test that watches processes where /proc cannot tell
// whether they run: such a test would pass without looking.
func Require(t interface {
	Helper()
	Skip(args ...any)
}) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("this test watches processes through /proc, which this system does not have")
	}
}

// AwaitAnswers waits, for at most a minute, until each store answers a
// read again, as the clients of a server process killed and started again
// must; what names the server in the error ("the plugin").
func AwaitAnswers(ctx context.Context, what string, stores ...runstate.RunStateStore) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, s := range stores {
		for {
			_, err := s.ListRuns(ctx, runstate.ListRunsParams{Limit: 1})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s did not answer again within a minute of being killed: %w", what, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
