// Command testplugin is a memory-store plugin for the plugin package's own
// tests. RUNSTATE_TESTPLUGIN selects a behaviour:
//
//	slow     GetRun of run "block" waits until its context ends
//	crash    exits at once, before the handshake
//	version2 speaks protocol version 2
//	broken   ignores expected versions: a store the suite must fail
//	scratch  opens once per marker file (config "marker"), as a scratch
//	         database does: started again on it, Open logs and refuses
//	embedded serves the kit's store embedded in a struct of the
//	         integrator's own that adds Close, as docs/plugins.md shows
//
// It logs one line at start, to show that plugin logs reach the host.
package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/driver"
	"github.com/runstate/runstate/plugin"
)

// integratorsStore is how an integrator gives the kit's store a Close of
// their own: a struct that embeds it.
type integratorsStore struct {
	driver.Store
	close func() error
}

func (s integratorsStore) Close() error { return s.close() }

type slowStore struct{ *memory.Store }

func (s slowStore) GetRun(ctx context.Context, id string) (runstate.RunSnapshot, error) {
	if id == "block" {
		<-ctx.Done()
		return runstate.RunSnapshot{}, ctx.Err()
	}
	return s.Store.GetRun(ctx, id)
}

// ignoresVersion writes whatever version the caller expected.
type ignoresVersion struct{ *memory.Store }

func (s ignoresVersion) UpdateRun(ctx context.Context, p runstate.UpdateRunParams) (runstate.RunSnapshot, error) {
	if cur, err := s.Store.GetRun(ctx, p.RunID); err == nil {
		p.ExpectedVersion = cur.Version
	}
	return s.Store.UpdateRun(ctx, p)
}

func main() {
	switch os.Getenv("RUNSTATE_TESTPLUGIN") {
	case "crash":
		os.Exit(3)
	case "broken":
		plugin.ServeOpener(func(ctx context.Context, _ map[string]string) (runstate.RunStateStore, error) {
			store, err := memory.Open(ctx, memory.Options{})
			return ignoresVersion{store}, err
		}, plugin.WithName("broken", "test"))
		return
	case "scratch":
		plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
			f, err := os.OpenFile(cfg["marker"], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if errors.Is(err, fs.ErrExist) {
				slog.Error("scratch place exists-marker-in-log", "marker", cfg["marker"])
				return nil, runstate.InvalidArgument("marker", "names a scratch place that exists")
			}
			if err != nil {
				return nil, err
			}
			f.Close()
			return memory.Open(ctx, memory.Options{})
		}, plugin.WithName("scratch", "test"))
		return
	case "embedded":
		plugin.ServeOpener(func(ctx context.Context, _ map[string]string) (runstate.RunStateStore, error) {
			m, err := memory.Open(ctx, memory.Options{Clock: plugin.TestClock(ctx)})
			if err != nil {
				return nil, err
			}
			return integratorsStore{Store: m.Store, close: m.Close}, nil
		}, plugin.WithName("embedded", "test"))
		return
	case "version2":
		hs := plugin.Handshake
		hs.ProtocolVersion = 2
		goplugin.Serve(&goplugin.ServeConfig{HandshakeConfig: hs,
			VersionedPlugins: map[int]goplugin.PluginSet{2: {"runstate": nextProtocol{}}}, GRPCServer: goplugin.DefaultGRPCServer})
		return
	}
	plugin.ServeOpener(func(ctx context.Context, cfg map[string]string) (runstate.RunStateStore, error) {
		slog.Info("test plugin opening its store", "marker", "hello-from-plugin", "config_keys", len(cfg))
		store, err := memory.Open(ctx, memory.Options{})
		return slowStore{store}, err
	}, plugin.WithName("testplugin", "test"))
}

// nextProtocol stands for the store service of a later protocol version,
// served over gRPC like every runstate protocol.
type nextProtocol struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (nextProtocol) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error { return nil }

func (nextProtocol) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}
