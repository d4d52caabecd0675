package plugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runstate/runstate"
	pb "github.com/runstate/runstate/plugin/proto"
)

// Opener makes a plugin's store from the configuration the host sends
// (Options.Config). A store with a Close() error method is closed when
// the plugin shuts down.
type Opener func(ctx context.Context, config map[string]string) (runstate.RunStateStore, error)

// ServeOption adjusts Serve.
type ServeOption func(*serveConfig)

type serveConfig struct {
	name, version string
}

// WithName names the store and its version in the host's logs and reports.
func WithName(name, version string) ServeOption {
	return func(c *serveConfig) { c.name, c.version = name, version }
}

// Serve runs the plugin process for a store that needs no configuration.
// It is the one call a plugin's main makes:
//
//	func main() { plugin.Serve(mystore.New()) }
func Serve(store runstate.RunStateStore, opts ...ServeOption) {
	ServeOpener(func(context.Context, map[string]string) (runstate.RunStateStore, error) { return store, nil }, opts...)
}

// ServeOpener runs the plugin process for a store made from the host's
// configuration (a path, a DSN). It returns when the host shuts the plugin
// down, after closing the store.
func ServeOpener(open Opener, opts ...ServeOption) {
	// The host parses stderr lines of this shape as log entries.
	slog.SetDefault(slog.New(newPluginLogHandler(os.Stderr)))
	defer profileCPU()()
	srv := newServer("plugin", open, opts)
	go watchHost(os.Getppid(), time.Second/5, func() {
		// A host that was killed cannot stop its plugin: the plugin stops
		// itself, closing its store (and its connections), instead of
		// living on as an orphan.
		slog.Warn("the host process is gone; closing the store and exiting")
		srv.close()
		os.Exit(0)
	})
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{
			ProtocolVersion: {pluginName: &grpcPlugin{server: srv}},
		},
		GRPCServer: grpcServer,
	})
	srv.close()
}

// ProfileEnv names a directory where every plugin process writes a CPU
// profile of its life, cpu-<pid>.pprof, when it is set in the host's
// environment (plugins inherit it): the plugin's side of a call, for
// go tool pprof beside the host's own -cpuprofile.
const ProfileEnv = "RUNSTATE_PLUGIN_CPUPROFILE_DIR"

// profileCPU starts the CPU profile ProfileEnv asks for and returns what
// stops it; written when the host shuts the plugin down, not when it is
// killed.
func profileCPU() (stop func()) {
	dir := os.Getenv(ProfileEnv)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", os.Getpid())))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		slog.Warn("no CPU profile", "dir", dir, "error", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// watchHost calls gone once the process's parent is no longer host: when
// the host dies, the plugin is handed to another parent.
func watchHost(host int, every time.Duration, gone func()) {
	for range time.Tick(every) {
		if os.Getppid() != host {
			gone()
			return
		}
	}
}

// RegisterGRPC serves the store open makes on s, within this process, and
// returns the function that closes it. Plugins use Serve; RegisterGRPC is
// for in-process connections (tests, embedding).
func RegisterGRPC(s *grpc.Server, open Opener, opts ...ServeOption) (closeStore func()) {
	srv := newServer("in-process", open, opts)
	pb.RegisterRunStateStoreServer(s, srv)
	return srv.close
}

// RegisterShared serves store, which the caller has opened and will close,
// on s to any number of clients within or outside this process. Every
// client's Open succeeds without opening anything (its config is ignored).
func RegisterShared(s *grpc.Server, store runstate.RunStateStore, opts ...ServeOption) {
	srv := newServer("shared", nil, opts)
	srv.store = store
	srv.leases, _ = store.(runstate.LeaseStore)
	pb.RegisterRunStateStoreServer(s, srv)
}

func newServer(defaultName string, open Opener, opts []ServeOption) *server {
	cfg := serveConfig{name: defaultName, version: "unknown"}
	for _, o := range opts {
		o(&cfg)
	}
	return &server{open: open, cfg: cfg}
}

// windowSize fixes gRPC's flow-control windows. A fixed window turns off
// bandwidth-delay probing, whose PING frames cost the peer process a wakeup.
const windowSize = 4 << 20

// grpcServer is go-plugin's default server with calls served by long-lived
// worker goroutines instead of one new goroutine per call, which saves a
// handoff on every call.
func grpcServer(opts []grpc.ServerOption) *grpc.Server {
	return goplugin.DefaultGRPCServer(append(opts, grpc.NumStreamWorkers(uint32(max(runtime.GOMAXPROCS(0), 2))),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize)))
}

// server is the gRPC service over the plugin's store.
type server struct {
	pb.UnimplementedRunStateStoreServer
	open Opener // nil for a shared store, which its owner opened and closes
	cfg  serveConfig

	mu     sync.RWMutex
	store  runstate.RunStateStore
	leases runstate.LeaseStore
}

func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.store.(io.Closer); ok {
		if err := c.Close(); err != nil {
			slog.Error("closing the store", "error", err)
		}
	}
	s.store, s.leases = nil, nil
}

func (s *server) Open(ctx context.Context, r *pb.OpenRequest) (*pb.OpenResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil { // shared: Open only reports the store
		return &pb.OpenResponse{Name: s.cfg.name, Version: s.cfg.version, Leases: s.leases != nil}, nil
	}
	if s.store != nil {
		return nil, toStatus(runstate.InvalidArgument("open", "the plugin's store is open already"))
	}
	store, err := s.open(ctx, r.Config)
	if err != nil {
		return nil, toStatus(err)
	}
	s.store = store
	s.leases, _ = store.(runstate.LeaseStore)
	return &pb.OpenResponse{Name: s.cfg.name, Version: s.cfg.version, Leases: s.leases != nil}, nil
}

