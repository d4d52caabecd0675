package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/gateway"
	"github.com/runstate/runstate/gateway/gatewaytest"
	"github.com/runstate/runstate/internal/testsupport/sqltest"
	"github.com/runstate/runstate/internal/testsupport/testtls"
	"github.com/runstate/runstate/internal/testsupport/watchtest"
	"github.com/runstate/runstate/plugin/plugintest"
)

const (
	gatewayPkg     = "github.com/runstate/runstate/cmd/runstate-gateway"
	demoRunnerPkg  = "github.com/runstate/runstate/cmd/demo-runner"
	conformancePkg = "github.com/runstate/runstate/cmd/conformance-runner"
)

var binaries = plugintest.NewBinaries(gatewayPkg, demoRunnerPkg, conformancePkg)

func TestMain(m *testing.M) {
	code := m.Run()
	binaries.Cleanup()
	os.Exit(code)
}

// fleet is a gateway process in front of a Badger directory, with mutual
// TLS and a tokens file.
type fleet struct {
	t       *testing.T
	dir     string
	args    []string
	addr    string
	cmd     *exec.Cmd
	tokens  string
	ca      *testtls.Authority
	clients tls.Certificate
}

var fleetTokens = map[string]struct {
	role  gateway.Role
	token string
}{
	"worker-a":   {gateway.RoleWorker, "secret-of-worker-a"},
	"worker-b":   {gateway.RoleWorker, "secret-of-worker-b"},
	"operator-o": {gateway.RoleOperator, "secret-of-the-operator"},
	"reader-r":   {gateway.RoleReader, "secret-of-the-reader"},
}

func (f *fleet) writeTokens(without string) {
	var b strings.Builder
	b.WriteString("principals:\n")
	for name, p := range fleetTokens {
		if name != without {
			fmt.Fprintf(&b, "  - name: %s\n    role: %s\n    token_sha256: %s\n", name, p.role, gateway.HashToken(p.token))
		}
	}
	if err := os.WriteFile(f.tokens, []byte(b.String()), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func newFleet(t *testing.T) *fleet {
	return newFleetOn(t, func(dir string) string { return "badger:" + filepath.Join(dir, "store") })
}

// newFleetOn starts a gateway in front of the store storeArg names.
func newFleetOn(t *testing.T, storeArg func(dir string) string) *fleet {
	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, tokens: filepath.Join(dir, "tokens.yaml"), ca: testtls.NewAuthority(t, "fleet CA")}
	f.writeTokens("")
	cert, key := testtls.WritePair(t, f.ca.Issue(t, x509.ExtKeyUsageServerAuth, time.Now().Add(time.Hour)), dir, "gateway")
	f.clients = f.ca.Issue(t, x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
	f.args = []string{"--store", storeArg(dir), "--tokens", f.tokens,
		"--tls-cert", cert, "--tls-key", key, "--client-ca", f.ca.WriteCA(t, dir, "ca.pem")}
	f.start("127.0.0.1:0")
	t.Cleanup(func() {
		if f.cmd != nil {
			f.cmd.Process.Kill()
			f.cmd.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "gateway.log"))
			t.Logf("the gateway's log:\n%s", b)
		}
	})
	return f
}

