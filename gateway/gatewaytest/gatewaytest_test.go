package gatewaytest_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/gateway/gatewaytest"
	"github.com/runstate/runstate/plugin/plugintest"
	"github.com/runstate/runstate/protocol"
)

const gatewayPkg = "github.com/runstate/runstate/cmd/runstate-gateway"

var binaries = plugintest.NewBinaries(gatewayPkg)

func TestMain(m *testing.M) {
	code := m.Run()
	binaries.Cleanup()
	os.Exit(code)
}

func setup(t *testing.T) gatewaytest.Setup {
	t.Helper()
	s, err := gatewaytest.Plaintext(binaries.Path(t, gatewayPkg), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The memory store behind a gateway process in test mode: the rules that
// move time run through the gateway's test clock.
func TestConformanceMemoryBehindAGatewayOnATestClock(t *testing.T) {
	s := setup(t)
	s.TestClock = true
	conformance.Run(t, conformance.Repeated(gatewaytest.ProcessTarget("memory", s, func(context.Context) (string, func(), error) {
		return "memory", func() {}, nil
	})))
}

// A Badger store outlives its gateway: the FAULT rules kill the gateway
// process and start it again on the same store and address, at the test
// clock's time.
func TestConformanceBadgerBehindAGatewayThatIsKilled(t *testing.T) {
	s := setup(t)
	s.TestClock, s.Restart = true, gatewaytest.Outlives("badger:x")
	dir := t.TempDir()
	conformance.Run(t, conformance.Repeated(gatewaytest.ProcessTarget("badger", s, func(context.Context) (string, func(), error) {
		store, err := os.MkdirTemp(dir, "store-*")
		return "badger:" + store, func() { os.RemoveAll(store) }, err
	})))
}

// A gateway not started in test mode refuses to move its store's clock,
// with an error errors.Is recognises.
func TestAGatewayNotInTestModeRefusesTheClock(t *testing.T) {
	s := setup(t)
	cmd, addr, err := gatewaytest.StartWith(s.Bin, append([]string{"--listen", "127.0.0.1:0"}, s.Args...), []string{"RUNSTATE_GATEWAY_STORE=memory"}, s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ctx := context.Background()
	c, err := gateway.Dial(ctx, addr, s.Dial)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetClock(ctx, gatewaytest.ClockStart.Add(time.Hour)); !errors.Is(err, protocol.ErrNoTestClock) {
		t.Fatalf("SetClock on a gateway not in test mode: %v, want ErrNoTestClock", err)
	}
	run, err := c.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(run.CreatedAt); d < -time.Minute || d > time.Minute {
		t.Fatalf("the store's clock is not real time after the refusal: created %v", run.CreatedAt)
	}
}

// The gateway cannot move the clock of a plugin or of another gateway
// behind it, and says so instead of starting in a test mode that moves
// nothing.
func TestTestModeNeedsAStoreThatReadsTheClock(t *testing.T) {
	for _, store := range []string{"plugin:./runstate-plugin-badger", "gateway:127.0.0.1:1"} {
		if err := gateway.CheckTestClock(store); err == nil {
			t.Errorf("%s: test mode accepted", store)
		}
	}
	for _, store := range []string{"memory", "badger:/x", "postgres:postgres://u@h/db"} {
		if err := gateway.CheckTestClock(store); err != nil {
			t.Errorf("%s: %v", store, err)
		}
	}
	s := setup(t)
	_, _, err := gatewaytest.StartWith(s.Bin, append([]string{"--listen", "127.0.0.1:0"}, s.Args...),
		[]string{"RUNSTATE_GATEWAY_STORE=plugin:/no/such/plugin", gateway.TestClockEnv + "=" + gatewaytest.ClockStart.Format(time.RFC3339)}, s.LogPath)
	if err == nil || !strings.Contains(err.Error(), "keeps the clock of its own process") {
		t.Fatalf("a gateway in test mode in front of a plugin: %v, want a refusal that says why", err)
	}
}
