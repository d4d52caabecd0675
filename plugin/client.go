package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/redact"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/protocol/pb"
)

// Options configure Open.
type Options struct {
	// Config is sent to the plugin's Opener once it has started. It never
	// appears in the process environment or in logs unredacted.
	Config map[string]string
	// Secret names Config keys whose values are secret. Keys containing
	// dsn, password, secret, token or credential are secret anyway.
	Secret []string
	// Logger receives the host's messages and the plugin's own log lines;
	// defaults to slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds the plugin's start and handshake (default 10s).
	StartTimeout time.Duration
	// Relaunch starts a plugin process that died again, with the same
	// configuration, RelaunchPause (default 1s) after it died, so that the
	// client works again without being reopened (FAULT-006). Until the new
	// process answers, calls fail with runstate.ErrUnavailable at once. The
	// pause doubles, up to 30s, after a start that fails and after a
	// process that died within a minute of starting. Without it a dead
	// plugin's client stays unavailable until closed.
	Relaunch      bool
	RelaunchPause time.Duration
	// TestClock, when set, opens the plugin for certification: its store's
	// clock stands still at this instant (TestClockEnv) and moves only by
	// Client.AdvanceClock, in this process and in every process started
	// again in its place. A plugin opened without it refuses AdvanceClock
	// (ErrNoTestClock). Never for production: the store's time stops.
	TestClock time.Time
	// AcceptNoPrincipal sends writes to a plugin of protocol 1.5 or older,
	// which cannot record principals, without theirs, instead of refusing
	// them with runstate.ErrUnsupported (protocol.RemoteOptions).
	AcceptNoPrincipal bool
}

// Client is the host's side of a plugin: Store gives the plugin's store,
// Close stops the plugin process. A supervisor keeps the process, and with
// Options.Relaunch starts it again after a crash.
type Client struct {
	info protocol.StoreInfo // what the first process said of its store
	// acceptNoPrincipal: Options.AcceptNoPrincipal.
	acceptNoPrincipal bool
	peer              string // the other side, in messages: "plugin memory"
	sup               *supervisor
	store             runstate.RunStateStore // what Store returns
	remote            *protocol.RemoteStore  // behind store; it watches

	// clockMu orders the moves of the test clock, which every process
	// of the client is sent: clockNow is its time (zero without
	// Options.TestClock), the time a process started again starts at.
	clockMu  sync.Mutex
	clockNow time.Time
}

// session is one plugin process, or the in-process connection.
type session struct {
	rpc  pb.RunStateStoreClient
	proc process   // nil for an in-process connection
	cmd  *exec.Cmd // the process proc started
	// life ends when the process exits or the client is closed; every
	// call's context is tied to it.
	life   context.Context
	end    context.CancelFunc
	exited chan struct{} // closed by the supervisor, under its lock
	opened protocol.StoreInfo
	began  time.Time
}

func (s *session) dead() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// process is go-plugin's client of one plugin process.
type process interface {
	Exited() bool
	Kill() // gracefully first; releases the client
	ReattachConfig() *goplugin.ReattachConfig
}

// route is where the calls of s go.
func (s *session) route() protocol.Route { return protocol.Route{Client: s.rpc, Life: s.life} }

// kill ends the process of s (gracefully first); its gRPC connection ends
// with go-plugin's client.
func (s *session) kill() {
	s.end()
	if s.proc != nil {
		s.proc.Kill()
	}
}

// Open starts the plugin binary at path, checks its protocol version,
// sends it opts.Config and returns the client.
func Open(ctx context.Context, path string, opts Options) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	name := filepath.Base(path)
	log.Info("starting store plugin", "path", path, "config", Redacted(opts.Config, opts.Secret))
	c := &Client{peer: "plugin " + name, clockNow: opts.TestClock, acceptNoPrincipal: opts.AcceptNoPrincipal}
	c.sup = newSupervisor(c.peer, log)
	launch := func(ctx context.Context) (*session, error) { return c.start(ctx, path, opts) }
	if opts.Relaunch {
		// Set before the first start, whose process may die at once.
		policy := relaunchPolicy{launch: launch, pause: opts.RelaunchPause, startTimeout: startTimeout(opts)}
		if !opts.TestClock.IsZero() {
			policy.serving = c.resendClock
		}
		c.sup.relaunchWith(policy)
	}
	s, err := launch(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.begin(name, s)
	log.Info("store plugin ready", "plugin", name, "store", c.info.Name, "version", c.info.Version, "protocol", c.info.Speaks(),
		"features", strings.Join(c.info.Features, ","))
	return c, nil
}