// start runs the gateway on listen and waits for it to say where it listens.
func (f *fleet) start(listen string) {
	f.t.Helper()
	cmd, addr, err := gatewaytest.Start(binaries.Path(f.t, "github.com/runstate/runstate/cmd/runstate-gateway"),
		append(f.args, "--listen", listen), filepath.Join(f.dir, "gateway.log"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.cmd, f.addr = cmd, addr
}

func (f *fleet) dial(name string) runstate.Store { return f.dialAt(f.addr, name) }

// second starts another gateway with the same configuration (store,
// tokens, certificates) and returns its address.
func (f *fleet) second() string {
	f.t.Helper()
	first := *f
	f.start("127.0.0.1:0")
	other := f.cmd
	addr := f.addr
	f.cmd, f.addr = first.cmd, first.addr
	f.t.Cleanup(func() {
		other.Process.Kill()
		other.Wait()
	})
	return addr
}

func (f *fleet) dialAt(addr, name string) runstate.Store {
	f.t.Helper()
	st, _ := runstate.As[runstate.Store](f.client(addr, name).Store())
	return st
}

// client dials the gateway at addr as name.
func (f *fleet) client(addr, name string) *gateway.Client {
	f.t.Helper()
	c, err := gateway.Dial(context.Background(), addr, gateway.Options{Token: fleetTokens[name].token,
		TLS: &tls.Config{RootCAs: f.ca.Pool, Certificates: []tls.Certificate{f.clients}}})
	if err != nil {
		f.t.Fatalf("dial as %s: %v", name, err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// Two workers on different principals run a queue of runs through one
// gateway on Badger; the gateway is SIGKILLed and restarted on the same
// address mid-run, and the workers carry on. Every run finishes exactly
// once, each worker's writes recorded under its own name.
func TestWorkersCarryOnThroughAGatewayRestart(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	operator := f.dial("operator-o")
	const runs = 30
	createRuns(t, operator, runs)
	var done sync.WaitGroup
	var mu sync.Mutex
	finishedBy := map[string]string{}
	restarted := false
	workCtx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	for _, name := range []string{"worker-a", "worker-b"} {
		store := f.dial(name)
		done.Add(1)
		go func() {
			defer done.Done()
			for workCtx.Err() == nil {
				id, err := work(workCtx, store, name)
				switch {
				case errors.Is(err, runstate.ErrNotFound): // nothing runnable: done, or a run the other holds
					if finished(workCtx, store) == runs {
						return
					}
					time.Sleep(20 * time.Millisecond)
				case errors.Is(err, runstate.ErrUnavailable), errors.Is(err, runstate.ErrLeaseLost):
					time.Sleep(50 * time.Millisecond) // the gateway restarts; a run left leased expires
				case err != nil:
					t.Errorf("%s: %v", name, err)
					return
				default:
					mu.Lock()
					if prev, twice := finishedBy[id]; twice {
						t.Errorf("run %s finished by %s and again by %s", id, prev, name)
					}
					finishedBy[id] = name
					restart := len(finishedBy) == runs/2
					mu.Unlock()
					if restart {
						// Mid-run: the gateway dies at once and comes back where it was.
						f.cmd.Process.Signal(syscall.SIGKILL)
						f.cmd.Wait()
						f.start(f.addr)
						restarted = true
					}
				}
			}
		}()
	}
	done.Wait()
	if !restarted {
		t.Fatal("the gateway was never restarted")
	}
	// A write whose answer the restart cut off took effect or not: the
	// store, not the workers' tally, says whether every run finished.
	if n := finished(ctx, operator); n != runs {
		t.Fatalf("%d of %d runs finished", n, runs)
	}
	for i := range runs {
		id := fmt.Sprintf("run-%02d", i)
		page, err := operator.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id})
		if err != nil {
			t.Fatal(err)
		}
		last := page.Events[len(page.Events)-1]
		name, tallied := finishedBy[id]
		if last.To != runstate.StatusSuccess || last.Actor.Kind != runstate.ActorWorker || (tallied && last.Actor.ID != name) ||
			(last.Actor.ID != "worker-a" && last.Actor.ID != "worker-b") {
			t.Fatalf("run %s ends with %+v, want success by a worker (%q by the tally)", id, last, name)
		}
	}
}

// finished counts the runs in success (-1 when the store cannot say).
func finished(ctx context.Context, store runstate.Store) int {
	page, err := store.ListRuns(ctx, runstate.ListRunsParams{Statuses: []string{"success"}, Limit: runstate.MaxPageLimit})
	if err != nil {
		return -1
	}
	return len(page.Runs)
}

// createRuns queues n runs, run-00, run-01, …
func createRuns(t *testing.T, store runstate.Store, n int) {
	t.Helper()
	for i := range n {
		if _, err := store.CreateRun(context.Background(), runstate.CreateRunParams{RunID: fmt.Sprintf("run-%02d", i), WorkflowName: "fleet"}); err != nil {
			t.Fatal(err)
		}
	}
}

// work claims the next run as name, and runs it to success under its lease.
func work(ctx context.Context, store runstate.Store, name string) (string, error) {
	claim, err := store.ClaimNextRun(ctx, runstate.ClaimNextParams{Owner: runstate.Owner{Worker: name, Incarnation: "1"}, TTL: 2 * time.Second,
		Filter: runstate.RunnableFilter{Statuses: []string{"queued", "running"}}})
	if err != nil {
		return "", err
	}
	run := claim.Run
	if run.Status == runstate.StatusQueued {
		if run, err = store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version,
			LeaseToken: claim.Lease.Token, Status: "running"}); err != nil {
			return "", err
		}
	}
	if _, err := store.UpdateRun(ctx, runstate.UpdateRunParams{RunID: run.RunID, ExpectedVersion: run.Version,
		LeaseToken: claim.Lease.Token, Status: "success"}); err != nil {
		return "", err
	}
	return run.RunID, nil
}

// SIGHUP reloads the tokens: a token the new file drops is refused from
// then on, the others keep working; SIGTERM stops the gateway cleanly.
func TestSIGHUPRevokesAndSIGTERMStops(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	a, b := f.dial("worker-a"), f.dial("worker-b")
	if _, err := a.ListRuns(ctx, runstate.ListRunsParams{}); err != nil {
		t.Fatal(err)
	}
	f.writeTokens("worker-a")
	if err := f.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := a.ListRuns(ctx, runstate.ListRunsParams{})
		if errors.Is(err, runstate.ErrUnauthenticated) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-a's revoked token still works after SIGHUP: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := b.ListRuns(ctx, runstate.ListRunsParams{}); err != nil {
		t.Fatalf("worker-b, whose token the reload kept: %v", err)
	}
	if err := f.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := f.cmd.Wait()
	f.cmd = nil
	if err != nil {
		t.Fatalf("the gateway did not stop cleanly on SIGTERM: %v", err)
	}
	// A gateway that is gone is UNAVAILABLE, not a hang: a call that hung
	// would end with its deadline instead.
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.ListRuns(callCtx, runstate.ListRunsParams{}); !errors.Is(err, runstate.ErrUnavailable) {
		t.Fatalf("a call to a stopped gateway: %v", err)
	}
}

