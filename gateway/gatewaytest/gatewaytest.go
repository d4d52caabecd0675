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
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/gateway"
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
}

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

// Store makes a fresh store for one check: the value of the gateway's
// --store, and what removes the store afterwards.
type Store func(ctx context.Context) (store string, drop func(), err error)

// ProcessTarget runs each check against a gateway process of its own in
// front of the store newStore makes. The second handle is a second
// connection, as a second worker's; a gateway process keeps real time.
func ProcessTarget(name string, s Setup, newStore Store) conformance.Target {
	return conformance.Target{
		Name:         name + " (through a gateway process)",
		StoreVersion: "gateway",
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true},
		Principal:    s.Principal,
		// Every call crosses a process and TLS: on a loaded machine a few
		// calls in a row took longer than the default 300ms lease, which
		// then expired in the middle of a check that needed it live.
		LeaseTTL: time.Second,
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			store, drop, err := newStore(ctx)
			if err != nil {
				return nil, err
			}
			h := &harness{drop: drop, setup: s}
			// The store travels in the environment: a DSN's password stays
			// off the command line.
			cmd, addr, err := StartWith(s.Bin, append([]string{"--listen", "127.0.0.1:0"}, s.Args...), []string{"RUNSTATE_GATEWAY_STORE=" + store}, s.LogPath)
			if err != nil {
				drop()
				return nil, err
			}
			h.cmd, h.addr = cmd, addr
			if h.first, err = h.OpenHandle(ctx); err != nil {
				return nil, errors.Join(err, h.Close(ctx))
			}
			return h, nil
		},
	}
}

type harness struct {
	setup   Setup
	cmd     *exec.Cmd
	addr    string
	first   runstate.RunStateStore
	clients []*gateway.Client
	drop    func()
}

func (h *harness) Store() runstate.RunStateStore { return h.first }

// RunWatcher implements conformance.RunWatching: the first handle's.
func (h *harness) RunWatcher() runstate.RunWatcher { return h.clients[0].RunWatcher() }

func (h *harness) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	c, err := gateway.Dial(ctx, h.addr, h.setup.Dial)
	if err != nil {
		return nil, err
	}
	h.clients = append(h.clients, c)
	return c.Store(), nil
}

func (h *harness) Advance(time.Duration) { panic("a gateway process keeps real time") }

func (h *harness) Close(context.Context) error {
	for _, c := range h.clients {
		c.Close()
	}
	h.cmd.Process.Kill()
	h.cmd.Wait()
	h.drop()
	return nil
}
