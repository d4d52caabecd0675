package plugin

import (
	"context"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/protocol"
)

// TestClockEnv is set by a host that opens a plugin for certification
// (Options.TestClock) to the instant, RFC 3339, at which the plugin's
// test clock stands still. Only then does the plugin serve SetClock.
const TestClockEnv = "RUNSTATE_PLUGIN_TEST_CLOCK"

// ErrNoTestClock is the error of Client.AdvanceClock on a plugin that
// offers no test clock: one not opened with Options.TestClock, or one
// whose Opener does not give its store TestClock(ctx).
var ErrNoTestClock = protocol.ErrNoTestClock

// TestClock returns the clock the store an Opener makes must read when the
// host opened the plugin for certification, and nil otherwise (the store
// keeps its own clock): pass it to the store's clock option. The host
// then moves the store's time instead of waiting for it (the conformance
// suite's controlled-clock rules); SchemeOpener passes it on.
func TestClock(ctx context.Context) runstate.Clock { return protocol.TestClockFrom(ctx) }
