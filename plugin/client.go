package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/runstate/runstate/internal/redact"
	pb "github.com/runstate/runstate/plugin/proto"
	"github.com/runstate/runstate/spec"
	"github.com/runstate/runstate/spec/driver"
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
}

// Client is a plugin's store as seen from the host. Use Store for the
// spec interfaces it implements; Close stops the plugin process.
type Client struct {
	name, version string
	peer          string // the other side, in messages: "plugin memory"
	rpc           pb.RunStateStoreClient
	leases        bool
	proc          *goplugin.Client // nil for an in-process connection

	// life ends when the plugin process exits or the client is closed;
	// every call's context is tied to it.
	life     context.Context
	end      context.CancelFunc
	exited   chan struct{}
	watching sync.WaitGroup
}

// remote is the plugin's store as the protocol carries it: each call goes
// to the plugin as it is. Store wraps it with the kit's checks, so input is
// validated once on this side of the process boundary (protobuf strings
// must be valid UTF-8 to be sent at all) and once by the store beyond it.
type remote struct{ c *Client }

var _ spec.Store = remote{}

// Open starts the plugin binary at path, checks its protocol version,
// sends it opts.Config and returns the client.
func Open(ctx context.Context, path string, opts Options) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	name := filepath.Base(path)
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	log.Info("starting store plugin", "path", path, "config", Redacted(opts.Config, opts.Secret))
	hclogger := newHCLogger(log.With("plugin", name))
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
		return nil, spec.Unavailable(fmt.Sprintf("plugin %s did not start or did not complete the runstate handshake: "+
			"is it a runstate plugin of protocol version %d (built against this runstate release)? Its log lines above and the cause say more", name, ProtocolVersion), err)
	}
	raw, err := rpcClient.Dispense(pluginName)
	if err != nil {
		endStarted(cmd, proc, hclogger)
		return nil, spec.Unavailable(fmt.Sprintf("plugin %s serves no runstate store", name), err)
	}
	c := newClient(name, "plugin "+name, raw.(pb.RunStateStoreClient), proc)
	if err := c.open(ctx, opts.Config); err != nil {
		c.Close()
		return nil, err
	}
	log.Info("store plugin ready", "plugin", name, "store", c.name, "version", c.version, "leases", c.leases)
	return c, nil
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
	c := newClient(peer, peer, pb.NewRunStateStoreClient(conn), nil)
	if err := c.open(ctx, config); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func newClient(name, peer string, rpc pb.RunStateStoreClient, proc *goplugin.Client) *Client {
	c := &Client{name: name, peer: peer, rpc: rpc, proc: proc, exited: make(chan struct{})}
	c.life, c.end = context.WithCancel(context.Background())
	if proc != nil {
		c.watching.Add(1)
		go c.watch()
	}
	return c
}

// watch notices the plugin process exiting and ends every call in flight.
func (c *Client) watch() {
	defer c.watching.Done()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.life.Done():
			return
		case <-t.C:
			if c.proc.Exited() {
				close(c.exited)
				c.end()
				return
			}
		}
	}
}

func (c *Client) dead() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

func (c *Client) open(ctx context.Context, config map[string]string) error {
	resp, err := c.rpc.Open(ctx, &pb.OpenRequest{Config: config})
	if err != nil {
		return c.err(ctx, err)
	}
	if resp.Name != "" {
		c.name = resp.Name
	}
	c.version, c.leases = resp.Version, resp.Leases
	return nil
}

// Leases reports whether the plugin's store implements spec.LeaseStore.
func (c *Client) Leases() bool { return c.leases }

// Name and Version are what the plugin reported about its store.
func (c *Client) Name() string    { return c.name }
func (c *Client) Version() string { return c.version }

// Store returns the plugin's store: a spec.Store when it has leases,
// otherwise only a spec.RunStateStore. It is the one way to the store.
func (c *Client) Store() spec.RunStateStore {
	if c.leases {
		return driver.Checked(remote{c})
	}
	return driver.Checked(runOnly{remote{c}})
}

// runOnly shows only the RunStateStore methods of a plugin whose store has
// no leases: embedding the interface promotes nothing else.
type runOnly struct{ spec.RunStateStore }

// Close stops the plugin process (gracefully, so that it closes its store)
// and ends the client; later calls return spec.ErrUnavailable.
func (c *Client) Close() error {
	c.end()
	c.watching.Wait()
	if c.proc != nil {
		c.proc.Kill()
	}
	return nil
}

// call ties ctx to the client's life, so that a call in flight ends when
// the plugin process exits.
func (c *Client) call(ctx context.Context) (context.Context, func(), error) {
	if c.dead() {
		return nil, nil, spec.Unavailable(c.peer+" has exited", nil)
	}
	if c.life.Err() != nil {
		return nil, nil, spec.Unavailable(c.peer+" is closed", nil)
	}
	ctx2, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel)
	return ctx2, func() { stop(); cancel() }, nil
}

// err turns a call's failure into the contract's error. ctx is the caller's.
func (c *Client) err(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && (c.dead() || c.life.Err() != nil) {
		return spec.Unavailable(c.peer+" has exited", err)
	}
	return fromStatus(err, c.peer, c.dead)
}

