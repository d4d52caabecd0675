package plugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/adapters/etcd/etcdtest"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/internal/testsupport/etcdcluster"
	"github.com/runstate/runstate/internal/testsupport/pathsmoke"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
	"github.com/runstate/runstate/internal/testsupport/testlog"
	"github.com/runstate/runstate/internal/testsupport/watchtest"
	"github.com/runstate/runstate/plugin"
	"github.com/runstate/runstate/plugin/plugintest"
)

const (
	memoryPkg = "github.com/runstate/runstate/cmd/runstate-plugin-memory"
	badgerPkg = "github.com/runstate/runstate/cmd/runstate-plugin-badger"
	mysqlPkg  = "github.com/runstate/runstate/cmd/runstate-plugin-mysql"
	pgPkg     = "github.com/runstate/runstate/cmd/runstate-plugin-postgres"
	etcdPkg   = "github.com/runstate/runstate/cmd/runstate-plugin-etcd"
	testPkg   = "github.com/runstate/runstate/plugin/internal/testplugin"
	floorPkg  = "github.com/runstate/runstate/plugin/internal/floorserver"
)

var binaries = plugintest.NewBinaries(memoryPkg, badgerPkg, mysqlPkg, pgPkg, etcdPkg, testPkg, floorPkg)

func bin(t testing.TB, pkg string) string { return binaries.Path(t, pkg) }

func TestMain(m *testing.M) {
	if path := os.Getenv("RUNSTATE_TEST_PLUGIN_HOST"); path != "" {
		// A host process for TestAPluginDiesWithItsHost: it starts the
		// plugin, says its pid, and waits to be killed.
		c, err := plugin.Open(context.Background(), path, plugin.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		fmt.Println(c.PID())
		select {}
	}
	code := m.Run()
	binaries.Cleanup()
	os.Exit(code)
}

func TestConformanceInProcessGRPC(t *testing.T) {
	t.Parallel() // each suite has processes and databases of its own
	conformance.Run(t, conformance.Repeated(plugintest.InProcessTarget()))
}

// The reference plugins are opened for certification: their stores read
// a test clock that the harness moves (the controlled-clock rules run).
func TestConformanceMemoryPlugin(t *testing.T) {
	t.Parallel() // each suite has processes and databases of its own
	conformance.Run(t, conformance.Repeated(plugintest.ProcessTarget("memory", "builtin", bin(t, memoryPkg), conformance.Capabilities{Leases: true, ControlledClock: true}, plugintest.NoConfig)))
}

// A plugin process may keep real time too: the checks sleep through
// leases instead.
func TestConformanceMemoryPluginRealClock(t *testing.T) {
	t.Parallel() // each suite has processes and databases of its own
	conformance.Run(t, conformance.Repeated(plugintest.ProcessTarget("memory", "builtin", bin(t, memoryPkg), conformance.Capabilities{Leases: true}, plugintest.NoConfig)))
}

// restarts: the plugin process targets of stores whose data outlives the
// process are killed and started again for the FAULT rules.
var restarts = []conformance.Fault{conformance.FaultRestart}

func TestConformanceMySQLPlugin(t *testing.T) {
	srv := sqltest.MySQL.Find(t)
	path := bin(t, mysqlPkg)
	caps := conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true, Faults: restarts}
	conformance.Run(t, conformance.Repeated(plugintest.ProcessTarget("mysql", "mysql/innodb", path, caps, func(ctx context.Context) (map[string]string, func(), error) {
		name, err := srv.CreateDatabase(ctx)
		if err != nil {
			return nil, nil, err
		}
		// Pools are per process and the suite's packages share one server:
		// 16 connections per handle serve the 16 racing writers of CAS-003.
		return map[string]string{"dsn": srv.DSN(name), "max_open_conns": "16"}, func() { srv.DropDatabase(context.Background(), name) }, nil
	})))
}

// The other reference plugins serve their stores: the boundary's code is
// the one the memory and MySQL plugins prove with the whole suite, and
// each store proves it in-process; each binary runs the rules of
// internal/testsupport/pathsmoke, its data outliving a kill.
func TestTheBadgerPluginServesItsStore(t *testing.T) {
	t.Parallel() // each suite has processes and databases of its own
	conformance.Run(t, plugintest.ProcessTarget("badger", "badger/v4", bin(t, badgerPkg), conformance.Capabilities{Leases: true, ControlledClock: true, Faults: restarts},
		plugintest.TempDirConfig(t.TempDir(), "dir")), pathsmoke.Rules...)
}