// get returns the store, or an error when the host has not opened it.
func (s *server) get() (runstate.RunStateStore, runstate.LeaseStore, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.store == nil {
		return nil, nil, toStatus(runstate.Unavailable("the plugin's store is not open: the host must call Open first", nil))
	}
	return s.store, s.leases, nil
}

func (s *server) leaseStore() (runstate.LeaseStore, error) {
	_, l, err := s.get()
	if err == nil && l == nil {
		err = toStatus(runstate.InvalidArgument("leases", "the plugin's store does not implement runstate.LeaseStore"))
	}
	return l, err
}

func (s *server) CreateRun(ctx context.Context, r *pb.CreateRunRequest) (*pb.Run, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	run, err := st.CreateRun(ctx, fromCreate(r))
	return runPB(run), toStatus(err)
}

func (s *server) UpdateRun(ctx context.Context, r *pb.UpdateRunRequest) (*pb.Run, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	run, err := st.UpdateRun(ctx, fromUpdate(r))
	return runPB(run), toStatus(err)
}

func (s *server) GetRun(ctx context.Context, r *pb.GetRunRequest) (*pb.Run, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	run, err := st.GetRun(ctx, r.RunId)
	return runPB(run), toStatus(err)
}

func (s *server) ListRuns(ctx context.Context, r *pb.ListRunsRequest) (*pb.RunPage, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	page, err := st.ListRuns(ctx, runstate.ListRunsParams{Statuses: r.Statuses, WorkflowName: r.WorkflowName, Labels: emptyNil(r.Labels),
		CreatedFrom: fromTS(r.CreatedFrom), CreatedBefore: fromTS(r.CreatedBefore), Limit: int(r.Limit), Cursor: r.Cursor})
	return runPagePB(page), toStatus(err)
}

func (s *server) ListAuditEvents(ctx context.Context, r *pb.ListAuditEventsRequest) (*pb.AuditPage, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	page, err := st.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: r.RunId, AfterSeq: r.AfterSeq, Limit: int(r.Limit)})
	out := &pb.AuditPage{More: page.More}
	for _, e := range page.Events {
		out.Events = append(out.Events, eventPB(e))
	}
	return out, toStatus(err)
}

func (s *server) ClaimRun(ctx context.Context, r *pb.ClaimRunRequest) (*pb.Claim, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	c, err := ls.ClaimRun(ctx, runstate.ClaimRunParams{RunID: r.RunId, Owner: fromOwner(r.Owner), TTL: fromDuration(r.Ttl), Statuses: r.Statuses})
	return claimPB(c), toStatus(err)
}

func (s *server) ClaimNextRun(ctx context.Context, r *pb.ClaimNextRunRequest) (*pb.Claim, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	c, err := ls.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: fromOwner(r.Owner), TTL: fromDuration(r.Ttl), Filter: fromFilter(r.Filter)})
	return claimPB(c), toStatus(err)
}

func (s *server) RenewLease(ctx context.Context, r *pb.RenewLeaseRequest) (*pb.Lease, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	l, err := ls.RenewLease(ctx, runstate.RenewLeaseParams{RunID: r.RunId, Token: r.Token, TTL: fromDuration(r.Ttl)})
	return leasePB(l), toStatus(err)
}

func (s *server) ReleaseLease(ctx context.Context, r *pb.ReleaseLeaseRequest) (*pb.ReleaseLeaseResponse, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	return &pb.ReleaseLeaseResponse{}, toStatus(ls.ReleaseLease(ctx, runstate.ReleaseLeaseParams{RunID: r.RunId, Token: r.Token}))
}

func (s *server) ListRunnableRuns(ctx context.Context, r *pb.ListRunnableRunsRequest) (*pb.RunPage, error) {
	ls, err := s.leaseStore()
	if err != nil {
		return nil, err
	}
	page, err := ls.ListRunnableRuns(ctx, runstate.ListRunnableParams{Filter: fromFilter(r.Filter), Limit: int(r.Limit), Cursor: r.Cursor})
	return runPagePB(page), toStatus(err)
}

// newPluginLogHandler writes slog records as the JSON lines go-plugin's
// host reads from a plugin's stderr (@level, @message, @timestamp).
func newPluginLogHandler(w io.Writer) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			a.Key = "@timestamp"
		case slog.LevelKey:
			a.Key, a.Value = "@level", slog.StringValue(strings.ToLower(a.Value.String()))
		case slog.MessageKey:
			a.Key = "@message"
		}
		return a
	}})
}

// grpcPlugin connects the service to go-plugin on both sides.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	server *server
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterRunStateStoreServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewRunStateStoreClient(c), nil
}

// CheckConfig checks a plugin's configuration: every required key is set,
// and no key is unknown. Openers call it first.
func CheckConfig(config map[string]string, required, optional []string) error {
	for _, k := range required {
		if config[k] == "" {
			return runstate.InvalidArgument(k, "is required in the plugin configuration")
		}
	}
	for k := range config {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) {
			return runstate.InvalidArgument(k, "is not a configuration key of this plugin (it knows %s)", strings.Join(append(slices.Clone(required), optional...), ", "))
		}
	}
	return nil
}

// GetLease answers who holds a run's lease, when the store can tell
// (runstate.LeaseReader); UNIMPLEMENTED otherwise.
func (s *server) GetLease(ctx context.Context, r *pb.GetRunRequest) (*pb.Lease, error) {
	st, _, err := s.get()
	if err != nil {
		return nil, err
	}
	reader, ok := st.(runstate.LeaseReader)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "the store does not tell who holds a lease (runstate.LeaseReader)")
	}
	l, err := reader.GetLease(ctx, r.RunId)
	return leasePB(l), toStatus(err)
}