// Two gateways in front of one database serve one fleet: a worker on
// each takes runs from the same queue, and every run is done once. On
// PostgreSQL this is the gateway serving a postgres:DSN store end to end.
func TestTwoGatewaysOnOneDatabaseShareAFleet(t *testing.T) {
	for _, db := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"mysql", mysqlStore},
		{"postgres", postgresStore},
	} {
		t.Run(db.name, func(t *testing.T) {
			store := db.store(t)
			twoGatewaysShareAFleet(t, newFleetOn(t, func(string) string { return store }))
		})
	}
}

// mysqlStore names a fresh MySQL database for one test.
func mysqlStore(t *testing.T) string {
	srv := sqltest.MySQL.Find(t)
	db, err := srv.CreateDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropDatabase(context.Background(), db) })
	return "mysql:" + srv.DSN(db)
}

// postgresStore names a fresh PostgreSQL schema for one test.
func postgresStore(t *testing.T) string {
	srv := sqltest.Postgres.Find(t)
	schema, err := srv.CreateSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropSchema(context.Background(), schema) })
	return "postgres:" + srv.DSNIn(schema)
}

func twoGatewaysShareAFleet(t *testing.T, f *fleet) {
	ctx := context.Background()
	secondAddr := f.second()
	operator := f.dial("operator-o")
	const runs = 40
	createRuns(t, operator, runs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	doneBy := map[string]string{}
	for name, addr := range map[string]string{"worker-a": f.addr, "worker-b": secondAddr} {
		store := f.dialAt(addr, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id, err := work(ctx, store, name)
				if errors.Is(err, runstate.ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				mu.Lock()
				if prev, twice := doneBy[id]; twice {
					t.Errorf("run %s done by %s and again by %s", id, prev, name)
				}
				doneBy[id] = name
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := finished(ctx, operator); n != runs || len(doneBy) != runs {
		t.Fatalf("%d runs in success, %d done by the workers, of %d", n, len(doneBy), runs)
	}
	t.Logf("runs done through each gateway: %v", countBy(doneBy))
}

func countBy(doneBy map[string]string) map[string]int {
	out := map[string]int{}
	for _, name := range doneBy {
		out[name]++
	}
	return out
}

// The demo runner runs a workflow on a store behind the gateway, as the
// worker its token names, over mutual TLS: the run succeeds, and the
// trail records the principal as the worker of its writes.
func TestTheDemoRunnerRunsThroughTheGateway(t *testing.T) {
	f := newFleet(t)
	clientCert, clientKey := testtls.WritePair(t, f.clients, f.dir, "client")
	tokenFile := filepath.Join(f.dir, "token")
	if err := os.WriteFile(tokenFile, []byte(fleetTokens["worker-a"].token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	workflow, err := filepath.Abs(filepath.Join("..", "..", "examples", "workflows", "hello.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binaries.Path(t, "github.com/runstate/runstate/cmd/demo-runner"), "--store", "gateway:"+f.addr,
		"--worker-id", "worker-a", "--gateway-ca", filepath.Join(f.dir, "ca.pem"), "--gateway-cert", clientCert, "--gateway-key", clientKey,
		"--gateway-token-file", tokenFile, "run", workflow)
	cmd.Dir = t.TempDir()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo-runner through the gateway: %v\n%s", err, stderr.String())
	}
	id, status, ok := strings.Cut(strings.TrimSpace(stdout.String()), " ")
	if !ok || status != "success" {
		t.Fatalf("stdout %q", stdout.String())
	}
	page, err := f.dial("operator-o").ListAuditEvents(context.Background(), runstate.ListAuditParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events[1:] { // after the create, every write is the worker's
		if e.Actor != (runstate.Actor{Kind: runstate.ActorWorker, ID: "worker-a", Principal: "worker-a"}) {
			t.Fatalf("event %d by %+v", e.Seq, e.Actor)
		}
	}
}

// demoArgs are the demo runner's flags to reach the fleet's gateway as
// principal name, over mutual TLS.
func (f *fleet) demoArgs(name string) []string {
	f.t.Helper()
	cert, key := filepath.Join(f.dir, "client.crt"), filepath.Join(f.dir, "client.key")
	if _, err := os.Stat(cert); err != nil {
		testtls.WritePair(f.t, f.clients, f.dir, "client")
	}
	tokenFile := filepath.Join(f.dir, name+".token")
	if err := os.WriteFile(tokenFile, []byte(fleetTokens[name].token+"\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return []string{"--store", "gateway:" + f.addr, "--worker-id", name, "--data-dir", filepath.Join(f.dir, name),
		"--gateway-ca", filepath.Join(f.dir, "ca.pem"), "--gateway-cert", cert, "--gateway-key", key, "--gateway-token-file", tokenFile}
}

// A worker process stopped (SIGSTOP) past its lease is taken over through
// the gateway by a worker on another principal, which finishes the run;
// continued, the stopped worker writes nothing more: the store refuses its
// token, and the gateway would refuse it another's.
func TestAStalledWorkerIsFencedThroughTheGateway(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	operator := f.dial("operator-o")
	demoBin := binaries.Path(t, "github.com/runstate/runstate/cmd/demo-runner")
	wf := filepath.Join(f.dir, "slow.yaml")
	if err := os.WriteFile(wf, []byte("name: slow\nsteps:\n  - name: work\n    type: shell\n    hosts: [h1]\n    command: sleep 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lease := []string{"--lease", "2s", "--renew", "400ms"}
	out, err := exec.Command(demoBin, append(append(f.demoArgs("worker-a"), lease...), "submit", wf)...).Output()
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	a := exec.Command(demoBin, append(append(f.demoArgs("worker-a"), lease...), "worker")...)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { a.Process.Kill(); a.Wait() }()
	waitFor(t, "worker-a runs the run", func() bool {
		r, err := operator.GetRun(ctx, id)
		return err == nil && r.Status == runstate.StatusRunning
	})
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past worker-a's lease
	b := exec.Command(demoBin, append(append(f.demoArgs("worker-b"), lease...), "--recovery", "takeover", "worker", "--once",
		"--statuses", "queued,waiting,running")...)
	var bErr strings.Builder
	b.Stderr = &bErr
	if err := b.Run(); err != nil {
		t.Fatalf("worker-b: %v\n%s", err, bErr.String())
	}
	a.Process.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second) // worker-a wakes, and tries to go on
	r, err := operator.GetRun(ctx, id)
	if err != nil || r.Status != runstate.StatusSuccess {
		t.Fatalf("the run after the takeover: %+v, %v", r, err)
	}
	page, err := operator.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	tookOver := false
	for _, e := range page.Events {
		switch {
		case e.Actor.ID == "worker-b":
			tookOver = true
		case tookOver && e.Actor.ID == "worker-a":
			t.Fatalf("worker-a wrote after worker-b took the run over: %+v", e)
		}
	}
	if !tookOver {
		t.Fatalf("worker-b never wrote: %+v", page.Events)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A demo-runner worker behind a gateway process on PostgreSQL, polling
// every 10 minutes, is woken by the gateway's watch: it claims a run
// within waitFor's 20 s of its submission, far sooner than any poll (the
// store's own times of the created and started events are logged).
func TestADemoWorkerBehindTheGatewayWakesOnSubmit(t *testing.T) {
	ctx := context.Background()
	f := newFleetOn(t, func(string) string { return postgresStore(t) })
	operator := f.dial("operator-o")
	logPath := filepath.Join(f.dir, "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	w := exec.Command(binaries.Path(t, demoRunnerPkg), append(f.demoArgs("worker-a"), "worker", "--poll", "10m")...)
	w.Stderr = logFile
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Process.Kill(); w.Wait() }()
	waitFor(t, "the worker watches", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), `wakeups="notify and poll"`)
	})
	time.Sleep(time.Second) // its first look finds nothing; it then sleeps until woken
	run, err := operator.CreateRun(ctx, runstate.CreateRunParams{WorkflowName: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	var trail []runstate.AuditEvent
	waitFor(t, "the worker claims the run", func() bool {
		page, err := operator.ListAuditEvents(ctx, runstate.ListAuditParams{RunID: run.RunID})
		trail = page.Events
		return err == nil && len(trail) >= 2
	})
	took := trail[1].Time.Sub(trail[0].Time)
	t.Logf("claimed %v after submit (store times)", took)
	// The worker polls every 10 minutes, so waitFor's claim was woken by
	// the notice. (How soon is a figure, logged above, not a verdict: a
	// loaded machine delays it.)
	if trail[1].To != runstate.StatusRunning || trail[1].Actor.ID != "worker-a" {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("the first write after the submit, %v later: %+v, want worker-a's start, woken by the notice\n%s", took, trail[1], b)
	}
}

// A reader watches a run through a gateway process, on a store the
// gateway owns (Badger: in-process notices) and on one it shares
// (PostgreSQL: LISTEN/NOTIFY): an operator's update of the run wakes the
// watch.
func TestAReaderWatchesARunThroughAGatewayProcess(t *testing.T) {
	for name, store := range map[string]func(t *testing.T) func(string) string{
		"badger": func(*testing.T) func(string) string {
			return func(dir string) string { return "badger:" + filepath.Join(dir, "store") }
		},
		"postgres": func(t *testing.T) func(string) string { return func(string) string { return postgresStore(t) } },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFleetOn(t, store(t))
			w := f.client(f.addr, "reader-r").RunWatcher()
			if w == nil {
				t.Fatal("the gateway offers its reader no run watch")
			}
			latency := watchtest.RunWakesOnUpdate(t, w, f.dial("operator-o"))
			t.Logf("update to wake-up through the gateway process on %s: %v", name, latency)
		})
	}
}