func TestThePostgresPluginServesItsStore(t *testing.T) {
	t.Parallel() // each suite has processes and databases of its own
	srv := sqltest.Postgres.Find(t)
	caps := conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true, Faults: restarts}
	conformance.Run(t, plugintest.ProcessTarget("postgres", "postgres", bin(t, pgPkg), caps, func(ctx context.Context) (map[string]string, func(), error) {
		schema := srv.NewSchemaName()
		// Every handle names the schema; the first creates it, and the
		// check's end drops it.
		return map[string]string{"dsn": srv.DSN(), "schema": schema, "max_open_conns": "8", "notify_runs": "true"},
			func() { srv.DropSchema(context.Background(), schema) }, nil
	}), append(pathsmoke.Rules, "WATCH-001", "WATCH-002")...)
}

func TestTheEtcdPluginServesItsStore(t *testing.T) {
	t.Parallel() // each suite has processes and databases of its own
	endpoints, _ := etcdcluster.Require(t, t.TempDir())
	caps := conformance.Capabilities{Leases: true, SecondHandle: true, ControlledClock: true, Faults: restarts}
	conformance.Run(t, plugintest.ProcessTarget("etcd", "etcd/client-v3", bin(t, etcdPkg), caps, func(ctx context.Context) (map[string]string, func(), error) {
		prefix := etcdtest.NewPrefix()
		return map[string]string{"endpoints": strings.Join(endpoints, ","), "prefix": prefix},
			func() { etcdtest.DeletePrefix(context.Background(), endpoints, prefix) }, nil
	}), pathsmoke.Rules...)
}

func openTestPlugin(t *testing.T, mode string, log *slog.Logger) (*plugin.Client, error) {
	t.Helper()
	t.Setenv("RUNSTATE_TESTPLUGIN", mode)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := plugin.Open(context.Background(), bin(t, testPkg), plugin.Options{Logger: log, StartTimeout: 5 * time.Second,
		Config: map[string]string{"dsn": "user:hunter2@tcp(db:3306)/runs", "mode": "test"}})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func pidOf(t *testing.T, c *plugin.Client) int {
	t.Helper()
	pid := c.PID()
	if pid <= 0 {
		t.Fatal("no plugin process id")
	}
	return pid
}

func TestKilledPluginTurnsUnavailableQuickly(t *testing.T) {
	c, err := openTestPlugin(t, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	store := c.Store()
	ctx := context.Background()
	if _, err := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := store.GetRun(ctx, "block"); done <- err }() // in flight until the kill
	time.Sleep(100 * time.Millisecond)
	killed := time.Now()
	if err := syscall.Kill(pidOf(t, c), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, runstate.ErrUnavailable) {
			t.Fatalf("call in flight when the plugin died: %v (code %q)", err, runstate.CodeOf(err))
		}
		if d := time.Since(killed); d > time.Second {
			t.Fatalf("the call in flight took %v to fail", d)
		}
		t.Logf("in-flight call failed %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight hung after the plugin died")
	}
	start := time.Now()
	_, err = store.GetRun(ctx, "anything")
	if !errors.Is(err, runstate.ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("a call after the death: %v after %v", err, time.Since(start))
	}
}

// A plugin whose host is killed (SIGKILL: the host can do nothing) ends
// itself, instead of living on with its store and its connections open.
func TestAPluginDiesWithItsHost(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host := exec.Command(exe)
	host.Env = append(os.Environ(), "RUNSTATE_TEST_PLUGIN_HOST="+bin(t, memoryPkg))
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscan(out, &pid); err != nil || pid <= 0 {
		host.Process.Kill()
		t.Fatalf("the host did not start the plugin: %v", err)
	}
	host.Process.Kill()
	host.Wait()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("plugin process %d outlived its killed host", pid)
}

func TestDeadlinesCrossTheBoundary(t *testing.T) {
	c, err := openTestPlugin(t, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Store().GetRun(ctx, "block")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetRun past its deadline: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
	// The plugin saw the cancellation too and is still serving.
	if _, err := c.Store().GetRun(context.Background(), "missing"); !errors.Is(err, runstate.ErrNotFound) {
		t.Fatalf("the next call: %v", err)
	}
	canceled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if _, err := c.Store().GetRun(canceled, "block"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled context: %v", err)
	}
}

func TestMismatchedProtocolIsRefused(t *testing.T) {
	_, err := openTestPlugin(t, "version2", nil)
	if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("opening a plugin of protocol 2: %v", err)
	}
	t.Log(err)
}

