// Package plugintest runs the conformance suite through the plugin
// protocol: against a plugin binary in a child process per check, or
// against a store served over an in-memory gRPC connection.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/memory"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/internal/testsupport/gocmd"
	"github.com/runstate/runstate/internal/testsupport/proctest"
	"github.com/runstate/runstate/internal/tracing"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/protocol"
)

// Build compiles the packages (import paths of plugin mains) into dir and
// returns the binaries' paths by package.
func Build(dir string, pkgs ...string) (map[string]string, error) {
	out := map[string]string{}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	if b, err := gocmd.Command(args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building plugins: %v\n%s", err, b)
	}
	for _, p := range pkgs {
		out[p] = filepath.Join(dir, filepath.Base(p))
	}
	return out, nil
}

// Binaries builds plugin mains once per test binary, on first use, into a
// directory that Cleanup (called from TestMain) removes.
type Binaries struct {
	pkgs  []string
	once  sync.Once
	dir   string
	paths map[string]string
	err   error
}

// NewBinaries prepares to build pkgs.
func NewBinaries(pkgs ...string) *Binaries { return &Binaries{pkgs: pkgs} }

// Path returns the binary of pkg, building all of them the first time.
func (b *Binaries) Path(t testing.TB, pkg string) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "runstate-plugins-*"); b.err == nil {
			b.paths, b.err = Build(b.dir, b.pkgs...)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	p, ok := b.paths[pkg]
	if !ok {
		t.Fatalf("%s is not among the binaries built", pkg)
	}
	return p
}

// Cleanup removes the binaries.
func (b *Binaries) Cleanup() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// Config makes a fresh configuration for one check (a new directory, a new
// database) and the function that removes it.
type Config func(ctx context.Context) (config map[string]string, cleanup func(), err error)

// NoConfig is the Config of a plugin that takes none.
func NoConfig(context.Context) (map[string]string, func(), error) { return nil, func() {}, nil }

// ProcessTarget runs each check against a fresh child process of the
// plugin at path. With caps.SecondHandle, OpenHandle starts another process
// of the plugin on the same configuration: a second worker sharing the store.
// With caps.ControlledClock every process is opened for certification
// (plugin.Options.TestClock), its store's clock stopped at ClockStart, and
// Advance moves the clock of each alike; the plugin's Opener must give its
// store plugin.TestClock (SchemeOpener does), as DescribeStore tells.
// Without it the processes keep real time.
// With conformance.FaultRestart in caps.Faults (the only fault it causes)
// the harness kills the plugin processes (SIGKILL) for the FAULT rules
// and its clients start them again (plugin.Options.Relaunch), at the test
// clock's time: declare it for a store whose data outlives its process.
func ProcessTarget(name, version, path string, caps conformance.Capabilities, config Config) conformance.Target {
	return ProcessTargetWith(ProcessParams{Name: name, Version: version, Path: path, Caps: caps, Config: config})
}

// ProcessParams are ProcessTargetWith's: ProcessTarget's, and the backend.
type ProcessParams struct {
	Name, Version string
	// Path is the plugin binary.
	Path   string
	Caps   conformance.Capabilities
	Config Config
	// Backend, when set, is the host:port of the plugin's own network
	// backend (its database server). Every check starts a
	// conformance/faultproxy in front of it, ProxyPlaceholder in the
	// configuration's values becomes the proxy's address, so that the
	// plugin reaches its backend through the proxy, and the harness causes
	// the proxy's faults (faultproxy.Faults) that Caps.Faults declares.
	Backend string
}

// ProxyPlaceholder in a configuration value stands for the address of the
// fault proxy in front of the plugin's backend (ProcessParams.Backend).
const ProxyPlaceholder = "{{proxy}}"

// ProcessTargetWith is ProcessTarget with a fault proxy in front of the
// plugin's backend when p.Backend is set.
func ProcessTargetWith(p ProcessParams) conformance.Target {
	name, version, path, caps, config := p.Name, p.Version, p.Path, p.Caps, p.Config
	var leaseTTL time.Duration // the suite's default
	if !caps.ControlledClock {
		// Real time runs on while a check works through a process
		// boundary: a lease of a second outlives the check's calls on a
		// loaded machine, where 300ms expired in the middle of LEASE-010.
		leaseTTL = time.Second
	}
	return conformance.Target{
		Name:         name + " (plugin process)",
		StoreVersion: version,
		Capabilities: caps,
		LeaseTTL:     leaseTTL,
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			for _, f := range caps.Faults {
				if f != conformance.FaultRestart && (p.Backend == "" || !slices.Contains(faultproxy.Faults, f)) {
					return nil, fmt.Errorf("a plugin process target causes no fault %q: restart, and with a backend behind a proxy %v", f, faultproxy.Faults)
				}
			}
			cfg, cleanup, err := config(ctx)
			if err != nil {
				return nil, err
			}
			proxy, err := proxyBackend(p.Backend, cfg)
			if err != nil {
				cleanup()
				return nil, err
			}
			if proxy != nil {
				dropConfig := cleanup
				cleanup = func() { dropConfig(); proxy.Close() }
			}
			h := &processHarness{path: path, cfg: cfg, cleanup: cleanup, relaunch: slices.Contains(caps.Faults, conformance.FaultRestart), proxy: proxy}
			if caps.ControlledClock {
				h.clock = ClockStart
			}
			c, err := h.start(ctx)
			if err != nil {
				cleanup()
				return nil, err
			}
			h.first = c
			return h, nil
		},
	}
}

