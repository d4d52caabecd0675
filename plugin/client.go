package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/internal/redact"
	pb "github.com/runstate/runstate/plugin/proto"
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
}

// Client is a plugin's store as seen from the host. Use Store for the
// spec interfaces it implements; Close stops the plugin process.
type Client struct {
	name, version string
	peer          string // the other side, in messages: "plugin memory"
	leases        bool

	// life ends when the client is closed.
	life context.Context
	end  context.CancelFunc

	mu           sync.Mutex
	cur          *session
	launch       func(ctx context.Context) (*session, error) // nil: no relaunch
	basePause    time.Duration                               // Options.RelaunchPause
	pause        time.Duration                               // before the next relaunch
	startTimeout time.Duration                               // bounds a relaunch's start and Open
	launching    bool
	log          *slog.Logger
	bg           sync.WaitGroup // watchers and relaunches
}

// session is one plugin process, or the in-process connection.
type session struct {
	rpc  pb.RunStateStoreClient
	proc *goplugin.Client // nil for an in-process connection
	cmd  *exec.Cmd        // the process proc started
	// life ends when the process exits or the client is closed; every
	// call's context is tied to it.
	life   context.Context
	end    context.CancelFunc
	exited chan struct{}
	opened *pb.OpenResponse // what the plugin said of its store
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

// remote is the plugin's store as the protocol carries it: each call goes
// to the plugin as it is. Store wraps it with the kit's checks, so input is
// validated once on this side of the process boundary (protobuf strings
// must be valid UTF-8 to be sent at all) and once by the store beyond it.
type remote struct{ c *Client }

var _ runstate.Store = remote{}

// Open starts the plugin binary at path, checks its protocol version,
// sends it opts.Config and returns the client.
func Open(ctx context.Context, path string, opts Options) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	name := filepath.Base(path)
	log.Info("starting store plugin", "path", path, "config", Redacted(opts.Config, opts.Secret))
	c := newClient(name, "plugin "+name, log)
	launch := func(ctx context.Context) (*session, error) { return c.start(ctx, path, opts) }
	if opts.Relaunch {
		// Set before the first start, whose process may die at once.
		c.mu.Lock()
		c.launch, c.basePause, c.startTimeout = launch, opts.RelaunchPause, startTimeout(opts)
		if c.basePause <= 0 {
			c.basePause = time.Second
		}
		c.pause = c.basePause
		c.mu.Unlock()
	}
	s, err := launch(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.use(s)
	log.Info("store plugin ready", "plugin", name, "store", c.name, "version", c.version, "leases", c.leases)
	return c, nil
}

// start starts one plugin process and opens its store.
func (c *Client) start(ctx context.Context, path string, opts Options) (*session, error) {
	timeout := startTimeout(opts)
	name := filepath.Base(path)
	hclogger := newHCLogger(c.log.With("plugin", name))
	cmd := exec.Command(path)
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
		GRPCDialOptions:  []grpc.DialOption{grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize)},
	})
	rpcClient, err := proc.Client()
	if err != nil {
		endStarted(cmd, proc, hclogger)
		// go-plugin tells a protocol version mismatch from other failures in
		// its text alone, which the cause carries to the reader.
		return nil, runstate.Unavailable(fmt.Sprintf("plugin %s did not start or did not complete the runstate handshake: "+
			"is it a runstate plugin of protocol version %d (built against this runstate release)? Its log lines above and the cause say more", name, ProtocolVersion), err)
	}
	raw, err := rpcClient.Dispense(pluginName)
	if err != nil {
		endStarted(cmd, proc, hclogger)
		return nil, runstate.Unavailable(fmt.Sprintf("plugin %s serves no runstate store", name), err)
	}
	s := c.newSession(raw.(pb.RunStateStoreClient), proc)
	s.cmd = cmd
	if err := c.open(ctx, s, opts.Config); err != nil {
		s.end()
		proc.Kill()
		return nil, err
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
// close conn.
func Connect(ctx context.Context, conn grpc.ClientConnInterface, peer string, config map[string]string) (*Client, error) {
	c := newClient(peer, peer, slog.Default())
	s := c.newSession(pb.NewRunStateStoreClient(conn), nil)
	if err := c.open(ctx, s, config); err != nil {
		c.Close()
		return nil, err
	}
	c.use(s)
	return c, nil
}

func newClient(name, peer string, log *slog.Logger) *Client {
	c := &Client{name: name, peer: peer, log: log}
	c.life, c.end = context.WithCancel(context.Background())
	return c
}

// newSession makes the session of a started process (proc) or of an
// in-process connection (proc nil), watching the process.
func (c *Client) newSession(rpc pb.RunStateStoreClient, proc *goplugin.Client) *session {
	s := &session{rpc: rpc, proc: proc, exited: make(chan struct{}), began: time.Now()}
	s.life, s.end = context.WithCancel(c.life)
	if proc != nil {
		c.bg.Add(1)
		go c.watch(s)
	}
	return s
}

// watch notices the plugin process exiting, ends every call in flight
// and, with Relaunch, starts another.
func (c *Client) watch(s *session) {
	defer c.bg.Done()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
			if s.proc.Exited() {
				close(s.exited)
				s.end()
				c.relaunch(s)
				return
			}
		}
	}
}