func TestPluginCrashingAtStart(t *testing.T) {
	start := time.Now()
	_, err := openTestPlugin(t, "crash", nil)
	if !errors.Is(err, runstate.ErrUnavailable) || time.Since(start) > 6*time.Second {
		t.Fatalf("opening a plugin that exits at once: %v after %v", err, time.Since(start))
	}
	t.Log(err)
}

func TestPluginLogsReachHostAndSecretsDoNot(t *testing.T) {
	var out testlog.Buffer
	c, err := openTestPlugin(t, "slow", slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	logs := out.String()
	// As an entry of its own level and attributes, not as a whole line
	// logged at debug. (go-plugin hands the attributes over in no fixed
	// order, so the entry is read, not matched as text.)
	found := false
	for _, line := range strings.Split(logs, "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		if entry["level"] == "INFO" && entry["msg"] == "test plugin opening its store" && entry["plugin"] == filepath.Base(bin(t, testPkg)) &&
			entry["marker"] == "hello-from-plugin" {
			found = true
		}
	}
	if !found {
		t.Errorf("the plugin's log line did not reach the host logger as an entry of its own:\n%s", logs)
	}
	if strings.Contains(logs, "hunter2") {
		t.Errorf("a secret reached the logs:\n%s", logs)
	}
	if !strings.Contains(logs, "<redacted>") {
		t.Errorf("the configuration was not logged redacted:\n%s", logs)
	}
}

func TestErrorsKeepTheirIdentity(t *testing.T) {
	c, err := openTestPlugin(t, "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, ctx := c.Store(), context.Background()
	run, err := s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 7, Status: "running"})
	var e *runstate.Error
	if !errors.Is(err, runstate.ErrVersionConflict) || !errors.As(err, &e) || e.CurrentVersion != 1 || e.ExpectedVersion != 7 || e.RunID != run.RunID {
		t.Fatalf("version conflict through the plugin: %#v", err)
	}
	_, err = s.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: 1, Status: "success"})
	if !errors.Is(err, runstate.ErrInvalidTransition) || !errors.As(err, &e) || e.From != "queued" || e.To != "success" {
		t.Fatalf("invalid transition through the plugin: %#v", err)
	}
	_, err = s.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "", RunID: "x"})
	if !errors.Is(err, runstate.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != "workflow_name" {
		t.Fatalf("invalid argument through the plugin: %#v", err)
	}
	if errors.Is(err, runstate.ErrNotFound) {
		t.Fatal("an invalid-argument error matches NOT_FOUND")
	}
}

func TestRedacted(t *testing.T) {
	got := plugin.Redacted(map[string]string{"dsn": "u:p@/db", "dir": "/data", "api_token": "t", "region": "eu"}, []string{"region"})
	if got["dsn"] != "<redacted>" || got["api_token"] != "<redacted>" || got["region"] != "<redacted>" || got["dir"] != "/data" {
		t.Fatalf("Redacted: %v", got)
	}
}

// With ProfileEnv set, a plugin process writes its CPU profile when the
// host closes it, for the plugin's side of a benchmark.
func TestAPluginWritesItsCPUProfileWhenAsked(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(plugin.ProfileEnv, dir)
	ctx := context.Background()
	c, err := plugin.Open(ctx, bin(t, memoryPkg), plugin.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store().CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "profiled"}); err != nil {
		t.Fatal(err)
	}
	pid := c.PID()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", pid)))
	if err != nil || info.Size() == 0 {
		t.Fatalf("no profile from plugin %d: %v", pid, err)
	}
}

// A "plugin" that is a wrapper script forking a child and never answering
// is ended whole at the start timeout: the host is not held by the child's
// open pipes, and no process of it is left behind.
func TestStartTimeoutEndsTheWholeProcessGroup(t *testing.T) {
	dir := t.TempDir()
	childPID := filepath.Join(dir, "child.pid")
	script := filepath.Join(dir, "wrapper.sh")
	body := "#!/bin/sh\nsleep 600 &\necho $! > " + childPID + "\nsleep 600\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := plugin.Open(context.Background(), script, plugin.Options{StartTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, runstate.ErrUnavailable) {
			t.Fatalf("want ErrUnavailable, got %v", err)
		}
	case <-time.After(time.Minute): // a hang guard, not a timing claim: the start timeout is 1s
		t.Fatal("Open still waits, a minute after a 1s start timeout")
	}
	b, err := os.ReadFile(childPID)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	// SIGKILL lands asynchronously; a killed child no one has reaped yet is
	// a zombie, not a process.
	for wait := time.Now(); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Since(wait) > 10*time.Second {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the wrapper's child %d outlived the failed start", pid)
		}
	}
}

