package sqltest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runstate/runstate/adapters/postgres/scratch"
	"github.com/runstate/runstate/conformance"
	"github.com/runstate/runstate/conformance/faultproxy"
	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// PairOptions shapes a PostgresPair.
type PairOptions struct {
	// Synchronous makes the primary wait for its standby before it
	// acknowledges a commit (synchronous_standby_names = '*',
	// synchronous_commit = on); else replication is asynchronous.
	Synchronous bool
	// Lag is how long a failover stalls the standby's stream before it
	// kills the primary, as a loaded or distant standby lags: the commits
	// an asynchronous primary acknowledges meanwhile are lost with it.
	// Zero means DefaultLag.
	Lag time.Duration
	// PerFault is how many failovers one fault makes, back to back, each
	// but the last with its standby rebuilt at once, so that a rule's
	// writers and claimers work through many; zero means one.
	PerFault int
}

// DefaultLag is a failover's stall of the standby's stream.
const DefaultLag = 300 * time.Millisecond

// PostgresPair is a PostgreSQL primary with a streaming standby, both
// servers of the test's own on loopback, which fails over
// (conformance.FaultFailover): the primary killed with SIGKILL, the
// standby promoted (pg_promote), and, at the fault's end, the old primary
// rebuilt by pg_basebackup as the new primary's standby, so that failovers
// repeat. Each standby streams through a faultproxy in front of its
// primary, which stalls the stream before the kill and drops what it held
// with the primary. Clients reach whichever is primary through Scratch's
// DSN, which names both hosts with target_session_attrs=read-write. A
// failover that stops part-way ends the repetition: every later failover
// and rebuild returns its error, and nothing is rebuilt.
type PostgresPair struct {
	// Scratch makes scratch schemas on whichever server is primary.
	Scratch *scratch.Server
	opts    PairOptions
	bin     string // the directory of PostgreSQL's binaries
	runAs   *serverproc.User

	mu      sync.Mutex
	nodes   [2]*pgNode
	primary int  // the index of the primary in nodes
	rebuild bool // a failover left the old primary down
	// broken is why a failover stopped part-way (killing the primary
	// failed, or it was killed and the standby's promotion failed or was
	// not confirmed): which node holds the data is then unknown, so the
	// pair refuses to fail over or rebuild again.
	broken  error
	timings PairTimings
}

// PairTimings are how long each failover (from the stall to the standby
// promoted) and each rebuild of a standby took.
type PairTimings struct {
	Failovers, Rebuilds []time.Duration
}

// Timings returns how long the failovers and rebuilds so far took.
func (p *PostgresPair) Timings() PairTimings {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PairTimings{Failovers: slices.Clone(p.timings.Failovers), Rebuilds: slices.Clone(p.timings.Rebuilds)}
}

// pgNode is one server of a pair.
type pgNode struct {
	name, port, data string
	// relay is the path to this server that a standby of it streams
	// through.
	relay *faultproxy.Proxy
	*serverproc.Server
}

var _ conformance.FaultInjector = (*PostgresPair)(nil)

// StartPostgresPair starts a pair of the test's own, killed when the test
// ends. Without PostgreSQL's binaries the test is skipped, or fails under
// CI=true.
func StartPostgresPair(t testing.TB, opts PairOptions) *PostgresPair {
	t.Helper()
	p := serverproc.Require(t, "PostgreSQL primary and standby", Postgres.Package, func() (*PostgresPair, error) {
		dir, err := os.MkdirTemp("", "runstate-private-pair-*")
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		p, err := startPair(ctx, dir, opts)
		if p != nil {
			t.Cleanup(func() { p.Close() })
		}
		return p, err
	})
	return p
}