// relaunch starts a process in place of the dead session s, in the
// background, after a pause, retrying until one starts or the client is
// closed. The pause doubles (up to 30s) after a failed start and after a
// process that died within a minute of starting, so that a plugin that
// keeps crashing is not restarted in a tight loop.
func (c *Client) relaunch(dead *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.launch == nil || c.launching || c.cur != dead || c.life.Err() != nil {
		return
	}
	if time.Since(dead.began) > time.Minute {
		c.pause = c.basePause
	}
	c.launching = true
	c.log.Warn("store plugin exited; starting it again", "plugin", c.peer, "in", c.pause)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for {
			c.mu.Lock()
			pause := c.pause
			c.pause = min(2*c.pause, 30*time.Second)
			c.mu.Unlock()
			select {
			case <-time.After(pause):
			case <-c.life.Done():
				c.mu.Lock()
				c.launching = false
				c.mu.Unlock()
				return
			}
			ctx, cancel := context.WithTimeout(c.life, c.startTimeout)
			s, err := c.launch(ctx)
			cancel()
			if err == nil && s.opened.Leases != c.Leases() {
				err = fmt.Errorf("the plugin started again reports a store with leases %v, where it had %v", s.opened.Leases, c.Leases())
				s.end()
				s.proc.Kill()
			} else if err == nil {
				c.mu.Lock()
				if c.life.Err() == nil {
					c.cur = s
					if !s.dead() {
						// From here a death of s is watch's to see: it
						// closes s.exited before it asks to relaunch.
						c.launching = false
						c.mu.Unlock()
						c.log.Info("store plugin started again", "plugin", c.peer)
						// Its gRPC connection ends with go-plugin's client.
						dead.proc.Kill()
						return
					}
					// It died before it was in use: start another.
					c.mu.Unlock()
					dead.proc.Kill()
					dead = s
					continue
				}
				c.mu.Unlock()
				s.end()
				s.proc.Kill()
			}
			if c.life.Err() != nil {
				c.mu.Lock()
				c.launching = false
				c.mu.Unlock()
				return
			}
			c.log.Error("starting the store plugin again failed; retrying", "plugin", c.peer, "err", err)
		}
	}()
}

// session returns the session calls go to: nil and the reason when there
// is none that works. A dead plugin fails calls with UNAVAILABLE at once,
// never hanging them (FAULT-002).
func (c *Client) session() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.life.Err() != nil:
		return nil, runstate.Unavailable(c.peer+" is closed", nil)
	case c.cur == nil:
		return nil, runstate.Unavailable(c.peer+" is not open", nil)
	case c.cur.dead() && c.launching:
		return nil, runstate.Unavailable(c.peer+" has exited and is being started again", nil)
	case c.cur.dead():
		return nil, runstate.Unavailable(c.peer+" has exited", nil)
	}
	return c.cur, nil
}