// ClockStart is where the test clock of a process target with a
// controlled clock starts, as conformance targets in one process start
// their manual clocks.
var ClockStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// proxyBackend starts a fault proxy in front of backend (none when empty)
// and puts its address in place of ProxyPlaceholder in cfg's values.
func proxyBackend(backend string, cfg map[string]string) (*faultproxy.Proxy, error) {
	if backend == "" {
		return nil, nil
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(cfg)), func(v string) bool { return strings.Contains(v, ProxyPlaceholder) }) {
		return nil, fmt.Errorf("the plugin's backend %s is behind a fault proxy, but no configuration value names %s: the plugin would reach its backend directly, and no fault would reach it", backend, ProxyPlaceholder)
	}
	proxy, err := faultproxy.Start(backend)
	if err != nil {
		return nil, err
	}
	for k, v := range cfg {
		cfg[k] = strings.ReplaceAll(v, ProxyPlaceholder, proxy.Addr())
	}
	return proxy, nil
}

type processHarness struct {
	path     string
	cfg      map[string]string
	cleanup  func()
	relaunch bool
	proxy    *faultproxy.Proxy // in front of the plugin's backend; nil: none
	killed   bool              // a restart fault killed the plugin processes
	first    *plugin.Client
	// mu guards clients and clock: a check may open a handle while
	// another goroutine of it advances the clock.
	mu      sync.Mutex
	clients []*plugin.Client
	// clock is the test clock's time, where a process opened now starts;
	// zero keeps real time.
	clock time.Time
}

var quiet = slog.New(slog.DiscardHandler)

func (h *processHarness) start(ctx context.Context) (*plugin.Client, error) {
	// Under mu, so that the clock does not move between this process's
	// start and its joining the clients that Advance moves.
	h.mu.Lock()
	defer h.mu.Unlock()
	// A killed plugin stays down until the fault ends: started again
	// after a pause longer than the fault checks let a fault last.
	c, err := plugin.Open(ctx, h.path, plugin.Options{Config: h.cfg, Logger: quiet, Relaunch: h.relaunch, RelaunchPause: relaunchPause, TestClock: h.clock})
	if err != nil {
		return nil, err
	}
	if !h.clock.IsZero() && !c.TestClock() {
		c.Close()
		return nil, fmt.Errorf("the plugin %s serves no test clock that its store reads: its Opener must give the store plugin.TestClock(ctx) (plugin.SchemeOpener does); or run it with real time", h.path)
	}
	h.clients = append(h.clients, c)
	return c, nil
}

// all returns the clients opened so far.
func (h *processHarness) all() []*plugin.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.clients)
}

// relaunchPause is longer than a fault check's fault (1.5 s) and its
// calls' deadline and grace.
const relaunchPause = 3 * time.Second

// StartFault kills every plugin process of the check (a restart), or
// disturbs the path to the plugin's backend (the proxy's faults).
func (h *processHarness) StartFault(ctx context.Context, p conformance.FaultParams) error {
	if p.Fault != conformance.FaultRestart && h.proxy != nil {
		return h.proxy.StartFault(ctx, p)
	}
	if p.Fault != conformance.FaultRestart || !h.relaunch {
		return fmt.Errorf("a plugin process harness causes no fault %q", p.Fault)
	}
	h.killed = true
	var errs []error
	for _, c := range h.all() {
		errs = append(errs, c.Kill())
	}
	return errors.Join(errs...)
}

// EndFault heals the path to the backend, and after a restart waits until
// every client has started its plugin again.
func (h *processHarness) EndFault(ctx context.Context) error {
	if h.proxy != nil {
		h.proxy.EndFault(ctx)
	}
	if !h.killed {
		return nil
	}
	h.killed = false
	var stores []runstate.RunStateStore
	for _, c := range h.all() {
		stores = append(stores, c.Store())
	}
	return proctest.AwaitAnswers(ctx, "the plugin", stores...)
}

func (h *processHarness) Store() runstate.RunStateStore { return h.first.Store() }

// Announced is what the first plugin process said of its store when
// opened (its protocol version and features), for reports.
func (h *processHarness) Announced() protocol.StoreInfo { return h.first.Info() }

// RunWatcher implements conformance.RunWatching.
func (h *processHarness) RunWatcher() runstate.RunWatcher { return h.first.RunWatcher() }
func (h *processHarness) OpenHandle(ctx context.Context) (runstate.RunStateStore, error) {
	c, err := h.start(ctx)
	if err != nil {
		return nil, err
	}
	return c.Store(), nil
}