// startPair initialises the primary with initdb, starts it, and makes the
// standby from it with pg_basebackup.
func startPair(ctx context.Context, dir string, opts PairOptions) (_ *PostgresPair, err error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	initdb, err := serverproc.Lookup([]string{"initdb"}, bins...)
	if err != nil {
		return nil, err
	}
	// initdb on PATH may be a link to the directory of the other tools.
	if initdb, err = filepath.EvalSymlinks(initdb); err != nil {
		return nil, err
	}
	if opts.Lag == 0 {
		opts.Lag = DefaultLag
	}
	p := &PostgresPair{opts: opts, bin: filepath.Dir(initdb)}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.runAs, err = postgresUser(dir); err != nil {
		return nil, err
	}
	var hosts []string
	for i, name := range []string{"a", "b"} {
		n := &pgNode{name: name, data: filepath.Join(dir, name)}
		if n.port, err = serverproc.FreePort(); err != nil {
			return nil, err
		}
		if n.relay, err = faultproxy.Start("127.0.0.1:" + n.port); err != nil {
			return nil, err
		}
		n.Server = p.server(n, dir)
		p.nodes[i] = n
		hosts = append(hosts, "127.0.0.1:"+n.port)
	}
	p.Scratch, err = scratch.FromDSNUnchecked(fmt.Sprintf("postgres://postgres@%s,%s/postgres?sslmode=disable&target_session_attrs=read-write", hosts[0], hosts[1]), "private pair")
	if err != nil {
		return nil, err
	}
	first := p.nodes[0]
	if out, err := p.run(initdb, "-D", first.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, serverproc.Tail(out))
	}
	if err := first.Start(ctx); err != nil {
		return nil, err
	}
	if err := p.makeStandby(ctx, p.nodes[1], first); err != nil {
		return nil, err
	}
	return p, nil
}

// server is n's postgres process. fsync is off: a server is only ever
// killed as a process, whose writes the kernel keeps, and a failover's
// loss is what replication did or did not carry, not what a disk kept.
func (p *PostgresPair) server(n *pgNode, dir string) *serverproc.Server {
	direct, _ := scratch.FromDSNUnchecked("postgres://postgres@127.0.0.1:"+n.port+"/postgres?sslmode=disable", "private")
	standbys := "" // asynchronous
	if p.opts.Synchronous {
		standbys = "*"
	}
	return &serverproc.Server{RunAs: p.runAs, Log: filepath.Join(n.data, "log", "server.log"), Ready: direct.Ping,
		Command: func() *exec.Cmd {
			return exec.Command(filepath.Join(p.bin, "postgres"), "-D", n.data, "-p", n.port, "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "logging_collector=on", "-c", "log_directory=log", "-c", "log_filename=server.log",
				"-c", "fsync=off", "-c", "shared_buffers=16MB", "-c", "max_connections=300",
				"-c", "synchronous_standby_names="+standbys, "-c", "synchronous_commit=on",
				"-c", "wal_receiver_status_interval=1s", "-c", "wal_retrieve_retry_interval=200ms")
		}}
}

// run runs a PostgreSQL tool as the user the servers run as.
func (p *PostgresPair) run(bin string, args ...string) ([]byte, error) {
	tool := serverproc.Server{RunAs: p.runAs, Command: func() *exec.Cmd { return exec.Command(bin, args...) }}
	return tool.Run()
}

// makeStandby makes standby a copy of primary with pg_basebackup, through
// primary's relay, starts it, and returns once the primary streams to it
// (as its synchronous standby where the pair is synchronous).
func (p *PostgresPair) makeStandby(ctx context.Context, standby, primary *pgNode) error {
	if err := os.RemoveAll(standby.data); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(primary.relay.Addr())
	out, err := p.run(filepath.Join(p.bin, "pg_basebackup"), "-h", host, "-p", port, "-U", "postgres", "-D", standby.data,
		"--write-recovery-conf", "--wal-method=stream", "--checkpoint=fast", "--no-sync")
	if err != nil {
		return fmt.Errorf("pg_basebackup of %s from %s: %v: %s", standby.name, primary.name, err, serverproc.Tail(out))
	}
	if err := standby.Start(ctx); err != nil {
		return err
	}
	return p.awaitStreaming(ctx, primary)
}