// open sends the plugin its configuration; what the plugin says of its
// store is kept in s.
func (c *Client) open(ctx context.Context, s *session, config map[string]string) error {
	resp, err := s.rpc.Open(ctx, &pb.OpenRequest{Config: config})
	if err != nil {
		return c.err(ctx, s, err)
	}
	s.opened = resp
	return nil
}

// use makes s the session calls go to; the first one says what the
// client's store is.
func (c *Client) use(s *session) {
	c.mu.Lock()
	c.cur = s
	if s.opened.Name != "" {
		c.name = s.opened.Name
	}
	c.version, c.leases = s.opened.Version, s.opened.Leases
	c.mu.Unlock()
	if s.dead() {
		// It died before it was in use, unseen by relaunch.
		c.relaunch(s)
	}
}

// Leases reports whether the plugin's store implements runstate.LeaseStore.
func (c *Client) Leases() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.leases }

// Name and Version are what the plugin reported about its store.
func (c *Client) Name() string    { c.mu.Lock(); defer c.mu.Unlock(); return c.name }
func (c *Client) Version() string { c.mu.Lock(); defer c.mu.Unlock(); return c.version }

// Store returns the plugin's store: a runstate.Store when it has leases,
// otherwise only a runstate.RunStateStore. It is the one way to the store.
func (c *Client) Store() runstate.RunStateStore {
	if c.Leases() {
		return driver.Checked(remote{c})
	}
	return driver.Checked(runOnly{remote{c}})
}

// runOnly shows only the RunStateStore methods of a plugin whose store has
// no leases: embedding the interface promotes nothing else.
type runOnly struct{ runstate.RunStateStore }

// Close stops the plugin process (gracefully, so that it closes its store)
// and ends the client; later calls return runstate.ErrUnavailable.
func (c *Client) Close() error {
	c.end()
	c.bg.Wait()
	c.mu.Lock()
	s := c.cur
	c.mu.Unlock()
	if s != nil && s.proc != nil {
		s.proc.Kill()
	}
	return nil
}

// Kill ends the plugin process and every process it started at once
// (SIGKILL on Unix), as a crash would, and returns when the client has
// seen it die: calls fail with runstate.ErrUnavailable until, with
// Options.Relaunch, another process has started. For fault tests and
// drills; Close ends a plugin gracefully.
func (c *Client) Kill() error {
	s, err := c.session()
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
	s, err := c.session()
	if err != nil || s.proc == nil {
		return 0
	}
	if rc := s.proc.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// err turns a call's failure into the contract's error. ctx is the caller's.
func (c *Client) err(ctx context.Context, s *session, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && (s.dead() || s.life.Err() != nil) {
		return runstate.Unavailable(c.peer+" has exited", err)
	}
	return fromStatus(err, c.peer, s.dead)
}

// do runs one call against the plugin, its context tied to the process's
// life, so that a call in flight ends when the process exits.
func do[T any](c *Client, ctx context.Context, f func(context.Context, pb.RunStateStoreClient) (T, error)) (T, error) {
	var zero T
	s, err := c.session()
	if err != nil {
		return zero, err
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	defer func() { stop(); cancel() }()
	out, err := f(cctx, s.rpc)
	if err != nil {
		return zero, c.err(ctx, s, err)
	}
	return out, nil
}

// CreateRun implements runstate.RunStateStore.
func (rs remote) CreateRun(ctx context.Context, p runstate.CreateRunParams) (runstate.RunSnapshot, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Run, error) {
		return rpc.CreateRun(ctx, createPB(p))
	})
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return fromRun(r), nil
}

// UpdateRun implements runstate.RunStateStore.
func (rs remote) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Run, error) {
		return rpc.UpdateRun(ctx, updatePB(p))
	})
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return fromRun(r), nil
}

// GetRun implements runstate.RunStateStore.
func (rs remote) GetRun(ctx context.Context, runID string) (runstate.RunSnapshot, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Run, error) {
		return rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	})
	if err != nil {
		return runstate.RunSnapshot{}, err
	}
	return fromRun(r), nil
}

