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
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/otelstore"
	"github.com/runstate/runstate/protocol"
	"github.com/runstate/runstate/protocol/pb"
)

// Opener makes a plugin's store from the configuration the host sends
// (Options.Config). A store with a Close() error method is closed when
// the plugin shuts down. It is protocol.Opener.
type Opener = protocol.Opener

// ServeOption adjusts Serve.
type ServeOption func(*serveConfig)

type serveConfig struct {
	name, version string
}

// WithName names the store and its version in the host's logs and reports.
func WithName(name, version string) ServeOption {
	return func(c *serveConfig) { c.name, c.version = name, version }
}

// configOf applies opts to a store named defaultName.
func configOf(defaultName string, opts []ServeOption) serveConfig {
	cfg := serveConfig{name: defaultName}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
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
// down, after closing the store. Run by hand with --version (or version;
// --format json), the binary prints the kit's and the protocol's versions,
// the store's name and version (WithName) and the protocol's features,
// and exits.
func ServeOpener(open Opener, opts ...ServeOption) {
	// Answered before go-plugin's handshake, which tells a person who runs
	// the binary from a terminal only that it is a plugin, and exits.
	if code, asked := answerVersion(os.Args[1:], configOf("plugin", opts), os.Stdout, os.Stderr); asked {
		os.Exit(code)
	}
	// The host parses stderr lines of this shape as log entries.
	slog.SetDefault(slog.New(newPluginLogHandler(os.Stderr, levelOfEnv())))
	defer profileCPU()()
	defer traceStore(&open, opts)()
	clock, err := protocol.TestClockOfEnv(TestClockEnv)
	if err != nil {
		slog.Error("the plugin cannot start", "error", err)
		os.Exit(1)
	}
	srv := newService("plugin", open, opts, clock)
	go watchHost(os.Getppid(), time.Second/5, func() {
		// A host that was killed cannot stop its plugin: the plugin stops
		// itself, closing its store (and its connections), instead of
		// living on as an orphan.
		slog.Warn("the host process is gone; closing the store and exiting")
		srv.Close()
		os.Exit(0)
	})
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{
			ProtocolVersion: {pluginName: &grpcPlugin{service: srv}},
		},
		GRPCServer: grpcServer,
	})
	srv.Close()
}

// traceStore turns tracing on as the OTEL_* environment (which plugins
// inherit from their host) says (docs/tracing.md) and then traces the
// store *open makes, its calls the children of the host's calls; it
// returns what exports the spans left when the plugin ends.
func traceStore(open *Opener, opts []ServeOption) (shutdown func()) {
	cfg := configOf("plugin", opts)
	t, err := tracing.Setup(context.Background(), tracing.SetupParams{Service: "runstate-plugin-" + cfg.name})
	if err != nil {
		slog.Error("tracing stays off", "error", err)
	}
	if !t.Enabled {
		return func() {}
	}
	inner := *open
	*open = func(ctx context.Context, config map[string]string) (runstate.RunStateStore, error) {
		s, err := inner(ctx, config)
		if err != nil {
			return nil, err
		}
		return otelstore.Wrap(s, otelstore.Options{System: cfg.name}), nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		t.Shutdown(ctx)
	}
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
// for in-process connections (tests, embedding). Code that needs no
// ServeOption may use protocol.NewService instead.
func RegisterGRPC(s *grpc.Server, open Opener, opts ...ServeOption) (closeStore func()) {
	srv := newService("in-process", open, opts, nil)
	srv.Register(s)
	return srv.Close
}

// RegisterShared serves store, which the caller has opened and will close,
// on s to any number of clients within or outside this process. Every
// client's Open succeeds without opening anything (its config is ignored).
// It is protocol.NewService with ServiceOptions.Store.
func RegisterShared(s *grpc.Server, store runstate.RunStateStore, opts ...ServeOption) {
	cfg := configOf("shared", opts)
	protocol.NewService(protocol.ServiceOptions{Name: cfg.name, Version: cfg.version, Store: store}).Register(s)
}

// newService is the service of the store open makes, named by opts or
// defaultName; clock, when set, is the test clock it offers.
func newService(defaultName string, open Opener, opts []ServeOption, clock *protocol.TestClock) *protocol.Service {
	cfg := configOf(defaultName, opts)
	return protocol.NewService(protocol.ServiceOptions{Name: cfg.name, Version: cfg.version, Open: open, Clock: clock})
}

// windowSize fixes gRPC's flow-control windows. A fixed window turns off
// bandwidth-delay probing, whose PING frames cost the peer process a wakeup.
const windowSize = 4 << 20

// grpcServer is go-plugin's default server with calls served by long-lived
// worker goroutines instead of one new goroutine per call, which saves a
// handoff on every call.
func grpcServer(opts []grpc.ServerOption) *grpc.Server {
	return goplugin.DefaultGRPCServer(append(opts, grpc.NumStreamWorkers(uint32(max(runtime.GOMAXPROCS(0), 2))),
		grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize), tracing.ServerOption()))
}

// LogLevelEnv names the lowest level a plugin logs at: the host sets it
// to the level its own logger keeps, so that a plugin spends nothing on
// lines the host would drop (a debug line for every lease decision, say).
// Unset (a host of an earlier release): debug.
const LogLevelEnv = "RUNSTATE_PLUGIN_LOG_LEVEL"

// levelOfEnv is the level LogLevelEnv names, debug when unset or unknown.
func levelOfEnv() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv(LogLevelEnv))); err != nil {
		return slog.LevelDebug
	}
	return l
}

// lowestLevel is the lowest level log keeps.
func lowestLevel(log *slog.Logger) slog.Level {
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if log.Enabled(context.Background(), l) {
			return l
		}
	}
	return slog.LevelError
}

// hostTimestamp is the layout of go-plugin's log entry timestamps.
const hostTimestamp = "2006-01-02T15:04:05.000000Z07:00"

// newPluginLogHandler writes slog records of level and above as the JSON
// lines go-plugin's host reads from a plugin's stderr (@level, @message,
// @timestamp).
func newPluginLogHandler(w io.Writer, level slog.Level) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			// go-plugin's host reads a line as a log entry only with its
			// timestamp in exactly this layout; any other line it logs
			// whole, at debug, whatever the line's level.
			a.Key, a.Value = "@timestamp", slog.StringValue(a.Value.Time().Format(hostTimestamp))
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
	service *protocol.Service // nil on the host's side
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	p.service.Register(s)
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