// alive reports whether pid is a running process (not gone, not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// A binary that never started, or exited at once, is reported once and
// plainly: no complaint that it failed to exit, no key twice on a line.
func TestFailedStartLogsPlainly(t *testing.T) {
	for _, path := range []string{filepath.Join(t.TempDir(), "no-such-plugin"), "/bin/false"} {
		var out testlog.Buffer
		_, err := plugin.Open(context.Background(), path, plugin.Options{Logger: slog.New(slog.NewTextHandler(&out, nil))})
		if !errors.Is(err, runstate.ErrUnavailable) {
			t.Fatalf("%s: want ErrUnavailable, got %v", path, err)
		}
		logs := out.String()
		if strings.Contains(logs, "failed to exit gracefully") {
			t.Errorf("%s: a process that never ran is said to have failed to exit:\n%s", path, logs)
		}
		for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
			seen := map[string]bool{}
			for _, field := range strings.Fields(line) {
				key, _, ok := strings.Cut(field, "=")
				if ok && !strings.Contains(key, `"`) && seen[key] {
					t.Errorf("%s: key %s twice on %q", path, key, line)
				}
				seen[key] = true
			}
		}
		if n := strings.Count(err.Error(), "runstate: "); n != 1 {
			t.Errorf("%s: %q says runstate %d times", path, err, n)
		}
	}
}

// With Relaunch, a plugin killed as by a crash is started again on its
// data, and the same client works again; until then calls fail at once.
func TestAKilledPluginIsStartedAgain(t *testing.T) {
	ctx := context.Background()
	c, err := plugin.Open(ctx, bin(t, badgerPkg), plugin.Options{Config: map[string]string{"dir": t.TempDir()},
		Logger: slog.New(slog.DiscardHandler), Relaunch: true, RelaunchPause: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := c.Store()
	run, err := store.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	first := c.PID()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := store.GetRun(ctx, run.RunID); !errors.Is(err, runstate.ErrUnavailable) || time.Since(began) > time.Second {
		t.Fatalf("a call while the plugin is down: %v after %v, want UNAVAILABLE at once", err, time.Since(began))
	}
	var got runstate.RunSnapshot
	for {
		if got, err = store.GetRun(ctx, run.RunID); err == nil {
			break
		}
		if !errors.Is(err, runstate.ErrUnavailable) || time.Since(began) > 20*time.Second {
			t.Fatalf("the plugin did not come back: %v after %v", err, time.Since(began))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("back %v after the kill", time.Since(began).Round(time.Millisecond))
	if got.Version != run.Version || c.PID() == first || c.PID() == 0 {
		t.Fatalf("after the restart: version %d (want %d), process %d (was %d)", got.Version, run.Version, c.PID(), first)
	}
	if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version, Status: "running"}); err != nil {
		t.Fatalf("a write after the restart: %v", err)
	}
}

// A plugin started again whose Open fails (a scratch place it finds from
// its predecessor) says so in every call meanwhile: its own error and its
// last lines of output, not only that it has not come back.
func TestARelaunchThatFailsToOpenSaysWhy(t *testing.T) {
	t.Setenv("RUNSTATE_TESTPLUGIN", "scratch")
	ctx := context.Background()
	c, err := plugin.Open(ctx, bin(t, testPkg), plugin.Options{Config: map[string]string{"marker": filepath.Join(t.TempDir(), "marker")},
		Logger: slog.New(slog.DiscardHandler), Relaunch: true, RelaunchPause: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for {
		_, err := c.Store().ListRuns(ctx, runstate.ListRunsParams{Limit: 1})
		if err == nil {
			t.Fatal("the plugin came back on a scratch place it should refuse")
		}
		if strings.Contains(err.Error(), "names a scratch place that exists") {
			if !errors.Is(err, runstate.ErrUnavailable) || !strings.Contains(err.Error(), "exists-marker-in-log") {
				t.Fatalf("the call's error does not carry the plugin's output: %v", err)
			}
			return
		}
		if time.Since(began) > 20*time.Second {
			t.Fatalf("after 20s calls still do not say why the plugin did not come back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A watch of one run crosses a plugin process: the memory plugin offers
// it, and an update through the host wakes the host's watch.
func TestARunWatchCrossesAPluginProcess(t *testing.T) {
	c, err := plugin.Open(context.Background(), bin(t, memoryPkg), plugin.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := c.RunWatcher()
	if w == nil {
		t.Fatal("the memory plugin offers no run watch")
	}
	latency := watchtest.RunWakesOnUpdate(t, w, c.Store())
	t.Logf("update to wake-up across the plugin process: %v", latency)
}
