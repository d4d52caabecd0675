package plugin_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/testsupport/proctest"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/plugin/plugintest"
)

// A plugin opened without Options.TestClock (as in production) refuses to
// move its store's clock, with an error errors.Is recognises, and its
// store's time runs on as before.
func TestAPluginNotOpenedForCertificationRefusesTheClock(t *testing.T) {
	ctx := context.Background()
	c, err := plugin.Open(ctx, bin(t, memoryPkg), plugin.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.TestClock() {
		t.Fatal("a plugin opened without a test clock says it serves one")
	}
	err = c.AdvanceClock(ctx, time.Hour)
	if !errors.Is(err, plugin.ErrNoTestClock) {
		t.Fatalf("AdvanceClock on a plugin not opened for certification: %v, want ErrNoTestClock", err)
	}
	t.Logf("refused: %v", err)
	before := time.Now()
	run, err := c.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if run.CreatedAt.Sub(before) > time.Minute {
		t.Fatalf("the store's clock moved although the call was refused: created %v, now %v", run.CreatedAt, before)
	}
}

// A plugin opened for certification whose Opener does not give its store
// the test clock says so, and refuses to move a clock its store does not
// read, rather than move nothing.
func TestAPluginWhoseStoreIgnoresTheTestClockRefusesIt(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "")
	ctx := context.Background()
	c, err := plugin.Open(ctx, bin(t, testPkg), plugin.Options{Logger: slog.New(slog.DiscardHandler), TestClock: plugintest.ClockStart})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.TestClock() {
		t.Fatal("a plugin whose store ignores the test clock says it serves one")
	}
	if err := c.AdvanceClock(ctx, time.Hour); !errors.Is(err, plugin.ErrNoTestClock) {
		t.Fatalf("AdvanceClock: %v, want ErrNoTestClock", err)
	}
}

// A plugin opened for certification stamps the test clock's time; the
// clock moves by exactly what is advanced, never back, and a plugin
// killed and started again (Options.Relaunch) keeps it, including a move
// made while it was down.
func TestTheTestClockSurvivesARelaunch(t *testing.T) {
	ctx := context.Background()
	start := plugintest.ClockStart
	c, err := plugin.Open(ctx, bin(t, badgerPkg), plugin.Options{Config: map[string]string{"dir": t.TempDir()},
		Logger: slog.New(slog.DiscardHandler), Relaunch: true, RelaunchPause: 200 * time.Millisecond, TestClock: start})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.TestClock() {
		t.Fatal("the Badger plugin opened for certification serves no test clock")
	}
	createdAt := func() time.Time {
		t.Helper()
		run, err := c.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
		if err != nil {
			t.Fatal(err)
		}
		return run.CreatedAt
	}
	// advance moves the clock by d and expects a run created then at want.
	advance := func(d time.Duration, want time.Time, when string) {
		t.Helper()
		if err := c.AdvanceClock(ctx, d); err != nil {
			t.Fatal(err)
		}
		if got := createdAt(); !got.Equal(want) {
			t.Fatalf("%s: created at %v, want %v", when, got, want)
		}
	}
	advance(0, start, "at the test clock's start")
	advance(time.Hour, start.Add(time.Hour), "after advancing an hour")
	if err := c.AdvanceClock(ctx, -time.Second); !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("moving the clock back: %v, want INVALID_ARGUMENT", err)
	}

	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	// While the plugin is down the move is kept for the process that
	// starts in its place.
	if err := c.AdvanceClock(ctx, time.Minute); err != nil {
		t.Fatalf("advancing while the plugin is started again: %v", err)
	}
	if err := proctest.AwaitAnswers(ctx, "the plugin", c.Store()); err != nil {
		t.Fatal(err)
	}
	want := start.Add(time.Hour + time.Minute)
	advance(0, want, "after the relaunch")
	advance(time.Second, want.Add(time.Second), "advancing the process started again")
}