// do runs one call against the plugin.
func do[T any](c *Client, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var zero T
	cctx, done, err := c.call(ctx)
	if err != nil {
		return zero, err
	}
	defer done()
	out, err := f(cctx)
	if err != nil {
		return zero, c.err(ctx, err)
	}
	return out, nil
}

// CreateRun implements spec.RunStateStore.
func (rs remote) CreateRun(ctx context.Context, p spec.CreateRunParams) (spec.RunSnapshot, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Run, error) { return rs.c.rpc.CreateRun(ctx, createPB(p)) })
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return fromRun(r), nil
}

// UpdateRun implements spec.RunStateStore.
func (rs remote) UpdateRun(ctx context.Context, p spec.UpdateRunParams) (spec.RunSnapshot, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Run, error) { return rs.c.rpc.UpdateRun(ctx, updatePB(p)) })
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return fromRun(r), nil
}

// GetRun implements spec.RunStateStore.
func (rs remote) GetRun(ctx context.Context, runID string) (spec.RunSnapshot, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Run, error) {
		return rs.c.rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	})
	if err != nil {
		return spec.RunSnapshot{}, err
	}
	return fromRun(r), nil
}

// ListRuns implements spec.RunStateStore.
func (rs remote) ListRuns(ctx context.Context, p spec.ListRunsParams) (spec.RunPage, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.RunPage, error) {
		return rs.c.rpc.ListRuns(ctx, &pb.ListRunsRequest{Statuses: p.Statuses, WorkflowName: p.WorkflowName, Labels: p.Labels,
			CreatedFrom: ts(p.CreatedFrom), CreatedBefore: ts(p.CreatedBefore), Limit: int64(p.Limit), Cursor: p.Cursor})
	})
	if err != nil {
		return spec.RunPage{}, err
	}
	return fromRunPage(r), nil
}

// ListAuditEvents implements spec.RunStateStore.
func (rs remote) ListAuditEvents(ctx context.Context, p spec.ListAuditParams) (spec.AuditPage, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.AuditPage, error) {
		return rs.c.rpc.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{RunId: p.RunID, AfterSeq: p.AfterSeq, Limit: int64(p.Limit)})
	})
	if err != nil {
		return spec.AuditPage{}, err
	}
	out := spec.AuditPage{More: r.More}
	for _, e := range r.Events {
		out.Events = append(out.Events, fromEvent(e))
	}
	return out, nil
}

// ClaimRun implements spec.LeaseStore.
func (rs remote) ClaimRun(ctx context.Context, p spec.ClaimRunParams) (spec.Claim, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Claim, error) {
		return rs.c.rpc.ClaimRun(ctx, &pb.ClaimRunRequest{RunId: p.RunID, Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Statuses: p.Statuses})
	})
	if err != nil {
		return spec.Claim{}, err
	}
	return fromClaim(r), nil
}

// ClaimNextRun implements spec.LeaseStore.
func (rs remote) ClaimNextRun(ctx context.Context, p spec.ClaimNextParams) (spec.Claim, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Claim, error) {
		return rs.c.rpc.ClaimNextRun(ctx, &pb.ClaimNextRunRequest{Owner: ownerPB(p.Owner), Ttl: durationpb.New(p.TTL), Filter: filterPB(p.Filter)})
	})
	if err != nil {
		return spec.Claim{}, err
	}
	return fromClaim(r), nil
}

// RenewLease implements spec.LeaseStore.
func (rs remote) RenewLease(ctx context.Context, p spec.RenewLeaseParams) (spec.Lease, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Lease, error) {
		return rs.c.rpc.RenewLease(ctx, &pb.RenewLeaseRequest{RunId: p.RunID, Token: p.Token, Ttl: durationpb.New(p.TTL)})
	})
	if err != nil {
		return spec.Lease{}, err
	}
	return fromLease(r), nil
}

// ReleaseLease implements spec.LeaseStore.
func (rs remote) ReleaseLease(ctx context.Context, p spec.ReleaseLeaseParams) error {
	_, err := do(rs.c, ctx, func(ctx context.Context) (*pb.ReleaseLeaseResponse, error) {
		return rs.c.rpc.ReleaseLease(ctx, &pb.ReleaseLeaseRequest{RunId: p.RunID, Token: p.Token})
	})
	return err
}

// ListRunnableRuns implements spec.LeaseStore.
func (rs remote) ListRunnableRuns(ctx context.Context, p spec.ListRunnableParams) (spec.RunPage, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.RunPage, error) {
		return rs.c.rpc.ListRunnableRuns(ctx, &pb.ListRunnableRunsRequest{Filter: filterPB(p.Filter), Limit: int64(p.Limit), Cursor: p.Cursor})
	})
	if err != nil {
		return spec.RunPage{}, err
	}
	return fromRunPage(r), nil
}

// GetLease implements spec.LeaseReader.
func (rs remote) GetLease(ctx context.Context, runID string) (spec.Lease, error) {
	r, err := do(rs.c, ctx, func(ctx context.Context) (*pb.Lease, error) {
		return rs.c.rpc.GetLease(ctx, &pb.GetRunRequest{RunId: runID})
	})
	if err != nil {
		return spec.Lease{}, err
	}
	return fromLease(r), nil
}

// Redacted returns config with secret values replaced, for logs and
// reports: the keys listed in secret, and those whose names say so (dsn,
// password, secret, token, credential, …).
func Redacted(config map[string]string, secret []string) map[string]string {
	return redact.Config(config, secret)
}
