// Package etcdcluster runs an etcd cluster of a test's own on loopback:
// every member a child process (serverproc) with its own data directory
// and ports, which a test may kill as a crash kills it and start again on
// its data. The etcd binary is Debian's etcd-server package's. Tests take
// a cluster from RUNSTATE_ETCD_ENDPOINTS first (Require).
package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// EnvEndpoints names the variable that points tests at a cluster of the
// environment's (comma-separated client URLs), which they do not kill.
const EnvEndpoints = "RUNSTATE_ETCD_ENDPOINTS"

// Size is the number of members of a test's cluster: the smallest that
// survives the loss of one.
const Size = 3

// Cluster is a running cluster of a test's own.
type Cluster struct {
	Members []*Member
}

// Member is one etcd process of a cluster.
type Member struct {
	Name string
	// Client is the member's client address, host:port.
	Client string
	// Peer is the member's peer URL.
	Peer string
	*serverproc.Server
}

// Require returns the endpoints of the cluster the tests use: those of
// RUNSTATE_ETCD_ENDPOINTS (with a nil Cluster, which the test must not
// disturb), else of a cluster of Size members started under dir and killed
// when the test ends. Without either the test is skipped, or fails under
// CI=true.
func Require(t testing.TB, dir string) ([]string, *Cluster) {
	t.Helper()
	if env := os.Getenv(EnvEndpoints); env != "" {
		return strings.Split(env, ","), nil
	}
	c := serverproc.Require(t, "etcd", "Debian's etcd-server package", func() (*Cluster, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return Start(ctx, dir, Size)
	})
	t.Cleanup(func() { c.Close() })
	return c.Endpoints(), c
}

// Start starts a cluster of size members under dir and returns once it
// has a leader and answers a write. A cluster whose member cannot start
// (a port found free taken meanwhile) is started again on other ports, in
// a directory of its own (serverproc.OnFreePorts).
func Start(ctx context.Context, dir string, size int) (*Cluster, error) {
	bin, err := serverproc.Lookup([]string{"etcd"}, "/usr/bin")
	if err != nil {
		return nil, err
	}
	return serverproc.OnFreePorts(2*size, func(ports []string) (*Cluster, error) {
		try, err := os.MkdirTemp(dir, "try-")
		if err != nil {
			return nil, err
		}
		return start(ctx, bin, try, ports)
	})
}

// start is one attempt of Start, with the etcd binary bin: a member per
// two ports (client, peer).
func start(ctx context.Context, bin, dir string, ports []string) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	for i := range len(ports) / 2 {
		m := &Member{Name: fmt.Sprintf("m%d", i+1)}
		m.Client, m.Peer = "127.0.0.1:"+ports[2*i], "http://127.0.0.1:"+ports[2*i+1]
		initial = append(initial, m.Name+"="+m.Peer)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		data := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		m.Server = m.server(bin, data, strings.Join(initial, ","))
	}
	// A new member answers on its port before the others are up, but serves
	// nothing until a quorum has elected a leader: start them all, then wait.
	for _, m := range c.Members {
		if err := m.Start(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// server is the member's process. The heartbeat and election timeout
// replace a lost leader within a few seconds, well inside the FAULT rules'
// 10 s, while a member starved of the CPU for a second on a loaded machine
// keeps its leader: with an election timeout of 500 ms, such a pause lost
// it, and calls made outside any fault failed with "no leader".
func (m *Member) server(bin, data, initial string) *serverproc.Server {
	log := filepath.Join(data, "etcd.log")
	return &serverproc.Server{
		Log: log,
		Command: func() *exec.Cmd {
			cmd := exec.Command(bin,
				"--name", m.Name, "--data-dir", filepath.Join(data, "data"),
				"--listen-client-urls", "http://"+m.Client, "--advertise-client-urls", "http://"+m.Client,
				"--listen-peer-urls", m.Peer, "--initial-advertise-peer-urls", m.Peer,
				"--initial-cluster", initial, "--initial-cluster-state", "new",
				"--initial-cluster-token", "runstate-test",
				"--heartbeat-interval", "200", "--election-timeout", "2000")
			if f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
				cmd.Stdout, cmd.Stderr = f, f
			}
			return cmd
		},
		Ready: func(ctx context.Context) error {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", m.Client)
			if err == nil {
				conn.Close()
			}
			return err
		},
	}
}

// Endpoints returns every member's client address.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Client
	}
	return out
}

// client connects to the given endpoints.
func client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// WaitHealthy returns once every member that runs reports a leader and
// the cluster answers a linearizable read.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	cli, err := client(c.Endpoints())
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	for {
		if last = c.healthy(ctx, cli); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the etcd cluster did not become healthy: %w (member logs: %s)", last, c.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context, cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		st, err := cli.Status(ctx, m.Client)
		if err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("member %s has no leader", m.Name)
		}
	}
	_, err := cli.Get(ctx, "runstate-health")
	return err
}

// Leader returns the member that leads the cluster now.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	cli, err := client(c.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		st, err := cli.Status(ctx, m.Client)
		if err != nil {
			continue
		}
		if st.Leader != 0 && st.Leader == st.Header.MemberId {
			return m, nil
		}
	}
	return nil, errors.New("no running etcd member says it leads")
}

// KillLeader kills the member that leads, as a crash does.
func (c *Cluster) KillLeader(ctx context.Context) error {
	m, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	return m.Kill()
}

// KillFollower kills a running member that does not lead, as a crash does.
func (c *Cluster) KillFollower(ctx context.Context) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	for _, m := range c.Members {
		if m != leader && m.Running() {
			return m.Kill()
		}
	}
	return errors.New("no running etcd member but the leader")
}

// KillAll kills every member, as a crash of every machine would.
func (c *Cluster) KillAll(context.Context) error { return c.Close() }

// StartKilled starts every member that is not running on its data, and
// returns once the cluster is healthy.
func (c *Cluster) StartKilled(ctx context.Context) error {
	for _, m := range c.Members {
		if !m.Running() {
			if err := m.Start(ctx); err != nil {
				return fmt.Errorf("etcd member %s: %w", m.Name, err)
			}
		}
	}
	return c.WaitHealthy(ctx)
}

// Close kills every member.
func (c *Cluster) Close() error {
	var errs []error
	for _, m := range c.Members {
		if m.Server != nil {
			errs = append(errs, m.Kill())
		}
	}
	return errors.Join(errs...)
}

func (c *Cluster) logs() string {
	var parts []string
	for _, m := range c.Members {
		if m.Server != nil {
			parts = append(parts, m.Log)
		}
	}
	return strings.Join(parts, ", ")
}