// ListRuns implements runstate.RunStateStore.
func (rs remote) ListRuns(ctx context.Context, p runstate.ListRunsParams) (runstate.RunPage, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.RunPage, error) {
		return rpc.ListRuns(ctx, &pb.ListRunsRequest{Statuses: p.Statuses, WorkflowName: p.WorkflowName, Labels: p.Labels,
			CreatedFrom: ts(p.CreatedFrom), CreatedBefore: ts(p.CreatedBefore), Limit: int64(p.Limit), Cursor: p.Cursor})
	})
	if err != nil {
		return runstate.RunPage{}, err
	}
	return fromRunPage(r), nil
}

// ListAuditEvents implements runstate.RunStateStore.
func (rs remote) ListAuditEvents(ctx context.Context, p runstate.ListAuditParams) (runstate.AuditPage, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.AuditPage, error) {
		return rpc.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{RunId: p.RunID, AfterSeq: p.AfterSeq, Limit: int64(p.Limit)})
	})
	if err != nil {
		return runstate.AuditPage{}, err
	}
	out := runstate.AuditPage{More: r.More}
	for _, e := range r.Events {
		out.Events = append(out.Events, fromEvent(e))
	}
	return out, nil
}

// ClaimRun implements runstate.LeaseStore.
func (rs remote) ClaimRun(ctx context.Context, p runstate.ClaimRunParams) (runstate.Claim, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Claim, error) {
		return rpc.ClaimRun(ctx, &pb.ClaimRunRequest{RunId: p.RunID, Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Statuses: p.Statuses})
	})
	if err != nil {
		return runstate.Claim{}, err
	}
	return fromClaim(r), nil
}

// ClaimNextRun implements runstate.LeaseStore.
func (rs remote) ClaimNextRun(ctx context.Context, p runstate.ClaimNextParams) (runstate.Claim, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Claim, error) {
		return rpc.ClaimNextRun(ctx, &pb.ClaimNextRunRequest{Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Filter: filterPB(p.Filter)})
	})
	if err != nil {
		return runstate.Claim{}, err
	}
	return fromClaim(r), nil
}

// RenewLease implements runstate.LeaseStore.
func (rs remote) RenewLease(ctx context.Context, p runstate.RenewLeaseParams) (runstate.Lease, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Lease, error) {
		return rpc.RenewLease(ctx, &pb.RenewLeaseRequest{RunId: p.RunID, Token: p.Token, Ttl: durationpb.New(p.TTL)})
	})
	if err != nil {
		return runstate.Lease{}, err
	}
	return fromLease(r), nil
}

// ReleaseLease implements runstate.LeaseStore.
func (rs remote) ReleaseLease(ctx context.Context, p runstate.ReleaseLeaseParams) error {
	_, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.ReleaseLeaseResponse, error) {
		return rpc.ReleaseLease(ctx, &pb.ReleaseLeaseRequest{RunId: p.RunID, Token: p.Token})
	})
	return err
}

// ListRunnableRuns implements runstate.LeaseStore.
func (rs remote) ListRunnableRuns(ctx context.Context, p runstate.ListRunnableParams) (runstate.RunPage, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.RunPage, error) {
		return rpc.ListRunnableRuns(ctx, &pb.ListRunnableRunsRequest{Filter: filterPB(p.Filter), Limit: int64(p.Limit), Cursor: p.Cursor})
	})
	if err != nil {
		return runstate.RunPage{}, err
	}
	return fromRunPage(r), nil
}

// GetLease implements runstate.LeaseReader.
func (rs remote) GetLease(ctx context.Context, runID string) (runstate.Lease, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context, rpc pb.RunStateStoreClient) (*pb.Lease, error) {
		return rpc.GetLease(ctx, &pb.GetRunRequest{RunId: runID})
	})
	if err != nil {
		return runstate.Lease{}, err
	}
	return fromLease(r), nil
}

// Redacted returns config with secret values replaced, for logs and
// reports: the keys listed in secret, and those whose names say so (dsn,
// password, secret, token, credential, …).
func Redacted(config map[string]string, secret []string) map[string]string {
	return redact.Config(config, secret)
}
