// Package sqltest is the SQL test environment of both engines, MySQL
// (MariaDB) and PostgreSQL: the shared server tests find (Find: from the
// environment, on this machine, or started in Docker) and servers of a
// test's own that it may kill and start again (StartPrivate), or, for
// PostgreSQL, a primary with a standby that fails over (StartPostgresPair). What differs
// between the engines is an Engine value: MySQL and Postgres.
package sqltest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"

	"github.com/runstate/runstate/internal/testsupport/serverproc"
)

// Engine is how tests reach one engine's servers; S is its scratch
// server (a scratch package's *Server). The package's MySQL and Postgres
// are the engines there are.
type Engine[S any] struct {
	// Name names the engine in messages ("MySQL").
	Name string
	// EnvDSN names the variable that points tests at a server.
	EnvDSN string
	// LocalDSN is tried when EnvDSN is unset.
	LocalDSN string
	// Hint says how to offer a server on this machine, for a skip message.
	Hint string
	// FromDSN returns the server a DSN points at, after checking that it
	// answers; source says where the DSN came from, for reports.
	FromDSN func(dsn, source string) (S, error)
	// Docker is the container started when no server answers.
	Docker Container
	// Package names the system package of the engine's binaries, which a
	// private server needs.
	Package string
	// startPrivate starts a private server in dir.
	startPrivate func(dir string) (*Private[S], error)

	shared *shared[S]
}

// Container is an engine's Docker image.
type Container struct {
	Repository, Tag string
	Env             []string
	// Port is the server's port in the container, e.g. 3306/tcp.
	Port string
	// DSN is the server's DSN, with %s for its host:port on this machine.
	DSN string
}

// shared is the server Find found (or why none), once per test process.
type shared[S any] struct {
	once   sync.Once
	server S
	err    error
}

// Find returns the engine's shared server: from EnvDSN, else on LocalDSN,
// else started in Docker with dockertest when an engine answers. Without
// one the test is skipped with a loud message, except under CI=true,
// where it fails: CI must never pass a test of the engine it did not run.
func (e Engine[S]) Find(t testing.TB) S {
	t.Helper()
	e.shared.once.Do(func() { e.shared.server, e.shared.err = e.find() })
	if err := e.shared.err; err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no %s server for the tests (CI=true forbids skipping): %v", e.Name, err)
		}
		t.Skipf("SKIPPING %s tests: no server reachable: %v. Set %s or %s.", e.Name, err, e.EnvDSN, e.Hint)
	}
	return e.shared.server
}

func (e Engine[S]) find() (S, error) {
	if dsn := os.Getenv(e.EnvDSN); dsn != "" {
		s, err := e.FromDSN(dsn, "environment")
		if err != nil {
			return s, fmt.Errorf("%s: %w", e.EnvDSN, err)
		}
		return s, nil
	}
	local, localErr := e.FromDSN(e.LocalDSN, "local")
	if localErr == nil {
		return local, nil
	}
	s, err := e.fromDocker()
	if err != nil {
		return s, fmt.Errorf("%s: %v; docker: %v", e.LocalDSN, localErr, err)
	}
	return s, nil
}

// fromDocker starts the engine's container with dockertest. The container
// lives until the test process ends (dockertest's expiry removes it after
// 10 minutes).
func (e Engine[S]) fromDocker() (S, error) {
	var s S
	pool, err := dockertest.NewPool("")
	if err != nil {
		return s, err
	}
	if err := pool.Client.Ping(); err != nil {
		return s, fmt.Errorf("no Docker engine: %w", err)
	}
	res, err := pool.Run(e.Docker.Repository, e.Docker.Tag, e.Docker.Env)
	if err != nil {
		return s, err
	}
	_ = res.Expire(600)
	dsn := fmt.Sprintf(e.Docker.DSN, "127.0.0.1:"+res.GetPort(e.Docker.Port))
	pool.MaxWait = 2 * time.Minute
	err = pool.Retry(func() (err error) {
		s, err = e.FromDSN(dsn, "docker")
		return err
	})
	return s, err
}

// Private is a server of one test's own: its data directory in a
// temporary directory and a port of its own, so that the test can kill it
// (Kill: SIGKILL, as a crash) and start it again (Start) without touching
// the server other tests share.
type Private[S any] struct {
	*serverproc.Server
	// Scratch makes scratch databases or schemas on it.
	Scratch S
}

// onFreePort starts the server that newPrivate makes for a port, on a port
// found free (serverproc.OnFreePorts: on another if it does not start).
func onFreePort[S any](newPrivate func(port string) (*Private[S], error)) (*Private[S], error) {
	return serverproc.OnFreePorts(1, func(ports []string) (*Private[S], error) {
		p, err := newPrivate(ports[0])
		if err != nil {
			return nil, err
		}
		return p, p.Start(context.Background())
	})
}

// StartPrivate initialises a data directory and starts a server of the
// engine on it. It needs the engine's binaries on this machine: without
// them the test is skipped, except under CI=true, where it fails.
func (e Engine[S]) StartPrivate(t testing.TB) *Private[S] {
	t.Helper()
	p := serverproc.Require(t, e.Name, e.Package, func() (*Private[S], error) {
		// A directory of its own, not the test's: a server that runs as
		// another user must reach it.
		dir, err := os.MkdirTemp("", "runstate-private-server-*")
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return e.startPrivate(dir)
	})
	t.Cleanup(func() { p.Kill() })
	return p
}