// Advance moves the test clock of every plugin process of the check by d.
// A process that does not take it breaks the check (the suite turns the
// panic into the check's error).
func (h *processHarness) Advance(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clock.IsZero() {
		panic("the plugin processes keep real time: the target declares no controlled clock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range h.clients {
		if err := c.AdvanceClock(ctx, d); err != nil {
			panic(fmt.Sprintf("moving the plugin's test clock by %v: %v", d, err))
		}
	}
	h.clock = h.clock.Add(d)
}

func (h *processHarness) Close(context.Context) error {
	for _, c := range h.all() {
		c.Close()
	}
	h.cleanup()
	return nil
}

// InProcessTarget serves a fresh memory store (with a manual clock) over an
// in-memory gRPC connection per check: the whole protocol without a child
// process, fast enough for every test run. It declares leases, which the
// served memory store implements (CAP-001); a second handle on the same
// store (CAP-002); and the manual clock the store reads (CAP-003).
func InProcessTarget() conformance.Target {
	return conformance.Target{
		Name:         "memory (in-process gRPC)",
		StoreVersion: "plugin protocol " + fmt.Sprint(plugin.ProtocolVersion),
		Capabilities: conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true},
		NewHarness: func(ctx context.Context) (conformance.Harness, error) {
			clock := conformance.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			store, err := memory.Open(ctx, memory.Options{Clock: clock})
			if err != nil {
				return nil, err
			}
			h, err := ServeInProcess(ctx, store)
			if err != nil {
				return nil, err
			}
			return &inProcessHarness{InProcess: h, clock: clock}, nil
		},
	}
}

// InProcess is a store served over an in-memory gRPC connection.
type InProcess struct {
	Client     *plugin.Client
	srv        *grpc.Server
	closeStore func()
	conn       *grpc.ClientConn
}

// ServeInProcess serves store over an in-memory gRPC connection.
func ServeInProcess(ctx context.Context, store runstate.RunStateStore) (*InProcess, error) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(tracing.ServerOption()) // the handlers of a plugin's server and host
	closeStore := plugin.RegisterGRPC(srv, func(context.Context, map[string]string) (runstate.RunStateStore, error) { return store, nil })
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()), tracing.DialOption())
	if err != nil {
		srv.Stop()
		return nil, err
	}
	c, err := plugin.NewInProcess(ctx, conn, nil)
	if err != nil {
		conn.Close()
		srv.Stop()
		return nil, err
	}
	return &InProcess{Client: c, srv: srv, closeStore: closeStore, conn: conn}, nil
}

// Close ends the connection and the server and closes the store.
func (p *InProcess) Close() error {
	p.Client.Close()
	p.conn.Close()
	p.srv.Stop()
	p.closeStore()
	return nil
}

type inProcessHarness struct {
	*InProcess
	clock *conformance.ManualClock
}

func (h *inProcessHarness) Store() runstate.RunStateStore { return h.Client.Store() }

// Announced is what the served store's service said of it when opened.
func (h *inProcessHarness) Announced() protocol.StoreInfo { return h.Client.Info() }

// RunWatcher implements conformance.RunWatching.
func (h *inProcessHarness) RunWatcher() runstate.RunWatcher { return h.Client.RunWatcher() }
func (h *inProcessHarness) OpenHandle(context.Context) (runstate.RunStateStore, error) {
	return h.Client.Store(), nil
}
func (h *inProcessHarness) Advance(d time.Duration)     { h.clock.Advance(d) }
func (h *inProcessHarness) Close(context.Context) error { return h.InProcess.Close() }

// Describe starts the plugin once with a configuration from config and
// returns what it says of its store (DescribeStore says more).
func Describe(ctx context.Context, path string, config Config) (name, version string, leases bool, err error) {
	d, err := DescribeStore(ctx, path, config)
	return d.Name, d.Version, d.Leases, err
}

// Description is what a plugin says of its store.
type Description struct {
	Name, Version string
	// Leases: the store implements runstate.LeaseStore.
	Leases bool
	// TestClock: opened for certification, the plugin's store reads the
	// test clock, so that a target may declare a controlled clock.
	TestClock bool
}

// DescribeStore starts the plugin once, for certification (with a test
// clock), with a configuration from config, and returns what it says of
// its store.
func DescribeStore(ctx context.Context, path string, config Config) (Description, error) {
	cfg, cleanup, err := config(ctx)
	if err != nil {
		return Description{}, err
	}
	defer cleanup()
	c, err := plugin.Open(ctx, path, plugin.Options{Config: cfg, Logger: quiet, TestClock: ClockStart})
	if err != nil {
		return Description{}, err
	}
	defer c.Close()
	return Description{Name: c.Name(), Version: c.Version(), Leases: c.Leases(), TestClock: c.TestClock()}, nil
}

// TempDirConfig gives each check a fresh directory under base as key.
func TempDirConfig(base, key string) Config {
	return func(context.Context) (map[string]string, func(), error) {
		dir, err := os.MkdirTemp(base, "runstate-plugin-*")
		if err != nil {
			return nil, nil, err
		}
		return map[string]string{key: dir}, func() { os.RemoveAll(dir) }, nil
	}
}
