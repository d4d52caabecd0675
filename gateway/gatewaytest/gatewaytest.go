// Package gatewaytest runs the conformance suite through gateway
// processes: each check gets a runstate-gateway process of its own in
// front of a fresh store, reached over TCP as an operator.
package gatewaytest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/internal/testsupport/proctest"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/stores"
)

// Setup is how a target starts its gateways and reaches them.
type Setup struct {
	// Bin is the runstate-gateway binary.
	Bin string
	// Args are its tokens and transport flags (not --store or --listen).
	Args []string
	// Dial reaches it with an operator's credentials.
	Dial gateway.Options
	// Principal is the name Dial's token has in the tokens file: the
	// gateway records it in every audit event (AUD-010).
	Principal string
	// LogPath collects the gateways' logs.
	LogPath string
	// Restart: the stores the target makes outlive a gateway process
	// (Badger, a database; Outlives says which do): the target declares
	// conformance.FaultRestart, and for the FAULT rules the harness kills
	// the gateway (SIGKILL) and starts it again on the same store and
	// address.
	Restart bool
	// TestClock: every gateway starts in test mode (gateway.TestClockEnv),
	// its store on a clock the harness moves, and the target declares a
	// controlled clock. Not for a plugin or a gateway behind the gateway,
	// whose clock it cannot move.
	TestClock bool
}

// Outlives reports whether the store a gateway's --store names outlives
// the gateway process: Badger and the database servers do; memory does
// not, and of a plugin or another gateway the name cannot tell.
func Outlives(store string) bool {
	switch stores.Parse(store).Scheme {
	case "badger", "mysql", "postgres", "postgresql", "etcd":
		return true
	}
	return false
}

// ClockStart is where a target's test clock starts, as conformance
// targets in one process start their manual clocks.
var ClockStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Plaintext returns a Setup on loopback without TLS, with a tokens file
// in dir that holds one operator, whose token is made at random.
func Plaintext(bin, dir string) (Setup, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return Setup{}, err
	}
	token := hex.EncodeToString(b)
	tokens := filepath.Join(dir, "gateway-tokens.yaml")
	file := fmt.Sprintf("principals:\n  - name: conformance\n    role: operator\n    token_sha256: %s\n", gateway.HashToken(token))
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		return Setup{}, err
	}
	return Setup{Bin: bin, Args: []string{"--tokens", tokens, "--plaintext"}, Dial: gateway.Options{Token: token, Plaintext: true}, Principal: "conformance",
		LogPath: filepath.Join(dir, "gateway.log")}, nil
}

// Start runs the gateway binary with args, its log appended to logPath,
// and returns once it says where it listens.
func Start(bin string, args []string, logPath string) (*exec.Cmd, string, error) {
	return StartWith(bin, args, nil, logPath)
}

// StartWith is Start with env added to the gateway's environment.
func StartWith(bin string, args, env []string, logPath string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logs, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, "", err
	}
	defer logs.Close()
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		cmd.Process.Kill()
		cmd.Wait()
		b, _ := os.ReadFile(logPath)
		return nil, "", fmt.Errorf("the gateway did not say where it listens: %q, %v\n%s", line, err, b)
	}
	return cmd, addr, nil
}

// Describe starts the gateway as a target of s would, in front of store,
// and returns what it says of itself at Open: whether it runs on the test
// clock (a gateway built before test mode does not), its protocol version
// and the features it names.
func Describe(ctx context.Context, s Setup, store string) (protocol.StoreInfo, error) {
	h := &harness{setup: s, store: store, drop: func() {}}
	if s.TestClock {
		h.clock = ClockStart
	}
	if err := h.start("127.0.0.1:0"); err != nil {
		return protocol.StoreInfo{}, err
	}
	defer h.Close(ctx)
	c, err := gateway.Dial(ctx, h.addr, s.Dial)
	if err != nil {
		return protocol.StoreInfo{}, err
	}
	h.clients = append(h.clients, c)
	return c.Info(), nil
}

// Store makes a fresh store for one check: the value of the gateway's
// --store, and what removes the store afterwards.
type Store func(ctx context.Context) (store string, drop func(), err error)