// awaitStreaming returns once primary streams to a standby, its
// synchronous one where the pair is synchronous.
func (p *PostgresPair) awaitStreaming(ctx context.Context, primary *pgNode) error {
	want := "async"
	if p.opts.Synchronous {
		want = "sync"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		var state string
		last = primary.query(ctx, "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming' LIMIT 1", &state)
		if last == nil && state == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not stream to a standby (%s) within a minute: %v, sync_state %q; its log %s ends: %s",
				primary.name, want, last, state, primary.Log, serverproc.TailFile(primary.Log))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// query runs a query on n directly, scanning its one row into dest.
func (n *pgNode) query(ctx context.Context, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+n.port+"/postgres?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// StartFault fails over: it stalls the standby's stream for the lag,
// kills the primary with SIGKILL, drops what the relay held, and promotes
// the standby.
func (p *PostgresPair) StartFault(ctx context.Context, f conformance.FaultParams) error {
	if f.Fault != conformance.FaultFailover {
		return fmt.Errorf("a PostgreSQL pair causes failovers only, not %q", f.Fault)
	}
	for range p.opts.PerFault - 1 {
		if err := p.Failover(ctx); err != nil {
			return err
		}
	}
	return p.failover(ctx)
}

// failover is one failover, which leaves the old primary down.
func (p *PostgresPair) failover(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken != nil {
		return p.broken
	}
	if p.rebuild {
		return errors.New("the last failover has not ended: the pair has no standby")
	}
	began := time.Now()
	old, next := p.nodes[p.primary], p.nodes[1-p.primary]
	old.relay.Partition()
	time.Sleep(p.opts.Lag)
	p.rebuild = true
	err := old.Kill()
	old.relay.Reset()
	old.relay.Heal()
	if err != nil {
		p.broken = fmt.Errorf("a failover did not complete: killing the primary %s: %w", old.name, err)
		return p.broken
	}
	var promoted bool
	if err := next.query(ctx, "SELECT pg_promote(true, 60)", &promoted); err != nil || !promoted {
		p.broken = fmt.Errorf("a failover did not complete: the primary %s was killed, and promoting %s failed: %v (promoted %v); its log %s ends: %s",
			old.name, next.name, err, promoted, next.Log, serverproc.TailFile(next.Log))
		return p.broken
	}
	p.primary = 1 - p.primary
	p.timings.Failovers = append(p.timings.Failovers, time.Since(began))
	return nil
}

// EndFault rebuilds the old primary as the new one's standby; it does
// nothing when no failover left one to rebuild. After a failover that
// stopped part-way it rebuilds nothing, since the only copy of the data
// may be the node it would overwrite, and returns why the failover
// stopped.
func (p *PostgresPair) EndFault(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken != nil {
		return errNothingRebuilt{p.broken}
	}
	if !p.rebuild {
		return nil
	}
	began := time.Now()
	if err := p.makeStandby(ctx, p.nodes[1-p.primary], p.nodes[p.primary]); err != nil {
		return err
	}
	p.rebuild = false
	p.timings.Rebuilds = append(p.timings.Rebuilds, time.Since(began))
	return nil
}

// errNothingRebuilt is EndFault's answer after a failover that stopped
// part-way: short, since whoever called StartFault has its error, log
// tail and all, and it is that error underneath.
type errNothingRebuilt struct{ failover error }

func (e errNothingRebuilt) Error() string {
	return "rebuilt nothing: the pair is broken by a failover that did not complete"
}

func (e errNothingRebuilt) Unwrap() error { return e.failover }

// Failover fails over once and rebuilds the standby.
func (p *PostgresPair) Failover(ctx context.Context) error {
	if err := p.failover(ctx); err != nil {
		return err
	}
	return p.EndFault(ctx)
}

// Close kills both servers and closes the relays.
func (p *PostgresPair) Close() error {
	var errs []error
	for _, n := range p.nodes {
		if n == nil {
			continue
		}
		if n.Server != nil {
			errs = append(errs, n.Kill())
		}
		errs = append(errs, n.relay.Close())
	}
	return errors.Join(errs...)
}