// start starts one plugin process and opens its store.
func (c *Client) start(ctx context.Context, path string, opts Options) (*session, error) {
	timeout := startTimeout(opts)
	name := filepath.Base(path)
	hclogger := newHCLogger(c.sup.log.With("plugin", name))
	cmd := exec.Command(path)
	// The plugin logs what the host's logger would keep, and no more.
	cmd.Env = append(os.Environ(), LogLevelEnv+"="+lowestLevel(c.sup.log).String())
	if now := c.testClock(); !now.IsZero() {
		cmd.Env = append(cmd.Env, TestClockEnv+"="+now.Format(time.RFC3339Nano))
	}
	// The plugin leads a process group of its own, so that a plugin that
	// forks (a wrapper script) is ended whole when it fails to start; and
	// the host stops waiting for its output 2s after it ends, however long
	// a child of it keeps the pipes open.
	ownProcessGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	proc := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{ProtocolVersion: {pluginName: &grpcPlugin{}}},
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           hclogger,
		StartTimeout:     timeout,
		GRPCDialOptions:  []grpc.DialOption{grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize), tracing.DialOption()},
	})
	rpcClient, err := proc.Client()
	if err != nil {
		endStarted(cmd, proc, hclogger)
		// go-plugin tells a protocol version mismatch from other failures in
		// its text alone, which the cause carries to the reader.
		return nil, hclogger.output.explain(runstate.Unavailable(fmt.Sprintf("plugin %s did not start or did not complete the runstate handshake: "+
			"is it a runstate plugin of protocol version %d (built against this runstate release)? Its log lines above and the cause say more", name, ProtocolVersion), err))
	}
	raw, err := rpcClient.Dispense(pluginName)
	if err != nil {
		endStarted(cmd, proc, hclogger)
		return nil, runstate.Unavailable(fmt.Sprintf("plugin %s serves no runstate store", name), err)
	}
	s := c.sup.newSession(raw.(pb.RunStateStoreClient), proc)
	s.cmd = cmd
	if err := c.open(ctx, s, opts.Config); err != nil {
		s.kill() // waits for the plugin's output to be read
		return nil, hclogger.output.explain(err)
	}
	return s, nil
}

func startTimeout(opts Options) time.Duration {
	if opts.StartTimeout > 0 {
		return opts.StartTimeout
	}
	return 10 * time.Second
}

// endStarted ends a plugin that failed to start: its whole process group,
// then go-plugin's side of it. A binary that never ran, or has exited
// already, has nothing to end (go-plugin would say it "failed to exit
// gracefully").
func endStarted(cmd *exec.Cmd, proc *goplugin.Client, log *hcLogger) {
	if cmd.Process == nil {
		return
	}
	endProcessGroup(cmd)
	log.quietExit.Store(true)
	proc.Kill()
}

// NewInProcess returns a client of a store served on conn by RegisterGRPC,
// within one process: the same protocol without a child process, for tests.
func NewInProcess(ctx context.Context, conn grpc.ClientConnInterface, config map[string]string) (*Client, error) {
	return Connect(ctx, conn, "in-process store", config)
}

// Connect returns a client of the store served on conn by RegisterGRPC or
// RegisterShared, sending it config. peer names the server in errors
// ("the store served at /path/store.sock"). Closing the client does not
// close conn. Code that needs no Client (no process) may use
// protocol.Connect instead.
func Connect(ctx context.Context, conn grpc.ClientConnInterface, peer string, config map[string]string) (*Client, error) {
	c := &Client{peer: peer, sup: newSupervisor(peer, slog.Default())}
	s := c.sup.newSession(pb.NewRunStateStoreClient(conn), nil)
	if err := c.open(ctx, s, config); err != nil {
		c.Close()
		return nil, err
	}
	c.begin(peer, s)
	return c, nil
}

// open sends the plugin its configuration; what the plugin says of its
// store is kept in s.
func (c *Client) open(ctx context.Context, s *session, config map[string]string) error {
	info, err := protocol.Open(ctx, protocol.OpenParams{Route: s.route(), Peer: c.peer, Config: config})
	s.opened = info
	return err
}

// begin makes the first session s the one calls go to; what it says of
// its store is the client's (name when it gives none).
func (c *Client) begin(name string, s *session) {
	c.info = s.opened
	if c.info.Name == "" {
		c.info.Name = name
	}
	c.remote = protocol.NewRemoteStore(protocol.RemoteOptions{Peer: c.peer, Info: c.info, Route: c.route, AcceptNoPrincipal: c.acceptNoPrincipal})
	c.store = c.remote.Checked()
	c.sup.begin(s)
}

// route is where a call of the store goes: the session of the process
// that serves now.
func (c *Client) route() (protocol.Route, error) {
	s, err := c.sup.current()
	if err != nil {
		return protocol.Route{}, err
	}
	return s.route(), nil
}