// ProcessTarget runs each check against a gateway process of its own in
// front of the store newStore makes. The second handle is a second
// connection, as a second worker's. A gateway process keeps real time
// unless s.TestClock; with s.Restart it is killed and started again for
// the FAULT rules.
func ProcessTarget(name string, s Setup, newStore Store) conformance.Target {
	caps := conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: s.TestClock}
	var leaseTTL time.Duration // the suite's default
	if !s.TestClock {
		// Every call crosses a process and TLS: on a loaded machine a few
		// calls in a row took longer than the default 300ms lease, which
		// then expired in the middle of a check that needed it live.
		leaseTTL = time.Second
	}
	if s.Restart {
		caps.Faults = []conformance.Fault{conformance.FaultRestart}
	}
	return conformance.Target{
		Name:         name + " (through a gateway process)",
		StoreVersion: "gateway",
		Capabilities: caps,
		Principal:    s.Principal,
		LeaseTTL:     leaseTTL,
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			store, drop, err := newStore(ctx)
			if err != nil {
				return nil, err
			}
			h := &harness{drop: drop, setup: s, store: store}
			if s.TestClock {
				h.clock = ClockStart
			}
			if err := h.start("127.0.0.1:0"); err != nil {
				drop()
				return nil, err
			}
			if h.first, err = h.OpenHandle(ctx); err != nil {
				return nil, errors.Join(err, h.Close(ctx))
			}
			return h, nil
		},
	}
}

type harness struct {
	setup Setup
	store string // the gateway's --store
	first runstate.RunStateStore
	drop  func()

	// mu guards what a fault and the clock change: a check may open a
	// handle while another goroutine of it advances the clock.
	mu      sync.Mutex
	cmd     *exec.Cmd // nil while a restart fault has killed it
	addr    string
	clients []*gateway.Client
	clock   time.Time // the test clock's time; zero keeps real time
}

// start starts the gateway listening on listen, at the test clock's time.
func (h *harness) start(listen string) error {
	// The store travels in the environment: a DSN's password stays off
	// the command line.
	env := []string{"RUNSTATE_GATEWAY_STORE=" + h.store}
	if !h.clock.IsZero() {
		env = append(env, gateway.TestClockEnv+"="+h.clock.Format(time.RFC3339Nano))
	}
	cmd, addr, err := StartWith(h.setup.Bin, append([]string{"--listen", listen}, h.setup.Args...), env, h.setup.LogPath)
	if err != nil {
		return err
	}
	h.cmd, h.addr = cmd, addr
	return nil
}

func (h *harness) Store() runstate.RunStateStore { return h.first }

// Announced is what the gateway said of its store when the first handle
// connected (its protocol version and features), for reports.
func (h *harness) Announced() protocol.StoreInfo { return h.clients[0].Info() }

// RunWatcher implements conformance.RunWatching: the first handle's.
func (h *harness) RunWatcher() runstate.RunWatcher { return h.clients[0].RunWatcher() }

func (h *harness) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, err := gateway.Dial(ctx, h.addr, h.setup.Dial)
	if err != nil {
		return nil, err
	}
	h.clients = append(h.clients, c)
	return c.Store(), nil
}

// Advance moves the gateway's test clock by d (the store behind it reads
// it; every client reaches the same gateway). A gateway that does not
// take it breaks the check (the suite turns the panic into its error).
func (h *harness) Advance(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clock.IsZero() {
		panic("the gateway process keeps real time: the target declares no controlled clock")
	}
	h.clock = h.clock.Add(d)
	if h.cmd == nil {
		return // killed: it starts again at h.clock
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.clients[0].SetClock(ctx, h.clock); err != nil {
		panic(fmt.Sprintf("moving the gateway's test clock by %v: %v", d, err))
	}
}

// StartFault kills the gateway process (a restart): its store outlives it.
func (h *harness) StartFault(_ context.Context, p conformance.FaultParams) error {
	if p.Fault != conformance.FaultRestart || !h.setup.Restart {
		return fmt.Errorf("a gateway process harness causes no fault %q", p.Fault)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stop()
	return nil
}

// EndFault starts the gateway again on the same store and address, and
// waits until every client's calls succeed again (gRPC reconnects).
func (h *harness) EndFault(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h.mu.Lock()
	for h.cmd == nil {
		// The port of the killed process may not be free at once.
		if err := h.start(h.addr); err != nil {
			if ctx.Err() != nil {
				h.mu.Unlock()
				return fmt.Errorf("the gateway did not start again on %s within a minute: %w", h.addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var stores []runstate.RunStateStore
	for _, c := range h.clients {
		stores = append(stores, c.Store())
	}
	h.mu.Unlock()
	return proctest.AwaitAnswers(ctx, "the gateway", stores...)
}

// stop kills the gateway process at once, as a crash would; h.mu is held.
func (h *harness) stop() {
	if h.cmd != nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
		h.cmd = nil
	}
}

func (h *harness) Close(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.clients {
		c.Close()
	}
	h.stop()
	h.drop()
	return nil
}