// Leases reports whether the plugin's store implements runstate.LeaseStore.
func (c *Client) Leases() bool { return c.info.Leases }

// Name and Version are what the plugin reported about its store.
func (c *Client) Name() string    { return c.info.Name }
func (c *Client) Version() string { return c.info.Version }

// Info is everything the first plugin process said of its store when
// opened: its protocol version and features among it.
func (c *Client) Info() protocol.StoreInfo { return c.info }

// Store returns the plugin's store, with the features the plugin named
// when opened (runstate.Features, read with runstate.As: its leases, batch
// calls and watches; a plugin built before batches offers none). Input is
// checked (driver.Checked) on this side of the process boundary too. It is
// the one way to the store.
func (c *Client) Store() runstate.RunStateStore { return c.store }

// Close stops the plugin process (gracefully, so that it closes its store)
// and ends the client; later calls return runstate.ErrUnavailable.
func (c *Client) Close() error {
	if c.remote != nil {
		c.remote.Close() // ends its watches; the calls end with the process
	}
	c.sup.close()
	return nil
}

// Watcher returns the plugin's store as a runstate.RunnableWatcher when the
// plugin's store is one (it announces runnable runs), else nil: then
// workers poll.
func (c *Client) Watcher() runstate.RunnableWatcher {
	if c.remote == nil || !c.info.WatchRunnable {
		return nil
	}
	return c.remote
}

// RunWatcher returns the plugin's store as a runstate.RunWatcher when the
// plugin's store is one (it announces the writes of a run), else nil:
// then followers of a run poll.
func (c *Client) RunWatcher() runstate.RunWatcher {
	if c.remote == nil || !c.info.WatchRun {
		return nil
	}
	return c.remote
}

// Kill ends the plugin process and every process it started at once
// (SIGKILL on Unix), as a crash would, and returns when the client has
// seen it die: calls fail with runstate.ErrUnavailable until, with
// Options.Relaunch, another process has started. For fault tests and
// drills; Close ends a plugin gracefully.
func (c *Client) Kill() error {
	s, err := c.sup.current()
	if err != nil {
		return err
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New(c.peer + " is not a process this client started: there is none to kill")
	}
	endProcessGroup(s.cmd)
	select {
	case <-s.exited:
		return nil
	case <-s.life.Done():
		return nil // the client was closed meanwhile
	case <-time.After(10 * time.Second):
		return errors.New(c.peer + " did not exit within 10s of SIGKILL")
	}
}

// PID is the plugin process's id: 0 for an in-process connection or while
// no process runs.
func (c *Client) PID() int {
	s, err := c.sup.current()
	if err != nil || s.proc == nil {
		return 0
	}
	if rc := s.proc.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Redacted returns config with secret values replaced, for logs and
// reports: the keys listed in secret, and those whose names say so (dsn,
// password, secret, token, credential, …).
func Redacted(config map[string]string, secret []string) map[string]string {
	return redact.Config(config, secret)
}

// testClock is the time of the client's test clock; zero without
// Options.TestClock.
func (c *Client) testClock() time.Time {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	return c.clockNow
}

// TestClock reports whether the plugin serves a test clock that its store
// reads (Options.TestClock, and an Opener that passes TestClock(ctx) on):
// whether AdvanceClock can move the store's time.
func (c *Client) TestClock() bool { return c.info.TestClock }

// AdvanceClock moves the test clock of the plugin's store forward by d
// (Options.TestClock), for certification. A plugin that offers no test
// clock refuses it with an error that errors.Is matches to ErrNoTestClock.
// While a killed plugin is being started again the move is kept, and the
// process started takes it, so that every process agrees on the time.
func (c *Client) AdvanceClock(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return runstate.InvalidArgument("d", "%v: the test clock only moves forward", d)
	}
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	s, relaunching, err := c.sup.currentOrRelaunching()
	if err != nil {
		if !c.clockNow.IsZero() && relaunching {
			c.clockNow = c.clockNow.Add(d) // resendClock sends it
			return nil
		}
		return err
	}
	to := c.clockNow.Add(d)
	if err := protocol.SetClock(ctx, protocol.SetClockParams{Route: s.route(), Peer: c.peer, To: to}); err != nil {
		return err
	}
	c.clockNow = to
	return nil
}

// resendClock sends s, a process started again, the client's test clock:
// a move made while it was starting may have come after its start time.
func (c *Client) resendClock(s *session) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	if err := protocol.SetClock(ctx, protocol.SetClockParams{Route: s.route(), Peer: c.peer, To: c.clockNow}); err != nil {
		c.sup.log.Error("the plugin started again did not take the test clock", "plugin", c.peer, "error", err)
	}
}
